{{/* The operator's name: the release name, so that a release named sundial renders the
same objects as manifests/ (a test compares them). */}}
{{- define "sundial.fullname" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "sundial.worker" -}}
{{- printf "%s-worker" (include "sundial.fullname" .) -}}
{{- end -}}

{{/* Helm's own labels, on every object; the selectors stay app.kubernetes.io/name. */}}
{{- define "sundial.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "sundial.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "sundial.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "sundial.fullname" .) -}}
{{- end -}}
