"""The ScheduledJob's status, rebuilt from the observed world on each pass. Pure.

Each field has one home: conditions here (`condition`, `with_condition`), the
kubernetes backend's view in `kubernetes_status`. The previous status is read only
for what cannot be observed again: a condition's lastTransitionTime and the run
counters that must never decrease.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sundial.api import reasons
from sundial.api.models import (
    BackendRef,
    Condition,
    ConditionStatus,
    RecentRun,
    ScheduledJob,
    ScheduledJobStatus,
)
from sundial.api.reasons import (
    BACKEND_UNAVAILABLE,
    PAUSED_IN_TEMPORAL,
    READY,
    RECONCILED,
    RUN_TOO_LONG,
    RUNS_FAILING,
    RUNS_MISSED,
    SWITCHING,
)
from sundial.planning import switching as sw
from sundial.planning.missed import SETTLE, Judgement, Tally, counts_as_missed, tally
from sundial.planning.requests import with_new
from sundial.planning.runs import RunHistory
from sundial.planning.schedule import Timetable, iso

NEXT_RUN_COUNT = 3


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def condition(
    previous: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int,
) -> Condition:
    """A condition whose lastTransitionTime moves only when its status does."""
    old = find_condition(previous, type_)
    since = old.last_transition_time if old is not None and old.status == status else now
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )


def with_condition(conditions: list[Condition], new: Condition) -> list[Condition]:
    return [c for c in conditions if c.type != new.type] + [new]


def switching(
    sj: ScheduledJob,
    previous: list[Condition],
    effective: str | None,
    *,
    problem: str | None = None,
    waiting_for: str | None = None,
    now: datetime,
) -> Condition | None:
    """The Switching condition for the phase the status shows (planning/switching.py):
    True while a change of backend is not complete, False once done; absent on an object
    that never switched."""
    desired, generation = sj.spec.backend, sj.metadata.generation
    old = find_condition(previous, SWITCHING)
    shown = sw.reported(desired, effective, held=waiting_for is not None)
    said = sw.condition(shown, old, desired, effective, problem=problem, waiting_for=waiting_for)
    if said is None:
        return old
    status, reason, message = said
    return condition(previous, SWITCHING, status, reason, message, now=now,
                     generation=generation)  # fmt: skip


def _with_switching(conditions: list[Condition], switch: Condition | None) -> list[Condition]:
    return conditions if switch is None else with_condition(conditions, switch)


def waiting_for_run(sj: ScheduledJob, message: str, *, now: datetime) -> ScheduledJobStatus:
    """A switch under Forbid whose new backend makes nothing yet: the run the old one
    started is still going (planning/switching.py, WaitingForRun). Ready, with what it
    waits for; Switching True, WaitingForRunningJob; no next runs until it has made its
    own; the runs so far as they were."""
    previous = sj.status
    generation = sj.metadata.generation
    ready = condition(previous.conditions, READY, "True", RECONCILED, message, now=now,
                      generation=generation)  # fmt: skip
    switch = switching(sj, previous.conditions, sj.spec.backend, waiting_for=message, now=now)
    return previous.model_copy(
        update={
            "observed_generation": generation,
            "backend": sj.spec.backend,
            "backend_ref": None,
            "next_run_times": [],
            "conditions": _with_switching(with_condition(previous.conditions, ready), switch),
        }
    )


def pending_place(sj: ScheduledJob, place: BackendRef) -> ScheduledJobStatus:
    """Decide, record, then act: the place a backend is about to make something at,
    recorded (status.pendingBackendRef) by a pass of its own before the create. A create
    whose own record is then lost (the status write refused, the operator killed) is still
    known to the next pass, wherever the spec then points; the status otherwise as it was."""
    return sj.status.model_copy(update={"pending_backend_ref": place})


def not_ready(
    sj: ScheduledJob,
    reason: str,
    message: str,
    *,
    now: datetime,
    observed: ScheduledJobStatus | None = None,
) -> ScheduledJobStatus:
    """The status of an object whose spec cannot be acted on. The backend itself is left
    untouched; what it last did (times, counters) stays as it was, or is `observed` when
    the backend in place was judged in this pass."""
    previous = observed or sj.status
    ready = condition(
        # Against the Ready the server holds: `observed` has one of its own, made in this
        # pass for a backend in step, which would move lastTransitionTime on every pass.
        sj.status.conditions,
        READY,
        # A backend that cannot be reached may well be in step: Sundial cannot tell.
        "Unknown" if reason == BACKEND_UNAVAILABLE else "False",
        reason,
        message,
        now=now,
        generation=sj.metadata.generation,
    )
    switch = switching(sj, previous.conditions, previous.backend, problem=message, now=now)
    return previous.model_copy(
        update={
            "observed_generation": sj.metadata.generation,
            "conditions": _with_switching(with_condition(previous.conditions, ready), switch),
            # A pause outlives a pass that could not act (planning/pausing.py owns it).
            "pause": sj.status.pause,
            "failures_before_resume": sj.status.failures_before_resume,
        }
    )


def runs_missed(
    previous: list[Condition],
    runs: Tally,
    judgement: Judgement,
    *,
    now: datetime,
    generation: int,
) -> Condition:
    """True from a missed run until a later slot runs on time. Skips do not set it: they
    are the overlap policy doing what it was asked."""
    old = find_condition(previous, RUNS_MISSED)
    missed = [r for r in judgement.new_runs if counts_as_missed(r)]

    def make(status: ConditionStatus, reason: str, message: str) -> Condition:
        return condition(previous, RUNS_MISSED, status, reason, message, now=now,
                         generation=generation)  # fmt: skip

    if missed:
        newest = max(missed, key=lambda r: r.scheduled_time)
        return make(
            "True",
            newest.reason,
            f"the run scheduled for {iso(newest.scheduled_time)} was missed ({newest.reason}); "
            f"{runs.missed_runs} missed and {runs.skipped_runs} skipped in all",
        )
    if old is not None and old.status == "True":
        on_time = judgement.latest_on_time
        last_missed = runs.last_missed_time
        if on_time is not None and last_missed is not None and on_time > last_missed:
            return make("False", reasons.RAN_ON_TIME,
                            f"the run scheduled for {iso(on_time)} ran on time")  # fmt: skip
        return old
    return old or make("False", reasons.NO_MISSED_RUNS, "no run has been missed")


def runs_failing(
    previous: list[Condition],
    history: RunHistory,
    *,
    now: datetime,
    generation: int,
) -> Condition:
    """True once failureThreshold runs in a row failed (or timed out), False again once
    recoveryThreshold runs in a row succeeded: one bad or good run alone does not flip it
    when the thresholds say so."""
    limits = history.limits
    old = find_condition(previous, RUNS_FAILING)
    failures, successes = history.consecutive_failures, history.consecutive_successes

    def make(status: ConditionStatus, reason: str, message: str) -> Condition:
        return condition(previous, RUNS_FAILING, status, reason, message, now=now,
                         generation=generation)  # fmt: skip

    if failures >= limits.failure_threshold:
        failed = next((r for r in history.recent_runs if r.result in ("Failed", "TimedOut")
                       and r.completion_time is not None), None)  # fmt: skip
        latest = ""
        if failed is not None:
            why = f" ({failed.reason})" if failed.reason else ""
            when = iso(failed.scheduled_time)
            latest = f"; the latest, scheduled for {when}: {failed.result}{why}"
            latest += f": {failed.message}" if failed.message else ""
        return make(
            "True", reasons.CONSECUTIVE_FAILURES,
            f"{failures} run(s) in a row failed (failureThreshold {limits.failure_threshold})"
            f"{latest}",
        )  # fmt: skip
    if old is not None and old.status == "True":
        if successes >= limits.recovery_threshold:
            return make("False", reasons.RECOVERED,
                        f"{successes} run(s) in a row succeeded (recoveryThreshold "
                        f"{limits.recovery_threshold})")  # fmt: skip
        return old
    if failures:
        return make("False", reasons.BELOW_THRESHOLD,
                    f"{failures} run(s) in a row failed, fewer than failureThreshold "
                    f"{limits.failure_threshold}")  # fmt: skip
    return (
        old
        if old is not None and old.reason == reasons.RECOVERED
        else make("False", reasons.NO_FAILURES, "no run has failed since the last success")
    )


def run_too_long(
    previous: list[Condition],
    history: RunHistory,
    *,
    now: datetime,
    generation: int,
) -> Condition | None:
    """With monitoring.maxRunDuration: True while a run goes on past it, and after such a
    run until a later one ends within it. None (no condition) without one."""
    limits = history.limits
    if limits.max_run_duration is None:
        return None
    limit = f"{limits.max_run_duration.total_seconds():g}s"

    def make(status: ConditionStatus, reason: str, message: str) -> Condition:
        return condition(previous, RUN_TOO_LONG, status, reason, message, now=now,
                         generation=generation)  # fmt: skip

    going = [r for r in history.recent_runs if r.result == "TimedOut" and r.completion_time is None]
    if going:
        run = going[-1]
        return make("True", reasons.RUNNING_TOO_LONG,
                    f"the run scheduled for {iso(run.scheduled_time)} has been running longer "
                    f"than maxRunDuration {limit}")  # fmt: skip
    ended = [r for r in history.recent_runs if r.duration_seconds is not None]
    if not ended:
        return find_condition(previous, RUN_TOO_LONG) or make(
            "False", reasons.WITHIN_MAX_RUN_DURATION, f"no run has taken longer than {limit}"
        )
    latest = max(ended, key=lambda r: r.completion_time or r.scheduled_time)
    if latest.reason == reasons.MAX_RUN_DURATION_EXCEEDED:
        took = f"{latest.duration_seconds:g}s"
        return make("True", reasons.LAST_RUN_TOO_LONG,
                    f"the run scheduled for {iso(latest.scheduled_time)} took {took}, longer "
                    f"than maxRunDuration {limit}")  # fmt: skip
    return make("False", reasons.WITHIN_MAX_RUN_DURATION,
                f"the latest run took {latest.duration_seconds:g}s, within {limit}")  # fmt: skip


def last_result(sj: ScheduledJob, recent: list[RecentRun]) -> str | None:
    """What `kubectl get` shows as LAST RESULT."""
    if sj.spec.suspend:
        return "Suspended"
    return recent[0].result if recent else None


def _ready_status(
    sj: ScheduledJob,
    *,
    reason: str,
    message: str,
    notes: list[str] | None,
    judgement: Judgement,
    history: RunHistory,
    now: datetime,
    waiting_for: str | None = None,
    **observed: Any,
) -> ScheduledJobStatus:
    """The status of a ScheduledJob whose backend is in step: what the backend reports,
    the run tally moved on by this pass's judgement, and the runs' history."""
    previous = sj.status
    generation = sj.metadata.generation
    if sj.spec.suspend:
        notes = [
            *(notes or []),
            f"suspended{': ' + sj.spec.suspend_note if sj.spec.suspend_note else ''}",
        ]
    ready = condition(
        previous.conditions, READY, "True", reason, "; ".join([message, *(notes or [])]),
        now=now, generation=generation,
    )  # fmt: skip
    runs = tally(
        previous.missed_runs,
        previous.skipped_runs,
        previous.last_missed_time,
        previous.recent_missed_runs,
        judgement.new_runs,
    )
    conditions = with_condition(previous.conditions, ready)
    conditions = with_condition(
        conditions, runs_missed(previous.conditions, runs, judgement, now=now,
                                generation=generation)
    )  # fmt: skip
    conditions = with_condition(
        conditions, runs_failing(previous.conditions, history, now=now,
                                 generation=generation)
    )  # fmt: skip
    too_long = run_too_long(previous.conditions, history, now=now,
                            generation=generation)  # fmt: skip
    conditions = (
        with_condition(conditions, too_long)
        if too_long is not None
        else [c for c in conditions if c.type != RUN_TOO_LONG]
    )
    conditions = _with_switching(
        conditions,
        switching(sj, previous.conditions, sj.spec.backend, waiting_for=waiting_for, now=now),
    )
    return ScheduledJobStatus(
        observed_generation=generation,
        conditions=conditions,
        backend=sj.spec.backend,
        missed_runs=runs.missed_runs,
        skipped_runs=runs.skipped_runs,
        last_missed_time=runs.last_missed_time,
        recent_missed_runs=runs.recent_missed_runs,
        run_accounting=judgement.accounting,
        recent_runs=history.recent_runs,
        last_result=last_result(sj, history.recent_runs),
        last_successful_time=history.last_successful_time,
        last_failed_time=history.last_failed_time,
        counted_runs=history.counted_runs,
        counted_since=history.counted_since,
        unseen_runs=history.unseen_runs or None,
        consecutive_failures=history.consecutive_failures,
        consecutive_successes=history.consecutive_successes,
        # With the catch-ups this pass decided on; moved on by the pass's requests (reconcile).
        requests=with_new(previous.requests, judgement.catch_up),
        **observed,
    )


def listed_after(judgement: Judgement, now: datetime) -> datetime:
    """The moment nextRunTimes count from: a slot is listed until it is settled (seen
    started, which moves the watermark onto it, or SETTLE after it). So the list moves
    on the pass that records the slot's run or judges it, not a few seconds earlier on
    a pass of its own: one status write per slot, and the first entry is at most SETTLE
    in the past."""
    settled = now - SETTLE
    if judgement.accounting is not None:
        settled = max(settled, judgement.accounting.accounted_until)
    return settled


@dataclass(frozen=True)
class CronJobView:
    """The kubernetes backend's view of its CronJob, as status needs it (from the object:
    planning/cronjob.cronjob_view)."""

    name: str
    last_schedule_time: datetime | None
    active: int
    spec_hash: str | None  # of the spec Sundial last wrote into it


def kubernetes_status(
    sj: ScheduledJob,
    view: CronJobView,
    table: Timetable,
    judgement: Judgement,
    history: RunHistory,
    *,
    now: datetime,
    notes: list[str] | None = None,
) -> ScheduledJobStatus:
    """Status of a ScheduledJob whose CronJob is in step with its spec, from its view."""
    return _ready_status(
        sj,
        reason=RECONCILED,
        message="CronJob is in step with the spec",
        notes=notes,
        judgement=judgement,
        history=history,
        now=now,
        backend_ref=BackendRef(kind="CronJob", name=view.name, namespace=sj.metadata.namespace),
        last_schedule_time=view.last_schedule_time,
        active=view.active,
        next_run_times=[]
        if sj.spec.suspend
        else table.next_runs(listed_after(judgement, now), NEXT_RUN_COUNT),
        spec_hash=view.spec_hash,
    )


@dataclass(frozen=True)
class ScheduleView:
    """The temporal backend's view of its Schedule, as status needs it (from describe():
    backends/temporal/schedule.schedule_view)."""

    paused: bool
    note: str | None
    # Paused by Sundial for a switch, until the run the CronJob started has ended.
    held_for_switch: bool
    scheduled: list[datetime]  # the recent actions' nominal times
    running: int
    next_action_times: list[datetime]


def temporal_status(
    sj: ScheduledJob,
    view: ScheduleView,
    judgement: Judgement,
    history: RunHistory,
    *,
    ref: BackendRef,
    spec_hash: str,
    fingerprint: str,
    now: datetime,
    notes: list[str] | None = None,
) -> ScheduledJobStatus:
    """Status of a ScheduledJob whose Temporal Schedule is in step, from its view."""
    waiting_for = None
    if view.held_for_switch and not sj.spec.suspend:
        reason = RECONCILED
        waiting_for = message = (
            "the Temporal schedule starts once the run the CronJob started has finished "
            "(concurrencyPolicy Forbid)"
        )
    elif view.paused and not sj.spec.suspend:
        reason = PAUSED_IN_TEMPORAL
        message = (
            f"schedule is paused in Temporal ({view.note or 'no note'}); Sundial leaves it "
            "paused: unpause it in Temporal, or set spec.suspend to true and back to false"
        )
    else:
        reason, message = RECONCILED, "Temporal schedule is in step with the spec"
    scheduled = view.scheduled
    return _ready_status(
        sj,
        reason=reason,
        message=message,
        notes=notes,
        judgement=judgement,
        history=history,
        now=now,
        waiting_for=waiting_for,
        backend_ref=ref,
        last_schedule_time=max(scheduled) if scheduled else None,
        active=view.running,
        next_run_times=[] if view.paused else view.next_action_times[:NEXT_RUN_COUNT],
        spec_hash=spec_hash,
        backend_fingerprint=fingerprint,
    )


def status_document(status: ScheduledJobStatus) -> dict[str, Any]:
    """The status as the apiserver stores it (JSON, camelCase, no nulls)."""
    document: dict[str, Any] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return document


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into exactly `new`, at every depth.

    The server merges nested objects rather than replacing them, so a key gone from a nested
    object (backendRef.scheduleId after temporal -> kubernetes) needs its explicit null, or
    it stays. Lists are replaced whole, as merge patch does."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if value is None:
            if key in old:
                patch[key] = None
        elif isinstance(value, dict) and isinstance(before, dict):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif isinstance(value, dict):
            # Replacing a non-object: the server merges into {}, so nulls inside are dropped.
            patch[key] = _without_nulls(value)
        elif before != value or key not in old:
            patch[key] = value
    patch.update({key: None for key in old if key not in new})
    return patch


def _without_nulls(value: dict[str, Any]) -> dict[str, Any]:
    return {
        k: _without_nulls(v) if isinstance(v, dict) else v
        for k, v in value.items()
        if v is not None
    }
