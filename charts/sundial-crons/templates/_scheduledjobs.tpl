{{/*
ScheduledJobs from a Crons block, one per entry, with the job shorthand:
  {{ include "sundial-crons.scheduledjobs" (dict "crons" .Values.Crons "image" .Values.Image) }}
Optional keys: "namePrefix" (prepended to each entry's name), "timeZone" (the zone the
CronJobs ran in, default UTC). An entry: Schedule (required), Envs (MODE=cron and CRON_JOB
become cronJob, the rest env, by name), ConcurrencyPolicy (default Allow, the CronJob's),
Suspend, TtlSecondsAfterFinished, Resources, NodeSelector, Tolerations, Parallelism, Image.
The same mapping as `kubectl sundial import helm-values` (a test renders both).
*/}}
{{- define "sundial-crons.scheduledjobs" -}}
{{- $context := . -}}
{{- range $key, $cron := .crons }}
{{- $envs := $cron.Envs | default dict }}
{{- $cronJob := "" }}
{{- if and (eq (toString (get $envs "MODE")) "cron") (hasKey $envs "CRON_JOB") }}
{{- $cronJob = toString (get $envs "CRON_JOB") }}
{{- $envs = omit $envs "MODE" "CRON_JOB" }}
{{- end }}
---
apiVersion: sundial.dev/v1alpha1
kind: ScheduledJob
metadata:
  name: {{ printf "%s%s" ($context.namePrefix | default "") $key }}
spec:
  backend: kubernetes
  schedule: {{ required (printf "Crons.%s.Schedule is required" $key) $cron.Schedule | quote }}
  timeZone: {{ $context.timeZone | default "UTC" }}
  concurrencyPolicy: {{ $cron.ConcurrencyPolicy | default "Allow" }}
  suspend: {{ $cron.Suspend | default false }}
  job:
    image: {{ required (printf "Crons.%s: no Image, and none given" $key) ($cron.Image | default $context.image) | quote }}
    {{- with $cronJob }}
    cronJob: {{ . | quote }}
    {{- end }}
    {{- if $envs }}
    env:
      {{- range $name, $value := $envs }}
      - name: {{ $name | quote }}
        value: {{ toString $value | quote }}
      {{- end }}
    {{- end }}
    {{- if hasKey $cron "TtlSecondsAfterFinished" }}
    ttlSecondsAfterFinished: {{ $cron.TtlSecondsAfterFinished }}
    {{- end }}
    {{- with $cron.Resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $cron.NodeSelector }}
    nodeSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $cron.Tolerations }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $cron.Parallelism }}
    parallelism: {{ . }}
    {{- end }}
{{- end }}
{{- end -}}
