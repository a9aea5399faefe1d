"""The ScheduledJob API (sundial.dev/v1alpha1), its spec: the single source of truth.

`make crds` generates crds/scheduledjobs.sundial.dev.yaml from these models (see crdgen.py),
so every description, default, enum, range and CEL rule written here is what `kubectl apply`
enforces and what `kubectl explain` shows. Rules CEL cannot express (cron syntax, time-zone
names) are checked by the operator in schedule.py and reported in status.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

GROUP = "sundial.dev"
VERSION = "v1alpha1"
KIND = "ScheduledJob"
PLURAL = "scheduledjobs"
SINGULAR = "scheduledjob"
SHORT_NAMES = ["sj"]

# The CronJob carries the ScheduledJob's name, and the CronJob controller appends an
# 11-character suffix to make each Job's name, which must stay within 63 characters.
MAX_NAME_LENGTH = 52

Backend = Literal["kubernetes", "temporal"]
ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace", "BufferOne", "BufferAll", "CancelOther"]

# Go-style durations ("90s", "1h30m", "500ms"): the format Kubernetes users already write,
# and one CEL's duration() can parse, so ranges are checked at apply time.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"


def _cel(rule: str, message: str, **extra: str | bool) -> JsonValue:
    return {"rule": rule, "message": message, **extra}


def _preserve_unknown(description: str) -> Any:
    """A free-form subtree the apiserver keeps as is (validated elsewhere)."""
    return Field(
        default=None,
        description=description,
        json_schema_extra={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    )


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _zoned_time_string(field: str) -> dict[str, JsonValue]:
    """A time field's schema as a string that must be RFC 3339 with its zone: without the
    date-time format, which the apiserver would read as a CEL timestamp (then no rule
    could see a missing zone, taken for UTC)."""
    return {
        "format": None,
        "x-kubernetes-validations": [
            _cel(
                "self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}"
                "(\\\\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$')",
                f"{field} needs a time zone: write an RFC 3339 time ending in Z or an offset "
                "such as +01:00 (for example 2026-12-24T06:00:00Z)",
            )
        ],
    }


def _whole_seconds(field: str) -> JsonValue:
    """Temporal keeps interval durations in whole seconds and drops the rest silently
    (1500ms runs every second), so a fraction is refused rather than miscounted."""
    return _cel(
        "duration(self).getMilliseconds() % 1000 == 0",
        f"{field} must be a whole number of seconds (Temporal drops fractions of a second): "
        "write for example 2s or 1m30s, not 1500ms",
    )


class IntervalSpec(ApiModel):
    every: str = Field(
        description="How often the job runs, as a duration such as 30s, 5m or 1h.",
        pattern=DURATION_PATTERN,
        max_length=32,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel("duration(self) >= duration('1s')", "interval.every must be at least 1s"),
                _whole_seconds("interval.every"),
            ]
        },
    )
    offset: str | None = Field(
        default=None,
        description="Shifts every slot by this duration; slots are anchored at the Unix epoch.",
        pattern=DURATION_PATTERN,
        max_length=32,
        json_schema_extra={"x-kubernetes-validations": [_whole_seconds("interval.offset")]},
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.offset) || duration(self.offset) < duration(self.every)",
                    "interval.offset must be shorter than interval.every",
                )
            ]
        }
    )


class JobSpec(ApiModel):
    """The container job that runs, on either backend: a full template, or the shorthand
    fields. On kubernetes a CronJob runs it; on temporal Sundial's worker makes the Job
    when the schedule fires (docs/backends.md)."""

    template: dict[str, Any] | None = _preserve_unknown(
        "A full batch/v1 JobTemplateSpec (metadata and spec), copied into the CronJob. "
        "The apiserver validates it when the operator writes the CronJob; an error appears "
        "in the Ready condition. Mutually exclusive with the shorthand fields."
    )
    image: str | None = Field(
        default=None, description="Container image of the one-shot pod (shorthand).", min_length=1
    )
    command: list[str] | None = Field(default=None, description="Container entrypoint.")
    args: list[str] | None = Field(default=None, description="Arguments to the entrypoint.")
    env: list[dict[str, Any]] | None = Field(
        default=None,
        description="Environment variables (core/v1 EnvVar).",
        json_schema_extra={
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    )
    env_from: list[dict[str, Any]] | None = Field(
        default=None,
        description="Sources of environment variables (core/v1 EnvFromSource).",
        json_schema_extra={
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    )
    resources: dict[str, Any] | None = _preserve_unknown(
        "Compute resources (core/v1 ResourceRequirements)."
    )
    service_account_name: str | None = Field(
        default=None, description="Service account the pod runs as.", max_length=253
    )
    node_selector: dict[str, str] | None = Field(default=None, description="Node selector.")
    tolerations: list[dict[str, Any]] | None = Field(
        default=None,
        description="Tolerations (core/v1 Toleration).",
        json_schema_extra={
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    )
    security_context: dict[str, Any] | None = _preserve_unknown(
        "The container's core/v1 SecurityContext, over the defaults "
        "allowPrivilegeEscalation: false and capabilities.drop: [ALL]. In a namespace that "
        "enforces the restricted Pod Security Standard also set runAsNonRoot: true (and "
        "runAsUser when the image's user is not numeric)."
    )
    pod_security_context: dict[str, Any] | None = _preserve_unknown(
        "The pod's core/v1 PodSecurityContext, over the default seccompProfile "
        "{type: RuntimeDefault}."
    )
    parallelism: int | None = Field(default=None, ge=1, description="Pods run in parallel.")
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        description="How long a run may take before it is stopped (the Job's "
        "activeDeadlineSeconds; on temporal it also bounds the workflow that waits for it).",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        description="Seconds a finished Job is kept before deletion (shorthand default 300).",
    )
    cron_job: str | None = Field(
        default=None,
        description=(
            "Name of a job in the image's own registry: adds env MODE=cron and CRON_JOB=<name>, "
            "for services whose one image carries named one-shot jobs."
        ),
        min_length=1,
        max_length=253,
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.template) != has(self.image)",
                    "set either job.template or job.image (the shorthand), not both or neither",
                ),
                _cel(
                    "!has(self.template) || !(has(self.command) || has(self.args) || "
                    "has(self.env) || has(self.envFrom) || has(self.resources) || "
                    "has(self.serviceAccountName) || has(self.nodeSelector) || "
                    "has(self.tolerations) || has(self.parallelism) || "
                    "has(self.securityContext) || has(self.podSecurityContext) || "
                    "has(self.ttlSecondsAfterFinished) || has(self.cronJob))",
                    "job.template cannot be combined with shorthand fields "
                    "(command, args, env, ...): put them inside the template",
                ),
            ]
        }
    )


class RetryPolicy(ApiModel):
    initial_interval: str | None = Field(default=None, pattern=DURATION_PATTERN)
    backoff_coefficient: float | None = Field(default=None, ge=1)
    maximum_interval: str | None = Field(default=None, pattern=DURATION_PATTERN)
    maximum_attempts: int | None = Field(default=None, ge=0)
    non_retryable_error_types: list[str] | None = None

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.initialInterval) || !has(self.maximumInterval) || "
                    "duration(self.maximumInterval) >= duration(self.initialInterval)",
                    "retryPolicy.maximumInterval must not be shorter than initialInterval",
                )
            ]
        }
    )


class WorkflowSpec(ApiModel):
    """What runs on the temporal backend: the workflow each scheduled action starts."""

    type: str = Field(description="Workflow type name.", min_length=1, max_length=1000)
    task_queue: str = Field(description="Task queue of the workers.", min_length=1)
    id: str | None = Field(
        default=None,
        description="Workflow id prefix; Temporal appends the scheduled time. Default: "
        "the schedule id.",
        max_length=1000,
    )
    args: list[Any] | None = Field(
        default=None,
        description="JSON arguments passed to the workflow.",
        json_schema_extra={"items": {"x-kubernetes-preserve-unknown-fields": True}},
    )
    execution_timeout: str | None = Field(default=None, pattern=DURATION_PATTERN)
    run_timeout: str | None = Field(default=None, pattern=DURATION_PATTERN)
    task_timeout: str | None = Field(default=None, pattern=DURATION_PATTERN)
    retry_policy: RetryPolicy | None = None
    memo: dict[str, Any] | None = _preserve_unknown("Memo attached to each workflow run.")


ConnectionKind = Literal["TemporalConnection", "ClusterTemporalConnection"]


class ConnectionRef(ApiModel):
    """Which connection (connection_models.py) a temporal-backed ScheduledJob uses."""

    kind: ConnectionKind = Field(
        default="TemporalConnection",
        description="TemporalConnection (in the ScheduledJob's namespace) or "
        "ClusterTemporalConnection (if its namespaceSelector admits this namespace).",
    )
    name: str = Field(description="The connection's name.", min_length=1, max_length=253)


class MonitoringSpec(ApiModel):
    """What a healthy run looks like, declared once for both backends (docs/monitoring.md)."""

    start_grace: str | None = Field(
        default=None,
        description="How late a run may start before it is marked late (startDelay beyond "
        "it). Default 60s, plus spec.jitter on temporal.",
        pattern=DURATION_PATTERN,
        max_length=32,
    )
    max_run_duration: str | None = Field(
        default=None,
        description="A run still going after this is TimedOut in status (while it runs, and "
        "after) and sets RunTooLong. Reported, not enforced: to stop such a run, set the "
        "Job's activeDeadlineSeconds or workflow.executionTimeout.",
        pattern=DURATION_PATTERN,
        max_length=32,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "duration(self) >= duration('1s')",
                    "monitoring.maxRunDuration must be at least 1s",
                )
            ]
        },
    )
    failure_threshold: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Consecutive failed runs (Failed or TimedOut) before RunsFailing turns True.",
    )
    recovery_threshold: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Consecutive successful runs before RunsFailing turns False again.",
    )
    recent_runs_limit: int = Field(
        default=10, ge=0, le=50, description="Runs listed in status.recentRuns, newest first."
    )


def _minutes_or_more(field: str) -> dict[str, Any]:
    """A duration field's schema: Go's duration syntax, at least a minute (CEL)."""
    return {
        "pattern": DURATION_PATTERN,
        "max_length": 32,
        "json_schema_extra": {
            "x-kubernetes-validations": [
                _cel("duration(self) >= duration('1m')", f"{field} must be at least 1m")
            ]
        },
    }


class FailurePolicy(ApiModel):
    """What Sundial does about a job that keeps failing, the same on both backends
    (docs/policies.md)."""

    pause_after: int = Field(
        ge=1,
        le=100,
        description="Pause the job after this many consecutive failed runs (Failed or "
        "TimedOut): the CronJob is suspended, the Temporal schedule paused with a note. "
        "status.pause says which run tripped it. Lifted by `kubectl sundial resume`, by "
        "any change to the spec, by resumeAfter, or by a run now that succeeds.",
    )
    resume_after: str | None = Field(
        default=None,
        description="A cool-down: the pause lifts by itself this long after it began, and "
        "pauseAfter more failures pause it again. Default: paused until resumed.",
        **_minutes_or_more("failurePolicy.resumeAfter"),
    )


CatchUpPolicyName = Literal["None", "Latest", "All"]


class CatchUpPolicy(ApiModel):
    """Which slots run late after an outage (of the CronJob controller, of Temporal, or of
    Sundial) or after a maintenance window, the same on both backends
    (docs/backends.md has how each backend is told)."""

    policy: CatchUpPolicyName = Field(
        description="None: a slot that did not start within 15 s of its time never "
        "runs. Latest: only the most recent such slot runs, once, if it is within window. "
        "All: every such slot within window runs, oldest first, one at a time unless "
        "concurrencyPolicy is Allow (at most 100 per outage).",
    )
    window: str | None = Field(
        default=None,
        description="How late a missed slot may still run (Latest and All; default 1h, at "
        "least 1m). Slots older than this are missed, with their reason.",
        **_minutes_or_more("catchUp.window"),
    )


_TEMPORAL_ONLY_RULES: list[JsonValue] = [
    _cel(
        "!has(self.interval) || self.backend == 'temporal'",
        "interval is only supported with backend: temporal; use schedule",
        fieldPath=".interval",
    ),
    _cel(
        "!has(self.jitter) || self.backend == 'temporal'",
        "jitter is only supported with backend: temporal",
        fieldPath=".jitter",
    ),
    _cel(
        "!has(self.startTime) || self.backend == 'temporal'",
        "startTime is only supported with backend: temporal",
        fieldPath=".startTime",
    ),
    _cel(
        "!has(self.endTime) || self.backend == 'temporal'",
        "endTime is only supported with backend: temporal",
        fieldPath=".endTime",
    ),
    _cel(
        "!has(self.temporalConnectionRef) || self.backend == 'temporal'",
        "temporalConnectionRef is only supported with backend: temporal",
        fieldPath=".temporalConnectionRef",
    ),
    _cel(
        "self.backend == 'temporal' || !(self.concurrencyPolicy in "
        "['BufferOne', 'BufferAll', 'CancelOther'])",
        "concurrencyPolicy BufferOne, BufferAll and CancelOther are only supported with "
        "backend: temporal; use Allow, Forbid or Replace",
        fieldPath=".concurrencyPolicy",
    ),
]


class ScheduledJobSpec(ApiModel):
    backend: Backend = Field(
        default="kubernetes",
        description="Which scheduler runs the job: a native CronJob or a Temporal Schedule.",
    )
    schedule: str | None = Field(
        default=None,
        description=(
            "5-field cron expression (minute hour day-of-month month day-of-week) or a macro: "
            "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly. "
            "The time zone is spec.timeZone, never a TZ= prefix. H in the minute or hour "
            "field (H, H(0-9), H/15) spreads jobs: a value of its own per object, by a hash "
            "of its namespace and name, the same on both backends. Exactly one of schedule "
            "and interval."
        ),
        min_length=1,
        max_length=200,
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!self.contains('TZ=')",
                    "schedule must not contain TZ= or CRON_TZ=: set spec.timeZone instead",
                )
            ]
        },
    )
    interval: IntervalSpec | None = Field(
        default=None, description="Run every fixed duration (backend temporal only)."
    )
    time_zone: str = Field(
        default="UTC",
        description="IANA time zone the schedule is read in, on both backends (default UTC).",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_+\-/]+$",
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        default="Forbid",
        description=(
            "What happens when a run is due while the previous one is still running. "
            "Allow, Forbid, Replace on both backends; BufferOne, BufferAll, CancelOther on "
            "temporal only."
        ),
    )
    starting_deadline_seconds: int | None = Field(
        default=None,
        ge=0,
        description=(
            "How late a run may still start. kubernetes: the CronJob's "
            "startingDeadlineSeconds; temporal: the catch-up window (at least 10)."
        ),
    )
    suspend: bool = Field(default=False, description="Stop scheduling new runs.")
    suspend_note: str | None = Field(
        default=None,
        description="Why it is suspended, for whoever looks next: shown in the Ready "
        "condition and written to the Temporal schedule's pause note.",
        max_length=256,
    )
    suspend_until: datetime | None = Field(
        default=None,
        description="A maintenance window: no runs until this time (RFC 3339 with a zone, "
        "such as 2026-12-24T06:00:00Z), then the job resumes by itself, on both backends. "
        "Slots inside it are suspended, not missed. spec.suspendNote says why. A time "
        "already past has no effect (and says so in Ready). Not with suspend: true.",
        json_schema_extra=_zoned_time_string("suspendUntil"),
    )
    failure_policy: FailurePolicy | None = Field(
        default=None,
        description="Pause the job after consecutive failed runs (default: never paused).",
    )
    catch_up: CatchUpPolicy | None = Field(
        default=None,
        description="Which missed slots run late after an outage or a maintenance window: "
        "None, Latest or All within a window, the same on both backends. Default: each "
        "backend's own (startingDeadlineSeconds). Not with startingDeadlineSeconds.",
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.policy != 'None' || !has(self.window)",
                    "catchUp.window has no meaning with policy None (nothing runs late): "
                    "remove it, or choose Latest or All",
                    fieldPath=".window",
                )
            ]
        },
    )
    successful_runs_history_limit: int = Field(
        default=1, ge=0, le=100, description="Finished successful runs kept."
    )
    failed_runs_history_limit: int = Field(
        default=3, ge=0, le=100, description="Failed runs kept, for debugging."
    )
    jitter: str | None = Field(
        default=None,
        description="Random delay up to this duration per run (temporal only).",
        pattern=DURATION_PATTERN,
    )
    start_time: datetime | None = Field(
        default=None, description="No run before this time (temporal only)."
    )
    end_time: datetime | None = Field(
        default=None, description="No run after this time (temporal only)."
    )
    job: JobSpec | None = Field(
        default=None,
        description="The container job that runs, on either backend (on temporal, Sundial's "
        "worker runs it: no workflow of your own). kubernetes needs it; temporal needs it "
        "or workflow, not both.",
    )
    workflow: WorkflowSpec | None = Field(
        default=None,
        description="Your own workflow type, run by your own worker, on backend temporal: "
        "the alternative to job, not both (an object stored on temporal with both before "
        "that rule keeps them, and its workflow runs); ignored on kubernetes.",
    )
    monitoring: MonitoringSpec | None = Field(
        default=None,
        description="Thresholds for late, too long and failing runs (default: a run is late "
        "after 60s, one failure sets RunsFailing, one success clears it).",
    )
    temporal_connection_ref: ConnectionRef | None = Field(
        default=None,
        description="The TemporalConnection or ClusterTemporalConnection the schedule is "
        "made over (temporal only). Default: the operator's default "
        "ClusterTemporalConnection (SUNDIAL_DEFAULT_CONNECTION).",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.schedule) != has(self.interval)",
                    "set exactly one of spec.schedule and spec.interval",
                ),
                *_TEMPORAL_ONLY_RULES,
                _cel(
                    "self.backend != 'kubernetes' || has(self.job)",
                    "backend: kubernetes needs spec.job (an image or a template)",
                ),
                _cel(
                    "self.backend != 'temporal' || has(self.workflow) || has(self.job)",
                    "backend: temporal needs spec.job (a container Sundial's worker runs) "
                    "or spec.workflow (your own workflow type and taskQueue)",
                ),
                # Exactly one on temporal: the job, or a workflow of your own. An object
                # stored on temporal with both before this rule keeps them (ratcheting:
                # the rule sees the old object), and its workflow runs, as it did.
                _cel(
                    "self.backend != 'temporal' || !has(self.job) || !has(self.workflow) || "
                    "(oldSelf.hasValue() && oldSelf.value().backend == 'temporal' && "
                    "has(oldSelf.value().job) && has(oldSelf.value().workflow))",
                    "backend: temporal runs either spec.job (Sundial's worker runs the "
                    "container) or spec.workflow (your own workflow), not both: remove one",
                    optionalOldSelf=True,
                ),
                _cel(
                    "self.backend != 'temporal' || !has(self.startingDeadlineSeconds) || "
                    "self.startingDeadlineSeconds >= 10",
                    "startingDeadlineSeconds is Temporal's catch-up window, which must be "
                    "at least 10",
                    fieldPath=".startingDeadlineSeconds",
                ),
                _cel(
                    "!has(self.catchUp) || !has(self.startingDeadlineSeconds)",
                    "catchUp replaces startingDeadlineSeconds: set one of them (catchUp.window "
                    "is how late a missed slot may still run)",
                    fieldPath=".catchUp",
                ),
                _cel(
                    "!(has(self.suspend) && self.suspend) || !has(self.suspendUntil)",
                    "set suspend: true (until resumed) or suspendUntil (until a time), not both",
                    fieldPath=".suspendUntil",
                ),
                _cel(
                    "!has(self.startTime) || !has(self.endTime) || "
                    "timestamp(self.endTime) > timestamp(self.startTime)",
                    "endTime must be after startTime",
                ),
            ]
        }
    )
