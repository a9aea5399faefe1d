"""The ScheduledJob's status (sundial.dev/v1alpha1): what the operator observed, rebuilt on
every pass (status.py). Generated into the CRD with the spec (crdgen.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from sundial.api import reasons
from sundial.api.spec_models import ApiModel, Backend, ConnectionRef

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    type: str = Field(description="One of: " + ", ".join(reasons.CONDITION_TYPES) + ".")
    status: ConditionStatus
    reason: str = Field(
        description="Why, in CamelCase. Ready: "
        + ", ".join(sorted(reasons.READY_REASONS))
        + ". RunsMissed: NoMissedRuns, RanOnTime, or the newest miss's reason. Others: "
        + ", ".join(sorted(reasons.CONDITION_REASONS - reasons.READY_REASONS
                           - {reasons.NO_MISSED_RUNS, reasons.RAN_ON_TIME}))
        + "."
    )  # fmt: skip
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
    # A job on temporal's run that no Sundial worker took up within the catch-up window.
    "WorkerUnavailable",
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
        default=None,
        description="startTime - scheduledTime; for a run now that waited for a running "
        "run (concurrencyPolicy other than Allow), from when that run ended.",
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
        description="Set on a run a person asked for, RunNow/<id> or Backfill/<id>, or one "
        "spec.catchUp runs late, CatchUp/<id> (status.requests). A backfilled run is never "
        "late or missed; a caught-up one is late.",
    )
    job_name: str | None = Field(default=None, description="The Job (kubernetes).")
    workflow_id: str | None = Field(default=None, description="The workflow (temporal).")
    run_id: str | None = Field(default=None, description="The workflow run (temporal).")


RequestKind = Literal["RunNow", "Backfill", "CatchUp"]
RequestOutcome = Literal["InProgress", "Done", "Refused"]


class RequestStatus(ApiModel):
    """A run-now or backfill request (annotations sundial.dev/run-now, sundial.dev/backfill)
    as Sundial handled it, or a catch-up Sundial decided on itself (spec.catchUp); acted on
    once per id, the id kept here so it never is again."""

    kind: RequestKind
    id: str = Field(max_length=63)
    outcome: RequestOutcome
    message: str = Field(default="", max_length=1024)
    received_time: datetime = Field(description="When Sundial first saw the request.")
    start: datetime | None = Field(
        default=None, description="Backfill, CatchUp: the range's start."
    )
    end: datetime | None = Field(default=None, description="Backfill, CatchUp: the range's end.")
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


class CountedRun(ApiModel):
    """An ended run already counted: its Job, or its workflow id, and when it ended."""

    name: str
    ended: datetime


PauseReason = Literal["Suspended", "MaintenanceWindow", "FailurePolicy"]


class PauseStatus(ApiModel):
    """Why the backend schedules nothing now (planning/pausing.py decides)."""

    reason: PauseReason = Field(
        description="Suspended (spec.suspend), MaintenanceWindow (spec.suspendUntil) or "
        "FailurePolicy (failurePolicy.pauseAfter consecutive failed runs)."
    )
    message: str = Field(default="", max_length=1024)
    since: datetime | None = Field(default=None, description="When the pause began.")
    until: datetime | None = Field(
        default=None, description="When it lifts by itself (suspendUntil, resumeAfter)."
    )
    tripped_by: datetime | None = Field(
        default=None, description="FailurePolicy: the slot of the failed run that tripped it."
    )
    failures: int | None = Field(
        default=None, description="FailurePolicy: the consecutive failures that tripped it."
    )
    generation: int | None = Field(
        default=None,
        description="FailurePolicy: the spec's generation when it tripped (a spec change "
        "lifts it).",
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
    pending_backend_ref: BackendRef | None = Field(
        default=None,
        description="Where Sundial is about to make the backend's object (a Temporal "
        "schedule at a connection backendRef does not name): recorded before the create, "
        "so a move or the deletion also finds a schedule whose creation was never "
        "recorded in backendRef (its status write refused, the operator killed). Cleared "
        "once backendRef names it.",
    )
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
        description="The newest run's result; Suspended while spec.suspend or a maintenance "
        "window holds it, PausedByFailurePolicy while the failure policy does.",
    )
    consecutive_failures: int | None = Field(
        default=None, description="Failed or timed-out runs since the last success."
    )
    consecutive_successes: int | None = Field(
        default=None, description="Successful runs since the last failure."
    )
    pause: PauseStatus | None = Field(
        default=None,
        description="Why no run is scheduled now, and until when: spec.suspend, a "
        "maintenance window, or the failure policy.",
    )
    failures_before_resume: int | None = Field(
        default=None,
        description="Bookkeeping: consecutive failures already counted toward a failure "
        "pause that was lifted; the next pause needs failurePolicy.pauseAfter more.",
    )
    recent_runs: list[RecentRun] = Field(
        default_factory=list, max_length=50, description="The latest runs, newest first."
    )
    counted_runs: list[CountedRun] = Field(
        default_factory=list,
        max_length=200,
        description="Bookkeeping: the ended runs counted (lastSuccessfulTime, "
        "lastFailedTime, the streaks), those with the latest ends, so a run that ended "
        "before one already counted is still counted, once.",
    )
    unseen_runs: int | None = Field(
        default=None,
        description="Runs that ended unseen: kubernetes, their Jobs were deleted (a TTL, "
        "many at once) before a pass read them; temporal, the schedule took more actions "
        "than the executions Temporal still keeps (retention). Not in the streaks, "
        "lastSuccessfulTime, lastFailedTime or sundial_runs_total "
        "(sundial_unseen_runs_total counts them): the gap, stated.",
    )
    seen_actions: int | None = Field(
        default=None,
        description="Bookkeeping (temporal): the schedule's action count whose runs Sundial "
        "has seen; more actions since than describe's recent actions hold are listed.",
    )
    counted_since: datetime | None = Field(
        default=None,
        description="Bookkeeping: a run that ended at or before this and is not among "
        "countedRuns was counted before countedRuns kept it.",
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
