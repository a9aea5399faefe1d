"""A container job on temporal (spec.job with backend: temporal), as pure decisions: which
runs Sundial's worker may act on, the Job it makes for a run (its name fixed by the run, so
a retried activity, a restarted worker or a second one never makes a second), and what a
Job's end means for the workflow. The workflow and its activities are sundial.worker's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sundial.api import reasons
from sundial.api.models import GROUP, MissedRun, RecentRun, RunResult, ScheduledJob
from sundial.planning import catchup
from sundial.planning.cronjob import (
    cronjob_name,
    job_from_template,
    job_template,
    owner_reference,
    spec_hash,
)
from sundial.planning.pod_times import with_pod_times
from sundial.planning.runs import ObservedRun
from sundial.planning.summaries import PodsEnded
from sundial.planning.temporal_schedule import catchup_window, schedule_id

# The workflow a Job was made for: how the operator ties a run's workflow to its Job.
WORKFLOW_ID_ANNOTATION = f"{GROUP}/workflow-id"
WORKFLOW_RUN_ID_ANNOTATION = f"{GROUP}/workflow-run-id"

# Why the worker refuses a run (the workflow fails with this type, non-retryable).
NOT_SCHEDULED_BY_SUNDIAL = "NotScheduledBySundial"
SCHEDULEDJOB_GONE = "ScheduledJobGone"
NOT_A_JOB_ON_TEMPORAL = "NotAJobOnTemporal"
CONNECTION_NOT_ALLOWED = reasons.CONNECTION_NOT_ALLOWED


@dataclass(frozen=True)
class JobReference:
    """The workflow's input (planning/temporal_schedule.job_reference)."""

    namespace: str
    name: str
    uid: str
    job_hash: str

    @classmethod
    def from_input(cls, value: Any) -> JobReference:
        if not isinstance(value, dict):
            raise ValueError("the input is not a ScheduledJob reference")
        try:
            return cls(
                str(value["namespace"]), str(value["name"]), str(value["uid"]),
                str(value.get("jobHash", "")),
            )  # fmt: skip
        except KeyError as missing:
            raise ValueError(f"the ScheduledJob reference has no {missing}") from None


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def runs_on_worker(sj: ScheduledJob) -> bool:
    """Sundial's worker runs this object's job: backend temporal with spec.job and no
    spec.workflow (a workflow of the user's own runs instead when there is one)."""
    spec = sj.spec
    return spec.backend == "temporal" and spec.workflow is None and spec.job is not None


def refusal(
    reference: JobReference,
    sj: ScheduledJob | None,
    *,
    scheduled_by: str | None,
    prefix: str,
) -> Refusal | None:
    """Why the worker must make nothing for this run, or None. A run is acted on only if
    the ScheduledJob it names is there, the same object (uid), still a job on temporal, and
    the run was started by that object's own schedule (its triggers and backfills too, which
    Sundial's run-now and backfill use): access to Temporal is never the right to run Pods
    in a namespace."""
    own_schedule = schedule_id(prefix, reference.namespace, reference.name)
    if scheduled_by != own_schedule:
        return Refusal(
            NOT_SCHEDULED_BY_SUNDIAL,
            f"this run was not started by the schedule {own_schedule} Sundial made for "
            f"ScheduledJob {reference.namespace}/{reference.name} (started by "
            f"{scheduled_by or 'no schedule'}); nothing was created",
        )
    if sj is None or sj.metadata.uid != reference.uid:
        return Refusal(
            SCHEDULEDJOB_GONE,
            f"ScheduledJob {reference.namespace}/{reference.name} (uid {reference.uid}) is "
            "gone; nothing was created",
        )
    if not runs_on_worker(sj):
        return Refusal(
            NOT_A_JOB_ON_TEMPORAL,
            f"ScheduledJob {reference.namespace}/{reference.name} no longer runs a job on "
            "temporal; nothing was created",
        )
    return None


def too_late(sj: ScheduledJob, started: datetime, now: datetime) -> Refusal | None:
    """A run no worker took up within the object's catch-up window is not run, as
    Temporal's scheduler does not start a slot later than the window (its
    CatchupWindowExceeded): the window is the same, startingDeadlineSeconds, counted from
    when Temporal started the run (a backfill's starts now, however old its slot). The slot
    is then missed with the reason WorkerUnavailable (worker_misses), not failed."""
    if sj.spec.catch_up is not None:
        # How late the policy lets a slot run: a run no worker took up is a late slot.
        window, field = catchup.window(sj.spec), "catchUp"
    else:
        window, field = catchup_window(sj.spec), "startingDeadlineSeconds"
    waited = now - started
    if waited <= window:
        return None
    return Refusal(
        reasons.WORKER_UNAVAILABLE,
        f"no Sundial worker took this run up within the catch-up window "
        f"({field}: {window.total_seconds():g}s); it waited "
        f"{waited.total_seconds():.0f}s, so nothing was run",
    )


# A run whose Job has ended while its workflow still runs: the worker sees the end within
# its next look at the Job (activities.POLL_SECONDS, 5 s), then the workflow ends. Nothing
# else would wake the object then (the Job's last event has passed, and the schedule's
# listing does not change when a run ends), so it is looked at again this soon, not at the
# next resync (minutes).
WORKFLOW_END_RECHECK = timedelta(seconds=6)


def waiting_for_workflow_end(
    observed: Collection[ObservedRun], finished_jobs: Collection[str]
) -> bool:
    """A run still going by its workflow whose Job has ended (`finished_jobs`)."""
    return any(run.result == "Running" and run.job_name in finished_jobs for run in observed)


def worker_grace_ends(
    observed: Collection[ObservedRun], made: Collection[str], start_grace: timedelta,
    now: datetime,
) -> datetime | None:  # fmt: skip
    """When the first run still waiting for a worker (going, no Job made) has waited past
    the start grace, if that is still to come: the pass then says WorkerUnavailable
    (with_jobs). Nothing else wakes the object at that moment."""
    ends = [
        since + start_grace + timedelta(seconds=1)
        for run in observed
        if (since := _waiting_since(run, made)) is not None and since + start_grace >= now
    ]
    return min(ends, default=None)


def _waiting_since(run: ObservedRun, made: Collection[str]) -> datetime | None:
    """When a run still going with no Job made for it started: it waits for a worker."""
    if run.result != "Running" or run.job_name is None or run.job_name in made:
        return None
    return run.start_time


def worker_misses(newly_finished: Collection[RecentRun]) -> list[MissedRun]:
    """The slots of runs that ended because no worker took them up in time (too_late):
    missed, once each (a run is newly finished in one pass only)."""
    return [
        MissedRun(scheduled_time=run.scheduled_time, reason=reasons.WORKER_UNAVAILABLE)
        for run in newly_finished
        if run.result == "Cancelled" and run.reason == reasons.WORKER_UNAVAILABLE
    ]


def run_job_name(scheduledjob_name: str, workflow_id: str, run_id: str) -> str:
    """The Job of one run: fixed by the run (its workflow id holds the schedule id and the
    nominal time; the run id tells a backfill of a slot from the slot's own run), so every
    attempt of the activity, on any worker, names the same Job. 10 characters after the
    CronJob's name, as the CronJob controller's own suffix."""
    digest = hashlib.sha256(f"{workflow_id}/{run_id}".encode()).hexdigest()
    return f"{cronjob_name(scheduledjob_name)}-t{digest[:9]}"


def is_run_job(scheduledjob_name: str, job_name: str) -> bool:
    """The Job was made by Sundial's worker for one of the object's runs on temporal."""
    prefix = f"{cronjob_name(scheduledjob_name)}-t"
    rest = job_name.removeprefix(prefix)
    return rest != job_name and len(rest) == 9 and all(c in "0123456789abcdef" for c in rest)


def run_job_manifest(
    sj: ScheduledJob, name: str, scheduled: datetime, workflow_id: str, run_id: str
) -> dict[str, Any]:
    """The Job for one run, from the object's own job (as its CronJob's template would
    be): Sundial's labels (the operator's watch finds it), the scheduled-timestamp
    annotation (its slot), the workflow it runs for, and a controller owner reference to
    the ScheduledJob, so deleting the object takes its Jobs and their Pods along."""
    return job_from_template(
        job_template(sj),
        name,
        sj.metadata.namespace,
        scheduled,
        owner_reference(sj),
        {WORKFLOW_ID_ANNOTATION: workflow_id, WORKFLOW_RUN_ID_ANNOTATION: run_id},
    )


def job_hash(sj: ScheduledJob) -> str:
    """The version of the object's job a schedule was made with (its input's jobHash)."""
    return spec_hash(job_template(sj))


@dataclass(frozen=True)
class JobEnd:
    """How a Job ended, for the workflow: succeeded, or failed with the Job controller's
    reason (BackoffLimitExceeded, DeadlineExceeded, ...) and the container's own words."""

    succeeded: bool
    reason: str | None = None
    message: str | None = None


def job_end(job: dict[str, Any], summary: str | None) -> JobEnd | None:
    """None while the Job runs. `summary`: the last Pod's termination message, if any."""
    status = job.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if (conditions.get("Complete") or {}).get("status") == "True":
        return JobEnd(succeeded=True, message=summary)
    failed = conditions.get("Failed") or {}
    if failed.get("status") == "True":
        reason = failed.get("reason") or "JobFailed"
        words = summary or failed.get("message") or reason
        return JobEnd(succeeded=False, reason=reason, message=words)
    return None


# A failed workflow's type is its Job's reason: the same results as a CronJob's Job's
# (runs.job_run), so a run reads the same on either backend.
# A run no worker took up in time never ran: Cancelled (no failure streak), its slot missed.
_JOB_RESULTS: dict[str, RunResult] = {
    "DeadlineExceeded": "TimedOut", "JobDeleted": "Cancelled",
    reasons.WORKER_UNAVAILABLE: "Cancelled",
}  # fmt: skip


def _as_job_run(run: ObservedRun, job_name: str) -> ObservedRun:
    result = _JOB_RESULTS.get(run.reason or "", run.result) if run.result == "Failed" else None
    return replace(run, job_name=job_name, result=result or run.result)


def with_jobs(
    scheduledjob_name: str,
    observed: list[ObservedRun],
    pods_ended: Callable[[str], PodsEnded | None],
    *,
    made: Collection[str],
    start_grace: timedelta,
    now: datetime,
) -> list[ObservedRun]:
    """A job on temporal's runs, as its workflows show them, with each one's Job (named by
    its run) and, once ended, the Job's Pods' own start and finish and the summary the
    last Pod left (`pods_ended(job_name)`: the Pod watch's record; None keeps the
    workflow's times). A run still going with no Job made for it (`made`: the Jobs the
    watch shows) `start_grace` after it started waits for a worker: WorkerUnavailable,
    what Temporal's own UI does not tell."""
    named = [
        _as_job_run(run, run_job_name(scheduledjob_name, run.workflow_id, run.run_id))
        if run.workflow_id and run.run_id
        else run
        for run in observed
    ]
    waiting = [
        replace(run, reason=reasons.WORKER_UNAVAILABLE, message=(
            "no Sundial worker has taken this run up (no Job made): is `sundial worker` "
            "running and serving the ScheduledJob's connection?"))
        if (since := _waiting_since(run, made)) is not None and now - since > start_grace
        else run
        for run in named
    ]  # fmt: skip
    ended = {
        run.job_name: pods_ended(run.job_name)
        for run in waiting
        if run.job_name and run.result != "Running"
    }
    return with_pod_times(waiting, ended)
