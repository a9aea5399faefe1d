"""The ScheduledJob API (sundial.dev/v1alpha1): the single source of truth.

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


def _cel(rule: str, message: str, **extra: str) -> JsonValue:
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
    """What runs on the kubernetes backend: a full template, or the shorthand fields."""

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
    parallelism: int | None = Field(default=None, ge=1, description="Pods run in parallel.")
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
            "The time zone is spec.timeZone, never a TZ= prefix. Exactly one of schedule "
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
    job: JobSpec | None = Field(default=None, description="What runs on the kubernetes backend.")
    workflow: WorkflowSpec | None = Field(
        default=None, description="What runs on the temporal backend."
    )
    monitoring: MonitoringSpec | None = Field(
        default=None,
        description="Thresholds for late, too long and failing runs (default: a run is late "
        "after 60s, one failure sets RunsFailing, one success clears it).",
    )
    temporal_connection_ref: ConnectionRef | None = Field(
        default=None,
        description="The TemporalConnection or ClusterTemporalConnection the schedule is "
        "made over (temporal backend). Default: the operator's default "
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
                    "self.backend != 'temporal' || has(self.workflow)",
                    "backend: temporal needs spec.workflow (type and taskQueue)",
                ),
                _cel(
                    "self.backend != 'temporal' || !has(self.startingDeadlineSeconds) || "
                    "self.startingDeadlineSeconds >= 10",
                    "startingDeadlineSeconds is Temporal's catch-up window, which must be "
                    "at least 10",
                    fieldPath=".startingDeadlineSeconds",
                ),
                _cel(
                    "!has(self.startTime) || !has(self.endTime) || "
                    "timestamp(self.endTime) > timestamp(self.startTime)",
                    "endTime must be after startTime",
                ),
            ]
        }
    )


# ---- status -------------------------------------------------------------------------


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: datetime
    observed_generation: int | None = None


class BackendRef(ApiModel):
    kind: Literal["CronJob", "TemporalSchedule"]
    name: str | None = Field(default=None, description="The CronJob's name.")
    namespace: str | None = Field(
        default=None, description="Kubernetes namespace, or the Temporal namespace."
    )
    schedule_id: str | None = Field(default=None, description="The Temporal schedule id.")
    address: str | None = Field(
        default=None, description="The Temporal frontend the schedule was made at."
    )
    connection: ConnectionRef | None = Field(
        default=None, description="The connection the schedule was made over."
    )


MissReason = Literal[
    "ControllerDown",
    "DeadlineExceeded",
    "CatchupWindowExceeded",
    "BufferDropped",
    "TooManyMissed",
    "OverlapSkipped",
    # Sundial cannot tell: no evidence either way (it did not watch, the Job and the
    # controller's Events are gone). Shown, never counted as missed.
    "Unknown",
]


class MissedRun(ApiModel):
    scheduled_time: datetime
    reason: MissReason
    approximate: bool | None = Field(
        default=None,
        description="True when the backend counted the run but did not say which slot it "
        "was (Temporal, with jitter or more slots than its recent actions cover): the time "
        "is Sundial's best attribution; the totals are exact either way.",
    )


RunResult = Literal[
    "Running", "Succeeded", "Failed", "TimedOut", "Cancelled", "Terminated",
    # The run's end was not seen (its Job went while the operator was not watching).
    "Unknown",
]  # fmt: skip


class RecentRun(ApiModel):
    """One run, the same shape on both backends (docs/monitoring.md has each field's
    source per backend)."""

    scheduled_time: datetime = Field(description="The slot the run was for.")
    start_time: datetime | None = Field(default=None, description="When it started.")
    completion_time: datetime | None = Field(default=None, description="When it ended.")
    result: RunResult
    duration_seconds: float | None = Field(
        default=None, description="completionTime - startTime, once it ended."
    )
    start_delay_seconds: float | None = Field(
        default=None, description="startTime - scheduledTime."
    )
    late: bool | None = Field(
        default=None, description="True when startDelay exceeded monitoring.startGrace."
    )
    reason: str | None = Field(
        default=None,
        description="Why it failed or ended: the Job condition's reason (BackoffLimitExceeded, "
        "DeadlineExceeded) or the workflow's failure type; MaxRunDurationExceeded.",
    )
    message: str | None = Field(default=None, max_length=1024)
    requested: str | None = Field(
        default=None,
        description="Set on a run a person asked for: RunNow/<id> or Backfill/<id> "
        "(status.requests). A backfilled run is never late or missed.",
    )
    job_name: str | None = Field(default=None, description="The Job (kubernetes).")
    workflow_id: str | None = Field(default=None, description="The workflow (temporal).")
    run_id: str | None = Field(default=None, description="The workflow run (temporal).")


RequestKind = Literal["RunNow", "Backfill"]
RequestOutcome = Literal["InProgress", "Done", "Refused"]


class RequestStatus(ApiModel):
    """A run-now or backfill request (annotations sundial.dev/run-now, sundial.dev/backfill)
    as Sundial handled it; acted on once per id, the id kept here so it never is again."""

    kind: RequestKind
    id: str = Field(max_length=63)
    outcome: RequestOutcome
    message: str = Field(default="", max_length=1024)
    received_time: datetime = Field(description="When Sundial first saw the request.")
    start: datetime | None = Field(default=None, description="Backfill: the range's start.")
    end: datetime | None = Field(default=None, description="Backfill: the range's end.")
    runs_requested: int = Field(default=0, description="Runs the request asks for.")
    runs_started: int = Field(
        default=0, description="Runs started so far; the rest wait (Forbid: one at a time)."
    )


class TemporalCounters(ApiModel):
    """describe() counters as last seen; a rise since then is a newly missed or skipped run."""

    missed_catchup_window: int = 0
    overlap_skipped: int = 0
    buffer_dropped: int = 0


class RunAccounting(ApiModel):
    """Where missed-run detection stands; kept in status so that slots passing while the
    operator is down are still judged, once, when it returns."""

    accounted_until: datetime = Field(
        description="Every slot up to this time has been judged: ran, missed or skipped."
    )
    spec_hash: str | None = Field(
        default=None, description="The schedule the slots were computed from."
    )
    temporal_counters: TemporalCounters | None = None
    unmet_streak: int | None = Field(
        default=None,
        description="Consecutive slots the CronJob controller has not started, up to the "
        "watermark: beyond 100 a miss is TooManyMissed, as the controller's own warning.",
    )


class ScheduledJobStatus(ApiModel):
    # Status written by an older operator may hold fields this one no longer knows.
    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    backend: Backend | None = Field(default=None, description="The backend in effect.")
    backend_ref: BackendRef | None = None
    last_schedule_time: datetime | None = Field(
        default=None, description="When the latest run was scheduled."
    )
    last_successful_time: datetime | None = Field(
        default=None, description="When the latest successful run finished."
    )
    active: int | None = Field(default=None, description="Runs in progress.")
    last_failed_time: datetime | None = Field(
        default=None, description="When the latest failed or timed-out run ended."
    )
    last_result: str | None = Field(
        default=None,
        description="The newest run's result, or Suspended while spec.suspend is true.",
    )
    consecutive_failures: int | None = Field(
        default=None, description="Failed or timed-out runs since the last success."
    )
    consecutive_successes: int | None = Field(
        default=None, description="Successful runs since the last failure."
    )
    recent_runs: list[RecentRun] = Field(
        default_factory=list, max_length=50, description="The latest runs, newest first."
    )
    requests: list[RequestStatus] = Field(
        default_factory=list,
        max_length=10,
        description="The latest run-now and backfill requests and what became of them.",
    )

    next_run_times: list[datetime] = Field(
        default_factory=list,
        description="The next scheduled runs, by the backend's own cron semantics.",
    )
    missed_runs: int | None = Field(default=None, description="Missed runs, ever.")
    skipped_runs: int | None = Field(default=None, description="Runs skipped by overlap policy.")
    last_missed_time: datetime | None = None
    recent_missed_runs: list[MissedRun] = Field(default_factory=list, max_length=10)
    run_accounting: RunAccounting | None = None
    spec_hash: str | None = Field(
        default=None, description="Hash of the spec the backend was last written from."
    )
    backend_fingerprint: str | None = Field(
        default=None,
        description="Hash of the Temporal schedule as the server held it after Sundial's last "
        "write; a different hash on the server means an out-of-band change.",
    )


class ObjectMeta(BaseModel):
    """Only what the operator reads; the apiserver owns the rest."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    name: str
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    resource_version: str = Field(default="", alias="resourceVersion")
    creation_timestamp: datetime | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: datetime | None = Field(default=None, alias="deletionTimestamp")
    finalizers: list[str] = Field(default_factory=list)
    annotations: dict[str, str] = Field(default_factory=dict)


class ScheduledJob(BaseModel):
    """The whole object. The CRD's root schema is generated from spec and status."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    metadata: ObjectMeta
    spec: ScheduledJobSpec
    status: ScheduledJobStatus = Field(default_factory=ScheduledJobStatus)
