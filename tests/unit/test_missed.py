"""Judging slots: missed, skipped, or ran; with `now` passed in and no servers."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sundial.api.models import MissedRun, RunAccounting, ScheduledJobSpec, TemporalCounters
from sundial.planning.missed import (
    SETTLE,
    JobRecord,
    KubernetesEvidence,
    TemporalEvidence,
    judge_kubernetes,
    judge_temporal,
    start_accounting,
    tally,
    timetable_hash,
)
from sundial.planning.schedule import timetable
from sundial.planning.status import runs_missed

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def spec(**fields: Any) -> ScheduledJobSpec:
    fields.setdefault("schedule", "* * * * *")
    fields.setdefault("job", {"image": "x"})
    return ScheduledJobSpec.model_validate(fields)


def job(slot: datetime, late: float = 1.0, *, finished_after: float | None = 5.0,
        succeeded: bool = True) -> JobRecord:  # fmt: skip
    created = slot + timedelta(seconds=late)
    finished = created + timedelta(seconds=finished_after) if finished_after is not None else None
    return JobRecord(
        scheduled_time=slot,
        created=created,
        start_time=created,
        finished_at=finished,
        succeeded=succeeded and finished is not None,
        failed=not succeeded and finished is not None,
    )


def evidence(jobs: list[JobRecord], **overrides: Any) -> KubernetesEvidence:
    fields: dict[str, Any] = {
        "jobs": jobs,
        "seen_slots": frozenset(j.scheduled_time for j in jobs),
        "watching_since": T0 - timedelta(hours=1),
        "last_schedule_time": max((j.scheduled_time for j in jobs), default=None),
        "successful_history_limit": 1,
        "failed_history_limit": 3,
        "ttl_seconds_after_finished": 300,
        "confirmed": True,
    }
    fields.update(overrides)
    return KubernetesEvidence(**fields)


def accounting(since: datetime = T0) -> RunAccounting:
    return RunAccounting(accounted_until=since, spec_hash="h")


def judge(job_spec: ScheduledJobSpec, ev: KubernetesEvidence, now: datetime,
          since: datetime = T0) -> Any:  # fmt: skip
    return judge_kubernetes(timetable(job_spec), job_spec, accounting(since), ev, now)


def reasons(judgement: Any) -> list[tuple[datetime, str]]:
    return [(r.scheduled_time, r.reason) for r in judgement.new_runs]


def test_healthy_job_has_nothing_missed_and_moves_the_watermark() -> None:
    jobs = [job(at(m)) for m in (1, 2, 3)]
    result = judge(spec(), evidence(jobs), at(3.5))
    assert result.new_runs == []
    assert result.accounting.accounted_until == at(3)
    assert result.latest_on_time == at(3)


def test_controller_down_drops_all_but_the_latest_slot() -> None:
    # The controller came back after 10:04 and started only the 10:04 slot, late.
    jobs = [job(at(4), late=40)]
    result = judge(spec(), evidence(jobs), at(4.9))
    assert reasons(result) == [(at(m), "ControllerDown") for m in (1, 2, 3)]
    assert result.accounting.accounted_until == at(4)
    assert result.latest_on_time == at(4), "40 s late is still on time"


def test_a_slot_is_judged_only_once_the_next_slot_has_passed() -> None:
    result = judge(spec(), evidence([]), at(1) + SETTLE + timedelta(seconds=5))
    assert result.new_runs == []
    assert result.accounting.accounted_until == T0
    assert result.recheck_at == at(2) + SETTLE
    later = judge(spec(), evidence([]), at(2) + SETTLE)
    assert reasons(later) == [(at(1), "ControllerDown")]


def test_deadline_makes_a_slot_certain_before_the_next_one() -> None:
    job_spec = spec(startingDeadlineSeconds=15)
    result = judge(job_spec, evidence([]), at(1) + timedelta(seconds=30))
    assert reasons(result) == [(at(1), "DeadlineExceeded")]


def test_a_skip_the_cache_shows_needs_no_look_beyond_it() -> None:
    """The Job the cache shows running across the slot is positive evidence of the skip,
    not an absence to confirm: no LIST of Jobs and Events per skipped slot (issue 11: two
    LISTs a minute for every minute schedule whose run outlasts its period)."""
    stuck = job(at(1), finished_after=None)
    ev = evidence([stuck], confirmed=False)
    result = judge(spec(concurrencyPolicy="Forbid"), ev, at(3) + SETTLE)
    assert not result.needs_confirmation
    assert reasons(result) == [(at(2), "OverlapSkipped")]
    # A slot with nothing running across it still waits for the look.
    done = job(at(1))
    assert judge(spec(concurrencyPolicy="Forbid"), evidence([done], confirmed=False),
                 at(3) + SETTLE).needs_confirmation  # fmt: skip


def test_long_deadline_still_reports_a_dropped_slot_as_controller_down() -> None:
    job_spec = spec(startingDeadlineSeconds=3600)
    result = judge(job_spec, evidence([job(at(3), late=30)]), at(3.5))
    assert reasons(result) == [(at(1), "ControllerDown"), (at(2), "ControllerDown")]


def test_forbid_with_a_running_job_skips_the_following_slots() -> None:
    stuck = job(at(1), finished_after=None)
    result = judge(spec(concurrencyPolicy="Forbid"), evidence([stuck]), at(3) + SETTLE)
    assert reasons(result) == [(at(2), "OverlapSkipped")]


def test_allow_with_a_running_job_is_not_a_skip() -> None:
    stuck = job(at(1), finished_after=None)
    result = judge(spec(concurrencyPolicy="Allow"), evidence([stuck]), at(3) + SETTLE)
    assert reasons(result) == [(at(2), "ControllerDown")]


def test_suspended_slots_are_not_counted() -> None:
    result = judge(spec(suspend=True), evidence([]), at(10.5))
    assert result.new_runs == []
    assert result.accounting.accounted_until == at(10), "moved slot by slot, not to now"
    again = judge(spec(suspend=True), evidence([]), at(10.7))
    assert again.accounting == result.accounting, "no new slot: nothing to write"


def test_jobs_removed_unseen_are_confirmed_by_the_controllers_events() -> None:
    """The operator was down 10:00-10:05; only the newest Job is left (history limits), and
    the CronJob controller's Events still name the Jobs it created."""
    ev = evidence([job(at(5))], watching_since=at(5.5), seen_slots=frozenset(),
                  confirmed_slots=frozenset(at(m) for m in range(1, 5)))  # fmt: skip
    result = judge(spec(), ev, at(5.6))
    assert result.new_runs == []
    assert result.accounting.accounted_until == at(5)


def test_slots_after_the_last_scheduled_one_are_missed_even_unwatched() -> None:
    """lastScheduleTime did not move: no Job can have been made and removed unseen."""
    ev = evidence([job(at(1))], watching_since=at(4.5), seen_slots=frozenset())
    result = judge(spec(), ev, at(4.5))
    assert reasons(result) == [(at(2), "ControllerDown"), (at(3), "ControllerDown")]


def test_without_any_evidence_an_unwatched_slot_is_unknown_never_missed() -> None:
    """Issue 14.8: a Job deleted by Replace, a person or a cleanup tool while Sundial was
    down, its Events expired: Sundial cannot tell, and says so without counting a miss."""
    for ttl in (None, 60):
        ev = evidence([job(at(3), succeeded=False)], watching_since=at(3.5),
                      seen_slots=frozenset(), ttl_seconds_after_finished=ttl)  # fmt: skip
        result = judge(spec(), ev, at(3.5))
        assert reasons(result) == [(at(1), "Unknown"), (at(2), "Unknown")]
        runs = tally(0, 0, None, [], result.new_runs)
        assert (runs.missed_runs, runs.skipped_runs, runs.last_missed_time) == (0, 0, None)
        assert [r.reason for r in runs.recent_missed_runs] == ["Unknown", "Unknown"]


def test_a_slot_missing_only_from_the_cache_is_not_judged_until_confirmed() -> None:
    """Issue 14.9: absence from the watch cache is no proof of a miss."""
    ev = evidence([job(at(1)), job(at(3))], confirmed=False)
    result = judge(spec(), ev, at(3.5))
    assert result.needs_confirmation
    assert result.new_runs == []
    assert result.accounting.accounted_until == at(1), "stops before the unconfirmed slot"
    # The LIST found the Job for 10:02 after all.
    confirmed = evidence([job(at(1)), job(at(3))], confirmed_slots=frozenset({at(2)}))
    assert judge(spec(), confirmed, at(3.5)).new_runs == []


def test_a_late_run_within_its_deadline_is_not_missed() -> None:
    job_spec = spec(startingDeadlineSeconds=120)
    result = judge(job_spec, evidence([job(at(1), late=90)]), at(1.8))
    assert result.new_runs == []
    assert result.accounting.accounted_until == at(1)


def test_more_than_a_hundred_dropped_slots_are_too_many_missed() -> None:
    result = judge(spec(), evidence([job(at(150), late=20)]), at(150.5))
    assert len(result.new_runs) == 149
    reasons_in_order = [r.reason for r in result.new_runs]
    assert reasons_in_order == ["ControllerDown"] * 100 + ["TooManyMissed"] * 49


def test_an_outage_gets_the_same_reasons_whether_the_operator_watched_it_or_not() -> None:
    """Issue 14.10: one rule, independent of Sundial's own uptime."""
    job_spec = spec()
    table = timetable(job_spec)
    ev = evidence([job(at(150), late=20)])
    # The operator was down too: one pass after the controller came back.
    at_once = judge_kubernetes(table, job_spec, accounting(), ev, at(150.5))
    # The operator watched the whole outage: a pass every minute.
    watched: list[MissedRun] = []
    current = accounting()
    for minute in range(1, 151):
        now = at(minute) + timedelta(seconds=30)
        outage = evidence([], last_schedule_time=None) if minute < 150 else ev
        judged = judge_kubernetes(table, job_spec, current, outage, now)
        watched += judged.new_runs
        assert judged.accounting is not None
        current = judged.accounting
    assert [(r.scheduled_time, r.reason) for r in watched] == reasons(at_once)


def test_accounting_restarts_when_the_schedule_changes() -> None:
    kept = start_accounting(accounting(), "h", at(9), since=None)
    assert kept.accounted_until == T0
    fresh = start_accounting(accounting(), "other", at(9), since=at(9.5))
    assert (fresh.accounted_until, fresh.spec_hash) == (at(9.5), "other")
    assert timetable_hash(spec()) != timetable_hash(spec(suspend=True))
    assert timetable_hash(spec()) == timetable_hash(spec(job={"image": "other"}))


def temporal_spec(**fields: Any) -> ScheduledJobSpec:
    fields.setdefault("interval", {"every": "2s"})
    return ScheduledJobSpec.model_validate(
        {"backend": "temporal", "workflow": {"type": "w", "taskQueue": "q"}, **fields}
    )


def seconds(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_temporal_counter_rises_become_missed_and_skipped_runs() -> None:
    """Temporal down 10:00:00-10:00:20, window 10 s: the oldest slots are missed, one
    buffered slot ran late, the rest were skipped (SKIP overlap)."""
    table = timetable(temporal_spec())
    ran = [seconds(12), seconds(22), seconds(24)]
    ev = TemporalEvidence(
        counters=TemporalCounters(missed_catchup_window=5, overlap_skipped=4),
        recent_scheduled=ran,
        recent_started=[seconds(21), seconds(22.1), seconds(24.1)],
        paused=False,
    )
    start = RunAccounting(accounted_until=T0, temporal_counters=TemporalCounters())
    result = judge_temporal(table, start, ev, seconds(36))
    assert [(r.scheduled_time, r.reason) for r in result.new_runs] == [
        *[(seconds(s), "CatchupWindowExceeded") for s in (2, 4, 6, 8, 10)],
        *[(seconds(s), "OverlapSkipped") for s in (14, 16, 18, 20)],
    ]
    assert result.accounting.temporal_counters == ev.counters
    assert result.latest_on_time == seconds(24)


def test_temporal_without_counter_rises_reports_nothing() -> None:
    table = timetable(temporal_spec())
    counters = TemporalCounters(missed_catchup_window=3)
    ev = TemporalEvidence(counters=counters, recent_scheduled=[], recent_started=[], paused=True)
    start = RunAccounting(accounted_until=T0, temporal_counters=counters)
    result = judge_temporal(table, start, ev, seconds(61))
    assert result.new_runs == []
    assert result.accounting.accounted_until == seconds(50)
    again = judge_temporal(table, result.accounting, ev, seconds(61.5))
    assert again.accounting == result.accounting, "no new slot: nothing to write"


def test_a_slot_temporal_counts_again_is_not_missed_twice() -> None:
    """Temporal's scheduler keeps its high-water mark at its last action, so a slot past
    its catch-up window is counted again at each wake before the next action (a backfill,
    an update): seen on the dev server, one missed slot counted three times. A rise beyond
    the slots since the watermark that did not run is that recount, not a miss."""
    table = timetable(temporal_spec(interval={"every": "60s"}))
    judged = RunAccounting(accounted_until=seconds(60),
                           temporal_counters=TemporalCounters(missed_catchup_window=1))  # fmt: skip
    recounted = TemporalEvidence(counters=TemporalCounters(missed_catchup_window=2),
                                 recent_scheduled=[seconds(60)], recent_started=[seconds(95)],
                                 paused=False)  # fmt: skip
    result = judge_temporal(table, judged, recounted, seconds(100))
    assert result.new_runs == []
    # Held back, not taken as the new baseline: nothing changed to write.
    assert result.accounting == judged
    # A slot that did not run, and a recount of the one before: one miss, exactly named.
    both = TemporalEvidence(counters=TemporalCounters(missed_catchup_window=3),
                            recent_scheduled=[seconds(60)], recent_started=[seconds(95)],
                            paused=False)  # fmt: skip
    result = judge_temporal(table, judged, both, seconds(150))
    assert [(r.scheduled_time, r.reason, r.approximate) for r in result.new_runs] == [
        (seconds(120), "CatchupWindowExceeded", None)
    ]


def test_a_recreated_schedule_counts_from_zero() -> None:
    table = timetable(temporal_spec())
    ev = TemporalEvidence(counters=TemporalCounters(overlap_skipped=2), recent_scheduled=[],
                          recent_started=[], paused=False)  # fmt: skip
    start = RunAccounting(accounted_until=seconds(50),
                          temporal_counters=TemporalCounters(overlap_skipped=9))  # fmt: skip
    result = judge_temporal(table, start, ev, seconds(60))
    assert [r.reason for r in result.new_runs] == ["OverlapSkipped", "OverlapSkipped"]


def test_tally_never_decreases_and_keeps_ten() -> None:
    old = [MissedRun(scheduled_time=at(m), reason="ControllerDown") for m in range(8)]
    new = [MissedRun(scheduled_time=at(m), reason="OverlapSkipped") for m in range(8, 12)]
    result = tally(8, 0, at(7), old, new)
    assert (result.missed_runs, result.skipped_runs) == (8, 4)
    assert result.last_missed_time == at(7)
    assert [r.scheduled_time for r in result.recent_missed_runs] == [at(m) for m in range(2, 12)]


def test_runs_missed_condition_is_set_by_a_miss_and_cleared_by_an_on_time_run() -> None:
    from sundial.planning.missed import Judgement

    miss = [MissedRun(scheduled_time=at(1), reason="ControllerDown")]
    runs = tally(0, 0, None, [], miss)
    raised = runs_missed([], runs, Judgement(new_runs=miss), now=at(2), generation=1)
    assert (raised.status, raised.reason) == ("True", "ControllerDown")
    assert "2026-12-02T10:01:00Z" in raised.message
    # A late run of an older slot does not clear it; an on-time later one does.
    kept = runs_missed([raised], runs, Judgement(latest_on_time=at(0)), now=at(3), generation=1)
    assert kept == raised
    cleared = runs_missed([raised], runs, Judgement(latest_on_time=at(3)), now=at(4), generation=1)
    assert (cleared.status, cleared.reason) == ("False", "RanOnTime")
    skip_only = [MissedRun(scheduled_time=at(5), reason="OverlapSkipped")]
    not_raised = runs_missed([cleared], tally(1, 0, at(1), miss, skip_only),
                             Judgement(new_runs=skip_only), now=at(6), generation=1)  # fmt: skip
    assert not_raised.status == "False"


def test_a_spec_change_on_temporal_keeps_what_was_counted_before_it() -> None:
    """Issue 14.13: skips between the last look and a change (suspend) are not dropped."""
    before = RunAccounting(accounted_until=seconds(50), spec_hash="old",
                           temporal_counters=TemporalCounters(overlap_skipped=50))  # fmt: skip
    suspended = temporal_spec(suspend=True)
    fresh = start_accounting(before, timetable_hash(suspended), seconds(70), since=None,
                             keep_counters=True)  # fmt: skip
    assert fresh.accounted_until == seconds(70)
    ev = TemporalEvidence(counters=TemporalCounters(overlap_skipped=54), recent_scheduled=[],
                          recent_started=[], paused=True)  # fmt: skip
    result = judge_temporal(timetable(suspended), fresh, ev, seconds(75))
    assert [r.reason for r in result.new_runs] == ["OverlapSkipped"] * 4
    # A CronJob's accounting never carries a schedule's counters.
    assert start_accounting(before, "k8s", seconds(70), since=None).temporal_counters is None


def test_temporal_slot_times_are_exact_only_when_temporal_lists_every_other_slot() -> None:
    """Issue 14.12: Temporal counts misses without naming slots. Sundial names them from
    the timetable, and says `approximate` where the recent actions it is shown (ten), a
    slot too recent to judge, or jitter leave more than one reading; the totals are
    Temporal's either way."""
    table = timetable(temporal_spec(interval={"every": "1m"}))
    start = RunAccounting(accounted_until=T0, temporal_counters=TemporalCounters())
    minute = [seconds(60 * m) for m in range(1, 31)]
    # Minutes 1..5; all but 3 ran; looked at 30 s past minute 5: one skip, one slot.
    ran = [minute[0], minute[1], minute[3], minute[4]]
    ev = TemporalEvidence(counters=TemporalCounters(overlap_skipped=1), recent_scheduled=ran,
                          recent_started=ran, paused=False)  # fmt: skip
    exact = judge_temporal(table, start, ev, seconds(330))
    assert [(r.scheduled_time, r.approximate) for r in exact.new_runs] == [(minute[2], None)]

    # Looked at 5 s past minute 5: the rise may be minute 5's own (not judged yet).
    early = judge_temporal(table, start, ev, seconds(305))
    assert [r.approximate for r in early.new_runs] == [True]

    # Minutes 1..20, the ten newest actions listed (11..20), one skip somewhere before.
    listed = minute[10:20]
    ev = TemporalEvidence(counters=TemporalCounters(overlap_skipped=1), recent_scheduled=listed,
                          recent_started=listed, paused=False)  # fmt: skip
    unsure = judge_temporal(table, start, ev, seconds(60 * 20 + 30))
    assert len(unsure.new_runs) == 1
    assert unsure.new_runs[0].approximate is True

    # Jitter: the listed times are not the slots' own.
    ev = TemporalEvidence(
        counters=TemporalCounters(overlap_skipped=1),
        recent_scheduled=ran,
        recent_started=ran,
        paused=False,
        jitter=timedelta(seconds=1),
    )
    jittered = judge_temporal(table, start, ev, seconds(331))
    assert [r.approximate for r in jittered.new_runs] == [True]


# ---- an outage nobody watched (issue 25, defect 16) --------------------------------------

# The controller manager was down across 10:01 and 10:02, back at 10:02:20, and started only
# the latest slot, 10:02, late; the operator was killed at 10:01:20 and came back at
# 10:02:35, after the controller. Nothing of the controller's own could have removed a Job
# of 10:01 yet (none ended; the TTL is 300 s), and its Events name each Job it created.
OUTAGE_NOW = at(2) + timedelta(seconds=40)


def unwatched_outage(**overrides: Any) -> KubernetesEvidence:
    jobs = overrides.pop("jobs", None) or [
        job(at(0), finished_after=None),
        job(at(2), late=20, finished_after=None),
    ]
    fields: dict[str, Any] = {
        "watching_since": at(2) + timedelta(seconds=35),
        # The restart's listing: the slots of the Jobs there now.
        "seen_slots": frozenset({at(0), at(2)}),
        "last_schedule_time": at(2),
        "successful_history_limit": 3,
        "failed_history_limit": 1,
        # The LIST of the controller's Events: "Created job invoices-<minutes>", each its own.
        "confirmed_slots": frozenset({at(0), at(2)}),
        "created_events": frozenset({at(0), at(2)}),
    }
    fields.update(overrides)
    return evidence(jobs, **fields)


def controllers_reading(slots: list[datetime], down: datetime, up: datetime,
                        deadline: float | None) -> list[tuple[datetime, str]]:  # fmt: skip
    """The CronJob controller's own rule, read independently of the judge (scheduling-
    semantics.md): back at `up` it starts only the most recent slot it missed, if within
    startingDeadlineSeconds; each earlier one is dropped, DeadlineExceeded if its deadline
    ran out before the next slot, else ControllerDown."""
    missed = [slot for slot in slots if down < slot <= up]
    limit = timedelta(seconds=deadline) if deadline is not None else None
    dropped = missed[:-1] if missed and (limit is None or up <= missed[-1] + limit) else missed
    reading = []
    for slot in dropped:
        following = slots[slots.index(slot) + 1]
        expired = limit is not None and slot + limit < following
        reading.append((slot, "DeadlineExceeded" if expired else "ControllerDown"))
    return reading


def test_an_outage_nobody_watched_is_judged_by_the_controllers_own_record() -> None:
    """The slot the controller never started is missed, with the controller's reason, not
    Unknown: its Events still name each Job it created before and after the slot, each in
    an Event of its own (it creates the slots' Jobs in order, and a later Event outlives an
    earlier one), so a Job of the slot would be named too, however it was removed since
    (history limits, a TTL, Replace or a person)."""
    slots = [at(m) for m in range(4)]
    down, up = at(1) - timedelta(seconds=10), at(2) + timedelta(seconds=20)
    # The Jobs of 10:00 and 10:02 still run (no node), or ran and ended, which the
    # controller's SawCompletedJob Events name (on a node).
    ended = [job(at(0)), job(at(2), late=20)]
    for ran, completed in (({}, frozenset()), ({"jobs": ended}, frozenset({at(0), at(2)}))):
        for deadline in (None, 50):
            # Allow: the Job of 10:00 may still run (under Forbid 10:01 is skipped for it).
            job_spec = spec(concurrencyPolicy="Allow", startingDeadlineSeconds=deadline)
            outage = unwatched_outage(completed_events=completed, **ran)
            result = judge(job_spec, outage, OUTAGE_NOW, since=at(0))
            assert reasons(result) == controllers_reading(slots, down, up, deadline)
            reason = "DeadlineExceeded" if deadline else "ControllerDown"
            assert reasons(result) == [(at(1), reason)]
            runs = tally(0, 0, None, [], result.new_runs)
            assert (runs.missed_runs, runs.last_missed_time) == (1, at(1))


def test_an_unwatched_slot_stays_unknown_where_the_controllers_record_has_holes() -> None:
    """Where the controller's record may lack the slot's Job, the slot is Unknown as before:
    never a miss on a guess."""
    allow = spec(concurrencyPolicy="Allow")
    ended = [job(at(0)), job(at(2), late=20)]
    cases: dict[str, KubernetesEvidence] = {
        # No create Event left before the slot (expired, or lost as the controller died).
        "no earlier Event": unwatched_outage(created_events=frozenset({at(2)})),
        # The event recorder combined creates into one Event naming only the latest Job.
        "creates combined": unwatched_outage(created_events=None),
        # A Job there now that no create Event names: the recorder dropped Events (its
        # spam filter: 25 a CronJob, then one in five minutes), maybe the slot's too.
        "a create not recorded": unwatched_outage(created_events=frozenset({at(0)})),
        # A Job that ended over ten seconds ago without its SawCompletedJob: the same.
        "a completion not recorded": unwatched_outage(
            jobs=ended, completed_events=frozenset({at(0)})
        ),
    }
    for case, ev in cases.items():
        result = judge(allow, ev, OUTAGE_NOW, since=at(0))
        assert reasons(result) == [(at(1), "Unknown")], case


# ---- Forbid at one-second resolution (issue 25, defect 8) ---------------------------------


def test_a_skip_the_controller_reported_is_never_a_miss_whatever_the_times_round_to() -> None:
    """The 10:00 run ended at 10:01:00.4, which its times read as 10:01:00 (they have a
    one-second resolution); the controller looked at the 10:01 slot at 10:01:00.1, saw it
    running, and skipped the slot (its Event JobAlreadyActive). By the times alone the run
    was over at the slot; the controller's own Event says it was not: OverlapSkipped."""
    forbid = spec(concurrencyPolicy="Forbid")
    ran_into = JobRecord(
        scheduled_time=at(0), created=at(0) + timedelta(seconds=1),
        start_time=at(0) + timedelta(seconds=1), finished_at=at(1), succeeded=True,
    )  # fmt: skip
    now = at(2) + SETTLE
    # The watch cache alone cannot tell: the look beyond it is needed.
    assert judge(forbid, evidence([ran_into], confirmed=False), now).needs_confirmation
    reported = evidence([ran_into], overlap_skip_reported=True)
    assert reasons(judge(forbid, reported, now)) == [(at(1), "OverlapSkipped")]
    runs = tally(0, 0, None, [], judge(forbid, reported, now).new_runs)
    assert (runs.missed_runs, runs.skipped_runs) == (0, 1)
    # Without the controller's word, or with a run that ended in the second before the
    # slot (the controller saw it ended), the slot is judged as before.
    assert reasons(judge(forbid, evidence([ran_into]), now)) == [(at(1), "ControllerDown")]
    ended_before = replace(ran_into, finished_at=at(1) - timedelta(seconds=1))
    before = evidence([ended_before], overlap_skip_reported=True)
    assert reasons(judge(forbid, before, now)) == [(at(1), "ControllerDown")]
    # Allow never skips.
    assert reasons(judge(spec(concurrencyPolicy="Allow"), reported, now)) == [
        (at(1), "ControllerDown")
    ]
