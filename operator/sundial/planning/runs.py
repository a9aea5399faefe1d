"""Every run's outcome, duration and lateness, and the failing and recovering streaks. Pure;
`now` is passed in.

The backends say what their runs look like now (`ObservedRun`: the Jobs in the watch cache,
the workflow executions a schedule started); `run_history` merges that with the runs the
previous status listed, so a run stays listed after its Job or execution is gone, and moves
the streak counters by the runs that ended since the last pass. A run is counted once: when
it is seen ended and it is not among the runs counted before (status.countedRuns, the
MAX_COUNTED_RUNS latest ends, and the ended runs listed), whatever order runs end in; a run
that ended at or before countedSince (the latest end the bounded memory let go, or the old
watermark lastSuccessfulTime/lastFailedTime for a status written before countedRuns) is old
news. docs/monitoring.md has the definitions for users.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sundial.api import reasons
from sundial.api.models import (
    CountedRun,
    MonitoringSpec,
    RecentRun,
    RunResult,
    ScheduledJobSpec,
    ScheduledJobStatus,
)
from sundial.planning.missed import JobRecord
from sundial.planning.schedule import parse_duration, parse_time

DEFAULT_START_GRACE = timedelta(seconds=60)
FAILED_RESULTS: frozenset[RunResult] = frozenset({"Failed", "TimedOut"})
MESSAGE_LIMIT = 1024
# Ended runs remembered as counted: more than a backend shows again (the Jobs the history
# limits keep and the watch cache's departed ones; a schedule's listed executions).
# Runs end out of order only as deep as they overlap (Allow, a backfill): 32 latest ends
# cover that, and each entry is status every object carries and every write sends (100 were
# about 10 KB an object: 50 MB more in the watch cache at 5,000 objects).
MAX_COUNTED_RUNS = 32


@dataclass(frozen=True)
class ObservedRun:
    """A run as its backend shows it in this pass."""

    scheduled_time: datetime
    result: RunResult
    start_time: datetime | None = None
    completion_time: datetime | None = None
    reason: str | None = None
    message: str | None = None
    job_name: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None
    requested: str | None = None


@dataclass(frozen=True)
class Limits:
    """spec.monitoring with its defaults filled in."""

    start_grace: timedelta = DEFAULT_START_GRACE
    max_run_duration: timedelta | None = None
    failure_threshold: int = 1
    recovery_threshold: int = 1
    recent_runs: int = 10
    # A run now waits while a run is going (concurrencyPolicy other than Allow, as the
    # default Forbid): its lateness counts from when it could start, not from the request.
    run_now_waits: bool = True


def limits(spec: ScheduledJobSpec) -> Limits:
    monitoring = spec.monitoring or MonitoringSpec()
    jitter = parse_duration(spec.jitter) if spec.jitter else timedelta(0)
    grace = (
        parse_duration(monitoring.start_grace)
        if monitoring.start_grace
        else DEFAULT_START_GRACE + jitter
    )
    return Limits(
        start_grace=grace,
        max_run_duration=(
            parse_duration(monitoring.max_run_duration) if monitoring.max_run_duration else None
        ),
        failure_threshold=monitoring.failure_threshold,
        recovery_threshold=monitoring.recovery_threshold,
        recent_runs=monitoring.recent_runs_limit,
        run_now_waits=spec.concurrency_policy != "Allow",
    )


@dataclass(frozen=True)
class RunHistory:
    limits: Limits  # what it was built with, and what its conditions are judged by
    recent_runs: list[RecentRun]
    consecutive_failures: int
    consecutive_successes: int
    last_successful_time: datetime | None
    last_failed_time: datetime | None
    # Runs seen started, and seen ended, for the first time in this pass (metrics, Events).
    newly_started: list[RecentRun] = field(default_factory=list)
    newly_finished: list[RecentRun] = field(default_factory=list)
    running: int = 0
    # When a run still going crosses maxRunDuration: the pass should look again then.
    wake_at: datetime | None = None
    # The Jobs this history was built from: once it is written, deleted ones can go.
    observed_jobs: frozenset[str] = frozenset()
    # The runs counted (status.countedRuns), latest ends first, and the end at or before
    # which a run not among them is taken as counted (status.countedSince).
    counted_runs: list[CountedRun] = field(default_factory=list)
    counted_since: datetime | None = None
    # Runs that ended unseen (status.unseenRuns), and how many this pass added.
    unseen_runs: int = 0
    unseen_added: int = 0


def run_key(run: RecentRun | ObservedRun) -> str:
    """The run's identity: its Job, or its workflow (one workflow id per scheduled action)."""
    return run.job_name or run.workflow_id or run.scheduled_time.isoformat()


def is_finished(run: RecentRun) -> bool:
    return run.completion_time is not None or run.result in ("Unknown", "Cancelled", "Terminated")


def record(
    observed: ObservedRun, limits: Limits, now: datetime, ready: datetime | None = None
) -> RecentRun:
    """The status entry of an observed run: durations, lateness (from `ready`, when it
    could start, by default its slot), and TimedOut once it ran (or has been running)
    longer than maxRunDuration."""
    start, end = observed.start_time, observed.completion_time
    result, reason, message = observed.result, observed.reason, observed.message
    backfilled = (observed.requested or "").startswith("Backfill/")
    # A backfilled run starts long after its slot by design: never late.
    delay = (
        (start - (ready or observed.scheduled_time)).total_seconds()
        if start is not None and not backfilled
        else None
    )
    ran = (end or now) - start if start is not None else None
    limit = limits.max_run_duration
    if limit is not None and ran is not None and ran > limit and result in ("Running", "Succeeded"):
        result, reason = "TimedOut", reasons.MAX_RUN_DURATION_EXCEEDED
        verb = "ran" if end is not None else "has been running"
        message = f"{verb} longer than monitoring.maxRunDuration ({limit.total_seconds():g}s)"
    return RecentRun(
        scheduled_time=observed.scheduled_time,
        start_time=start,
        completion_time=end,
        result=result,
        duration_seconds=round((end - start).total_seconds(), 3) if start and end else None,
        start_delay_seconds=round(delay, 3) if delay is not None else None,
        late=True if delay is not None and delay > limits.start_grace.total_seconds() else None,
        reason=reason,
        message=message[:MESSAGE_LIMIT] if message else None,
        requested=observed.requested,
        job_name=observed.job_name,
        workflow_id=observed.workflow_id,
        run_id=observed.run_id,
    )


def run_history(
    previous: ScheduledJobStatus,
    observed: list[ObservedRun],
    limits: Limits,
    now: datetime,
    *,
    complete: bool,
    unseen: int = 0,
) -> RunHistory:
    """The runs to list, newest first, and the streaks moved by the runs newly ended.

    `complete`: `observed` holds every run the backend still knows (the kubernetes watch
    cache); a listed run still going that is not among them ended unseen (Unknown). The
    temporal backend looks runs up within a budget, so what it did not look up stays.
    `unseen`: runs the backend knows ended but could not see (Jobs deleted and let go
    before a pass read them; a schedule's executions past Temporal's retention,
    `unseen_actions`): stated in unseenRuns, not in the streaks."""
    before = {run_key(run): run for run in previous.recent_runs}
    runs = dict(before)
    ends = [run.completion_time for run in previous.recent_runs if run.completion_time]
    ends += [run.completion_time for run in observed if run.completion_time]
    for seen in observed:
        key = run_key(seen)
        if key in before and is_finished(before[key]):
            continue  # an ended run's record is final (its times may be its Pods')
        runs[key] = record(seen, limits, now, ready=could_start(seen, ends, limits))
    observed_keys = {run_key(seen) for seen in observed}
    if complete:
        for key, run in before.items():
            if key not in observed_keys and not is_finished(run):
                runs[key] = run.model_copy(
                    update={
                        "result": "Unknown",
                        "reason": reasons.NOT_OBSERVED,
                        "message": "its Job was gone before Sundial saw it end",
                    }
                )
    counted = {run.name for run in previous.counted_runs}
    counted |= {key for key, run in before.items() if is_finished(run)}
    counted_since = counted_floor(previous)
    newly_finished = sorted(
        (
            run
            for key, run in runs.items()
            if is_finished(run) and key not in counted and _after(run, counted_since)
        ),
        key=lambda run: run.completion_time or now,
    )
    failures = previous.consecutive_failures or 0
    successes = previous.consecutive_successes or 0
    last_success, last_failure = previous.last_successful_time, previous.last_failed_time
    for run in newly_finished:
        if run.result == "Succeeded":
            failures, successes = 0, successes + 1
            last_success = _later(last_success, run.completion_time)
        elif run.result in FAILED_RESULTS and run.completion_time is not None:
            failures, successes = failures + 1, 0
            last_failure = _later(last_failure, run.completion_time)
    newly_started = [
        run
        for key, run in runs.items()
        if run.start_time is not None
        and (key not in before or before[key].start_time is None)
        and key not in counted
        and _after(run, counted_since)
    ]
    counted_runs, counted_since = _remember(previous, newly_finished, counted_since)
    ordered = sorted(runs.values(), key=lambda run: (run.scheduled_time, run_key(run)))
    ordered.reverse()
    going = [run for run in ordered if not is_finished(run)]
    wakes = [
        # Just past the limit: at it exactly the run has not yet run longer.
        run.start_time + limits.max_run_duration + timedelta(seconds=1)
        for run in going
        if limits.max_run_duration is not None
        and run.start_time is not None
        and run.result == "Running"
    ]
    return RunHistory(
        limits=limits,
        recent_runs=ordered[: limits.recent_runs],
        consecutive_failures=failures,
        consecutive_successes=successes,
        last_successful_time=last_success,
        last_failed_time=last_failure,
        newly_started=newly_started,
        newly_finished=newly_finished,
        running=len(going),
        wake_at=min(wakes, default=None),
        observed_jobs=frozenset(seen.job_name for seen in observed if seen.job_name),
        counted_runs=counted_runs,
        counted_since=counted_since,
        unseen_runs=(previous.unseen_runs or 0) + unseen,
        unseen_added=unseen,
    )


def counted_floor(previous: ScheduledJobStatus) -> datetime | None:
    """countedSince: a run that ended at or before it and is not among countedRuns is old
    news. For a status written before countedRuns, the old watermark, the latest end
    counted. So a run still to count ended after it (or has not ended)."""
    if previous.counted_runs:
        return previous.counted_since
    ends = (previous.last_successful_time, previous.last_failed_time)
    return max((t for t in ends if t), default=None)


def unseen_actions(seen: int | None, taken: int, kept: int) -> int:
    """The runs of a Temporal schedule's actions since status.seenActions (`seen`) that
    Sundial can no longer see: `taken` is Temporal's own count of the actions it took
    (info.num_actions), `kept` the schedule's executions Temporal still has (its
    visibility count, at least the runs found). Retention deletes the oldest first, so
    while anything older is kept every new action's run is kept too; more actions taken
    than executions kept is the gap, stated (status.unseenRuns), never dropped. No
    baseline (a status from before seenActions) or a count that went back (a schedule
    made anew): nothing is claimed."""
    if seen is None or taken <= seen:
        return 0
    return max(0, taken - seen - kept)


def _remember(
    previous: ScheduledJobStatus,
    newly_finished: list[RecentRun],
    counted_since: datetime | None,
) -> tuple[list[CountedRun], datetime | None]:
    """The counted runs to remember: the MAX_COUNTED_RUNS latest ends, latest first; the
    ends let go raise countedSince, so a run ending no later than them stays old news."""
    ends = {run.name: run.ended for run in previous.counted_runs}
    for run in [*previous.recent_runs, *newly_finished]:
        if is_finished(run) and run.completion_time is not None:
            ends.setdefault(run_key(run), run.completion_time)
    ordered = sorted(ends.items(), key=lambda item: (item[1], item[0]), reverse=True)
    kept, let_go = ordered[:MAX_COUNTED_RUNS], ordered[MAX_COUNTED_RUNS:]
    if let_go:
        counted_since = _later(counted_since, let_go[0][1])
    return [CountedRun(name=name, ended=ended) for name, ended in kept], counted_since


def could_start(run: ObservedRun, ends: list[datetime], limits: Limits) -> datetime:
    """When the run could start: its slot (a run now's is when the request was received),
    or, for a run now that waited by the concurrency policy, when the run it waited for
    ended: the latest end of another run between the request and its start."""
    if not limits.run_now_waits or run.start_time is None:
        return run.scheduled_time
    if not (run.requested or "").startswith("RunNow/"):
        return run.scheduled_time
    waited = [end for end in ends if run.scheduled_time < end <= run.start_time]
    return max(waited, default=run.scheduled_time)


def _after(run: RecentRun, counted_since: datetime | None) -> bool:
    """Not old news: a run still going, or one that ended after countedSince. Older ends
    not remembered (a Job kept by the history limits whose name the bounded memory let
    go) were counted when they happened."""
    if counted_since is None or run.completion_time is None:
        return True
    return run.completion_time > counted_since


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def job_run(job: JobRecord) -> ObservedRun:
    """A run on the kubernetes backend, from the Job the CronJob controller made: a
    DeadlineExceeded failure (activeDeadlineSeconds) is TimedOut; a Job deleted before it
    ended (Replace, or by hand) is Cancelled."""
    result: RunResult
    reason, message = job.reason, job.message
    if job.succeeded:
        result = "Succeeded"
    elif job.failed:
        result = "TimedOut" if job.reason == "DeadlineExceeded" else "Failed"
    elif job.deleted:
        result, reason = "Cancelled", "JobDeleted"
        message = "the Job was deleted before it ended (concurrencyPolicy Replace, or by hand)"
    else:
        result = "Running"
    return ObservedRun(
        scheduled_time=job.scheduled_time,
        result=result,
        start_time=job.start_time,
        completion_time=job.finished_at if result != "Cancelled" else None,
        reason=reason,
        message=message,
        job_name=job.name or None,
        requested=job.requested,
    )


# A workflow execution's status (the SDK's name for it) as a run's result.
_WORKFLOW_RESULTS: dict[str, RunResult] = {
    "RUNNING": "Running",
    "CONTINUED_AS_NEW": "Running",
    "COMPLETED": "Succeeded",
    "FAILED": "Failed",
    "TIMED_OUT": "TimedOut",
    "CANCELED": "Cancelled",
    "TERMINATED": "Terminated",
}


def workflow_run(
    workflow_id: str,
    scheduled_time: datetime,
    *,
    status: str | None,
    run_id: str | None = None,
    start_time: datetime | None = None,
    close_time: datetime | None = None,
    failure_type: str | None = None,
    failure_message: str | None = None,
) -> ObservedRun:
    """A run on the temporal backend, from the execution the schedule started; status
    None: the server no longer has it (past the namespace's retention)."""
    if status is None:
        return ObservedRun(
            scheduled_time=scheduled_time, result="Unknown", start_time=start_time,
            reason="NotFound", message="Temporal no longer has the workflow (retention)",
            workflow_id=workflow_id, run_id=run_id,
        )  # fmt: skip
    result = _WORKFLOW_RESULTS.get(status, "Running")
    reasons = {"Failed": failure_type or "WorkflowFailed", "TimedOut": "WorkflowTimedOut",
               "Cancelled": "WorkflowCancelled", "Terminated": "WorkflowTerminated"}  # fmt: skip
    reason = reasons.get(result)
    return ObservedRun(
        scheduled_time=scheduled_time,
        result=result,
        start_time=start_time,
        completion_time=close_time if result != "Running" else None,
        reason=reason,
        message=failure_message or None,
        workflow_id=workflow_id,
        run_id=run_id,
    )


def pod_span(pods: list[dict[str, Any]]) -> tuple[datetime, datetime] | None:
    """When a Job's Pods really ran: the first Pod's start to the last container's finish.
    The Job's own times are the Job controller's, seconds off on a busy node; None when
    the Pods are gone (a TTL of 0) or never ran."""
    starts: list[datetime] = []
    ends: list[datetime] = []
    for pod in pods:
        status = pod.get("status") or {}
        start = parse_time(status.get("startTime"))
        if start is not None:
            starts.append(start)
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated") or {}
            end = parse_time(terminated.get("finishedAt"))
            if end is not None:
                ends.append(end)
    if not starts or not ends:
        return None
    return min(starts), max(ends)
