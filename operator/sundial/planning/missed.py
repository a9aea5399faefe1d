"""Missed and skipped runs: which slots did not run, and why. Pure; `now` is passed in.

A slot is judged once, when its outcome is certain, and the judgement moves a watermark
(`RunAccounting.accounted_until`) kept in status, so slots that pass while the operator
is down are judged when it returns, and none is counted twice. docs/missed-runs.md has
the definitions for users; the backend facts are in the two judge functions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from sundial.api.models import (
    Backend,
    MissedRun,
    MissReason,
    RequestStatus,
    RunAccounting,
    ScheduledJobSpec,
    TemporalCounters,
)
from sundial.planning import catchup
from sundial.planning.schedule import Timetable

# Time the backend gets to start a slot before the slot is looked at.
SETTLE = timedelta(seconds=10)
# A run that started within this of its slot ran on time (it clears RunsMissed).
ON_TIME = timedelta(seconds=60)
# Slots judged in one pass; a longer backlog (the operator down for weeks) takes more passes.
MAX_SLOTS_PER_PASS = 2000
RECENT_LIMIT = 10
# The CronJob controller's own threshold for its TooManyMissedTimes warning.
TOO_MANY_MISSED = 100
# The resolution of the times Kubernetes keeps (metav1.Time: whole seconds).
ONE_SECOND = timedelta(seconds=1)


def timetable_hash(spec: ScheduledJobSpec) -> str:
    """What the slots depend on: a change starts the accounting afresh from that moment."""
    relevant = spec.model_dump(
        mode="json",
        include={"backend", "schedule", "interval", "time_zone", "suspend", "start_time",
                 "end_time"},
    )  # fmt: skip
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JobRecord:
    """One Job the CronJob controller created (manual `--from` Jobs are not slots)."""

    scheduled_time: datetime
    created: datetime
    start_time: datetime | None = None
    # When it completed or failed; None while it runs.
    finished_at: datetime | None = None
    succeeded: bool = False
    failed: bool = False
    name: str = ""
    # The Failed condition's reason and message (BackoffLimitExceeded, DeadlineExceeded).
    reason: str | None = None
    message: str | None = None
    # Seen deleted (its last state): Replace, a TTL, the history limits, or a person.
    deleted: bool = False
    # Made for a request (RunNow/<id>, Backfill/<id>, CatchUp/<id>), not by the CronJob
    # controller.
    requested: str | None = None
    # Its Pods that ended (the Job's succeeded + failed counts): whether the Pods seen
    # ended are all of them.
    pods_ended: int = 0

    def active_at(self, moment: datetime) -> bool:
        began = self.start_time or self.created
        return began <= moment and (self.finished_at is None or self.finished_at > moment)

    def ended_within_second_of(self, moment: datetime) -> bool:
        """Began by `moment` and ended within the second that starts at it. Times have a
        one-second resolution: a Job that completed at 10:01:00.4 reads 10:01:00, so
        whether it still ran when the controller looked at the 10:01 slot (10:01:00.1)
        its times cannot tell."""
        began = self.start_time or self.created
        return (
            began <= moment
            and self.finished_at is not None
            and moment <= self.finished_at < moment + ONE_SECOND
        )


@dataclass(frozen=True)
class KubernetesEvidence:
    jobs: list[JobRecord]
    # Slots whose Job the operator saw created since it started watching, even if the
    # Job is gone now (history limits, ttlSecondsAfterFinished).
    seen_slots: frozenset[datetime]
    watching_since: datetime
    last_schedule_time: datetime | None
    successful_history_limit: int
    failed_history_limit: int
    ttl_seconds_after_finished: int | None
    # A miss is recorded only once the backend has looked beyond the watch cache (a LIST
    # of the owner's Jobs and the CronJob controller's Events): a Job only absent from the
    # cache (start-up, a watch gap, a stalled watch) is no proof. Slots found there ran.
    confirmed: bool = False
    confirmed_slots: frozenset[datetime] = frozenset()
    # The CronJob controller's own record, from the same look at its Events: the slots
    # whose Jobs its SuccessfulCreate Events name, each an Event of its own (None: not
    # looked at, or its event recorder combined some into one Event, which names only the
    # latest Job); those its SawCompletedJob Events name; and whether it said it did not
    # start a slot because a Job was running under Forbid (JobAlreadyActive).
    created_events: frozenset[datetime] | None = None
    completed_events: frozenset[datetime] = frozenset()
    overlap_skip_reported: bool = False


@dataclass
class Judgement:
    new_runs: list[MissedRun] = field(default_factory=list)
    accounting: RunAccounting | None = None
    # When the next undecided slot becomes certain, for the work queue.
    recheck_at: datetime | None = None
    # The newest slot that ran on time, if any was seen in this pass.
    latest_on_time: datetime | None = None
    # A slot looks missed by the watch cache alone: look further, then judge again.
    needs_confirmation: bool = False
    # The CatchUp requests for slots judged missed that spec.catchUp runs late (those are
    # then not in new_runs): planning/catchup.py.
    catch_up: list[RequestStatus] = field(default_factory=list)

    def caught_up(
        self, spec: ScheduledJobSpec, backend: Backend, table: Timetable, now: datetime
    ) -> Judgement:
        """This judgement with the misses spec.catchUp runs late taken out, as requests."""
        kept, requests = catchup.from_misses(
            spec, backend, table, self.new_runs, self.latest_on_time, now
        )
        if not requests:
            return self
        return replace(self, new_runs=kept, catch_up=requests)


def start_accounting(
    previous: RunAccounting | None,
    spec_key: str,
    now: datetime,
    since: datetime | None,
    *,
    keep_counters: bool = False,
) -> RunAccounting:
    """The watermark to judge from: kept while the schedule is unchanged, else `now`.

    With keep_counters (the same Temporal schedule, updated in place), the counters last
    seen stay the baseline: what Temporal counted between the last look and the change
    is still news, and its totals stay exact."""
    if previous is not None and previous.spec_hash == spec_key:
        return previous
    start = max(now, since) if since is not None else now
    counters = previous.temporal_counters if previous is not None and keep_counters else None
    return RunAccounting(accounted_until=start, spec_hash=spec_key, temporal_counters=counters)


def judge_kubernetes(
    table: Timetable,
    spec: ScheduledJobSpec,
    accounting: RunAccounting,
    evidence: KubernetesEvidence,
    now: datetime,
) -> Judgement:
    """Slots of a CronJob that no Job started and none can start any more.

    The controller starts only the most recent unmet slot, within the deadline, so a slot
    without a Job is certain once the next slot (or its deadline) has passed.
    """
    if spec.suspend:
        # Suspended slots are neither missed nor skipped: pass over them.
        return Judgement(accounting=_passed_over(table, accounting, now))
    ran = {job.scheduled_time for job in evidence.jobs} | evidence.seen_slots
    ran |= evidence.confirmed_slots
    if evidence.last_schedule_time is not None:
        ran.add(evidence.last_schedule_time)
    deadline_seconds = catchup.kubernetes_deadline(spec)
    deadline = timedelta(seconds=deadline_seconds) if deadline_seconds is not None else None
    slots = table.slots_between(accounting.accounted_until, now, MAX_SLOTS_PER_PASS + 1)
    judgement = Judgement(accounting=accounting)
    watermark = accounting.accounted_until
    # Counted across passes, so an outage gets the same reasons whether the operator
    # judged it slot by slot or all at once after its own restart.
    streak = accounting.unmet_streak or 0
    for index, slot in enumerate(slots[:MAX_SLOTS_PER_PASS]):
        if slot in ran:
            watermark = slot
            streak = 0
            continue
        following = slots[index + 1] if index + 1 < len(slots) else _next_slot(table, slot)
        certain_at = following if following is not None else slot
        if deadline is not None:
            certain_at = min(certain_at, slot + deadline)
        if now < certain_at + SETTLE:
            judgement.recheck_at = certain_at + SETTLE
            break
        # A run the cache shows going across the slot, under Forbid, is evidence of the
        # skip itself; only an absence (a miss) needs the look beyond the cache.
        forbid = spec.concurrency_policy == "Forbid"
        skipped = forbid and any(job.active_at(slot) for job in evidence.jobs)
        if not skipped and not evidence.confirmed:
            judgement.needs_confirmation = True
            break
        if not skipped and forbid and evidence.overlap_skip_reported:
            # A run that ended within the slot's own second may have been running when
            # the controller looked at the slot; if the controller says it skipped one
            # because a Job was running, this is that skip, not a miss.
            skipped = any(job.ended_within_second_of(slot) for job in evidence.jobs)
        watermark = slot
        reason: MissReason
        if skipped:
            reason = "OverlapSkipped"
        elif _unverifiable(slot, evidence, now):
            reason = "Unknown"
        elif deadline is not None and following is not None and slot + deadline < following:
            reason = "DeadlineExceeded"
        else:
            reason = "ControllerDown"
        streak += reason != "Unknown"
        if reason == "ControllerDown" and streak > TOO_MANY_MISSED:
            reason = "TooManyMissed"
        judgement.new_runs.append(MissedRun(scheduled_time=slot, reason=reason))
    judgement.accounting = accounting.model_copy(
        update={"accounted_until": watermark, "unmet_streak": streak or None}
    )
    on_time = [
        job.scheduled_time for job in evidence.jobs if job.created - job.scheduled_time <= ON_TIME
    ]
    judgement.latest_on_time = max(on_time, default=None)
    return judgement


def _passed_over(table: Timetable, accounting: RunAccounting, now: datetime) -> RunAccounting:
    """The watermark moved past the slots up to now without judging them."""
    slots = table.slots_between(accounting.accounted_until, now, MAX_SLOTS_PER_PASS)
    if not slots:
        return accounting
    return accounting.model_copy(update={"accounted_until": slots[-1]})


def _next_slot(table: Timetable, slot: datetime) -> datetime | None:
    return next(table.slots(slot), None)


def _unverifiable(slot: datetime, evidence: KubernetesEvidence, now: datetime) -> bool:
    """Could a Job for this slot have been created and removed with no trace left?

    Only before the operator's watch began (while it watches it sees every Job created),
    and only if the controller has scheduled this slot or a later one since
    (lastScheduleTime): after lastScheduleTime the controller certainly created nothing.
    Its Job may be gone by history limits, TTL, Replace, a person or a cleanup tool; what
    tells is the controller's own record of the Jobs it created, its Events, unless that
    record does not reach back to the slot.
    """
    if slot >= evidence.watching_since:
        return False
    if evidence.last_schedule_time is None or slot > evidence.last_schedule_time:
        return False
    return not _in_controllers_record(slot, evidence, now)


def _in_controllers_record(slot: datetime, evidence: KubernetesEvidence, now: datetime) -> bool:
    """Would the controller's Events name a Job of this slot, had it created one?

    The controller creates the slots' Jobs in order (lastScheduleTime only moves forward)
    and posts a SuccessfulCreate Event for each; an Event lives an hour (the apiserver's
    --event-ttl) from when it was written, so while the create Event of an earlier slot is
    kept, that of any later one is too. The record has holes where the controller's event
    recorder dropped Events (its spam filter passes 25 per CronJob, then one in five
    minutes) or a controller that died had not posted them: wherever a Job known to exist
    or to have existed lacks its create Event, or one that ended over SETTLE ago its
    SawCompletedJob, the record is trusted only after it. Once the recorder has combined
    creates into one Event (more than ten alike in ten minutes), which names only the
    latest Job, it is not trusted at all.
    """
    created = evidence.created_events
    if created is None:
        return False
    settled = now - SETTLE
    # The Events of a Job made a moment ago may still be on their way.
    recent = {job.scheduled_time for job in evidence.jobs if job.created > settled}
    known = {job.scheduled_time for job in evidence.jobs}
    known |= evidence.seen_slots | evidence.confirmed_slots
    holes = {known_slot for known_slot in known - created if known_slot not in recent}
    holes |= {
        job.scheduled_time
        for job in evidence.jobs
        if job.finished_at is not None
        and job.finished_at <= settled
        and job.scheduled_time not in evidence.completed_events
    }
    after = max(holes, default=None)
    return any(earlier < slot and (after is None or earlier > after) for earlier in created)


@dataclass(frozen=True)
class TemporalEvidence:
    counters: TemporalCounters
    # Nominal scheduled times of the recent actions (the server keeps the last ten).
    recent_scheduled: list[datetime]
    recent_started: list[datetime]
    paused: bool
    jitter: timedelta = timedelta(0)


# Temporal's describe lists this many recent actions, no more.
RECENT_ACTIONS_KEPT = 10


def judge_temporal(
    table: Timetable,
    accounting: RunAccounting,
    evidence: TemporalEvidence,
    now: datetime,
) -> Judgement:
    """Temporal counts misses but does not say which slots: the totals are its counters'
    rises; the times are the slots since the watermark that have no action, oldest first
    for catch-up-window misses (an outage loses its oldest slots), then buffer drops, then
    overlap skips (a run still going loses the later ones)."""
    previous = accounting.temporal_counters or TemporalCounters()
    current = evidence.counters

    def rise(now_value: int, before: int) -> int:
        # A smaller counter means a new schedule (recreated): everything on it is new.
        return now_value - before if now_value >= before else now_value

    rises: list[tuple[MissReason, int]] = [
        ("CatchupWindowExceeded", rise(current.missed_catchup_window,
                                       previous.missed_catchup_window)),
        ("BufferDropped", rise(current.buffer_dropped, previous.buffer_dropped)),
        ("OverlapSkipped", rise(current.overlap_skipped, previous.overlap_skipped)),
    ]  # fmt: skip
    settled = now - SETTLE - evidence.jitter
    slots = table.slots_between(accounting.accounted_until, settled, MAX_SLOTS_PER_PASS)
    # The watermark moves from slot to slot, never to "now": a pass with no new slot
    # leaves the status as it was, so it does not write (and wake itself) again.
    watermark = slots[-1] if slots else accounting.accounted_until
    ran = set(evidence.recent_scheduled)
    # Paused time is not counted by Temporal, nor here.
    unaccounted = [] if evidence.paused else [slot for slot in slots if slot not in ran]
    # The times are exact only if every slot since the watermark is either among the
    # actions Temporal still lists or one it counted, one for one, at its nominal time.
    covered = (
        len(evidence.recent_scheduled) < RECENT_ACTIONS_KEPT
        or not slots
        or min(evidence.recent_scheduled) <= slots[0]
    )
    # Temporal's scheduler keeps its high-water mark at its last action, so a slot past
    # its catch-up window is counted again at each wake before the next action (a backfill,
    # an update, a trigger). A rise beyond the slots since the watermark that did not run
    # is not a miss now (never guess "missed"): it is held back, left out of the counters
    # kept, and counted only if such a slot comes (a rise seen before its slot settled).
    held_back = 0 if evidence.paused else max(rises[0][1] - len(unaccounted), 0)
    if held_back:
        rises[0] = ("CatchupWindowExceeded", rises[0][1] - held_back)
        current = current.model_copy(
            update={"missed_catchup_window": current.missed_catchup_window - held_back}
        )
    total = sum(count for _, count in rises)
    # A rise may also be a slot too recent to judge (an overlap skip counts at once).
    unsettled = bool(table.slots_between(settled, now, 1))
    exact = (
        covered and not unsettled and len(unaccounted) == total and evidence.jitter == timedelta(0)
    )
    new_runs: list[MissedRun] = []
    for reason, count in rises:
        for _ in range(count):
            # Without a slot time to name (the slots fell outside what is known), the
            # newest judged moment stands in: the total is what Temporal counted.
            when = unaccounted.pop(0) if unaccounted else watermark
            new_runs.append(
                MissedRun(scheduled_time=when, reason=reason, approximate=None if exact else True)
            )
    on_time = [
        scheduled
        for scheduled, started in zip(evidence.recent_scheduled, evidence.recent_started,
                                      strict=True)
        if started - scheduled <= ON_TIME + evidence.jitter
    ]  # fmt: skip
    return Judgement(
        new_runs=sorted(new_runs, key=lambda r: r.scheduled_time),
        accounting=accounting.model_copy(
            update={"accounted_until": watermark, "temporal_counters": current}
        ),
        latest_on_time=max(on_time, default=None),
    )


def counts_as_missed(run: MissedRun) -> bool:
    """Skips are the overlap policy at work; Unknown is Sundial saying it cannot tell."""
    return run.reason not in ("OverlapSkipped", "Unknown")


@dataclass(frozen=True)
class Tally:
    missed_runs: int
    skipped_runs: int
    last_missed_time: datetime | None
    recent_missed_runs: list[MissedRun]


def tally(
    missed_runs: int | None,
    skipped_runs: int | None,
    last_missed_time: datetime | None,
    recent: list[MissedRun],
    new_runs: list[MissedRun],
) -> Tally:
    """Totals that never decrease, and the last ten entries, missed and skipped both."""
    skipped = [r for r in new_runs if r.reason == "OverlapSkipped"]
    missed = [r for r in new_runs if counts_as_missed(r)]
    latest_missed = max((r.scheduled_time for r in missed), default=None)
    if last_missed_time is not None and latest_missed is not None:
        latest_missed = max(latest_missed, last_missed_time)
    merged = sorted([*recent, *new_runs], key=lambda r: r.scheduled_time)[-RECENT_LIMIT:]
    return Tally(
        missed_runs=(missed_runs or 0) + len(missed),
        skipped_runs=(skipped_runs or 0) + len(skipped),
        last_missed_time=latest_missed or last_missed_time,
        recent_missed_runs=merged,
    )


def temporal_requeue(
    next_runs: list[datetime], jitter: timedelta, now: datetime, resync: float
) -> float:
    """Seconds until the next look at a Temporal schedule: once the next slot has settled
    (SETTLE and the jitter after it: a look between the slot and its settling sees the
    action but cannot judge the slot, so the slot would be written twice), or the resync
    period if that comes before the slot."""
    if not next_runs:
        return resync
    if now + timedelta(seconds=resync) < next_runs[0]:
        return resync
    return (next_runs[0] + SETTLE + jitter - now).total_seconds() + 1
