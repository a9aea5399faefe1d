"""A randomized model of the kubernetes judge (issue 14): a CronJob controller and the
operator go up and down, the watch misses events, Jobs vanish by history limits, TTL,
Replace or a person, the controller's Events expire (a slot the operator did not watch is
judged by them while they reach back to it). Whatever happens, no slot that ran is ever
called missed, and no slot is reported twice."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.api.models import MissedRun, ScheduledJobSpec
from sundial.planning.missed import (
    JobRecord,
    KubernetesEvidence,
    counts_as_missed,
    judge_kubernetes,
    start_accounting,
    timetable_hash,
)
from sundial.planning.schedule import timetable

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
MINUTES = 30
SPEC = ScheduledJobSpec.model_validate({"schedule": "* * * * *", "job": {"image": "x"}})


def minute(m: float) -> datetime:
    return T0 + timedelta(minutes=m)


@dataclass(frozen=True)
class World:
    controller_up: list[bool]  # at each slot
    operator_up: list[bool]  # for the pass half a minute after each slot
    watch_live: list[bool]  # whether the watch delivered that slot's Job event
    job_lifetime: list[int]  # minutes a Job lives after its slot (deleted then)
    event_lifetime: int  # minutes the controller's Events are kept


worlds = st.builds(
    World,
    controller_up=st.lists(st.booleans(), min_size=MINUTES, max_size=MINUTES),
    operator_up=st.lists(st.booleans(), min_size=MINUTES, max_size=MINUTES),
    watch_live=st.lists(st.booleans(), min_size=MINUTES, max_size=MINUTES),
    job_lifetime=st.lists(st.integers(0, 12), min_size=MINUTES, max_size=MINUTES),
    event_lifetime=st.integers(0, 15),
)


def job(slot: int) -> JobRecord:
    created = minute(slot) + timedelta(seconds=2)
    return JobRecord(
        scheduled_time=minute(slot), created=created, start_time=created,
        finished_at=created + timedelta(seconds=3), succeeded=True,
    )  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(worlds)
def test_no_healthy_slot_is_called_missed_and_none_twice(world: World) -> None:
    table = timetable(SPEC)
    started = [m for m in range(1, MINUTES) if world.controller_up[m]]
    accounting = start_accounting(None, timetable_hash(SPEC), T0, since=T0)
    seen: set[datetime] = set()
    watching_since: datetime | None = None
    reported: list[MissedRun] = []
    for m in range(1, MINUTES):
        now = minute(m + 0.5)
        if not world.operator_up[m]:
            watching_since = None
            continue
        if watching_since is None:
            watching_since = now  # a restart: it lists, then watches
        existing = [s for s in started if s <= m and m < s + world.job_lifetime[s]]
        # While it watches, it sees each Job created, unless the watch missed the event.
        seen |= {minute(s) for s in started if minute(s) >= watching_since
                 and s <= m and world.watch_live[s]}  # fmt: skip
        events = {minute(s) for s in started if s <= m < s + world.event_lifetime}
        last_schedule = max((minute(s) for s in started if s <= m), default=None)

        known = KubernetesEvidence(
            jobs=[job(s) for s in existing],
            seen_slots=frozenset(seen),
            watching_since=watching_since,
            last_schedule_time=last_schedule,
            successful_history_limit=3,
            failed_history_limit=1,
            ttl_seconds_after_finished=None,
        )
        judgement = judge_kubernetes(table, SPEC, accounting, known, now)
        if judgement.needs_confirmation:
            # The LIST of the owner's Jobs, and the controller's Events still kept: each
            # Job's create and completion (it ends seconds after its slot).
            listed = frozenset({minute(s) for s in existing} | events)
            confirmed = replace(known, confirmed=True, confirmed_slots=listed,
                                created_events=frozenset(events),
                                completed_events=frozenset(events))  # fmt: skip
            judgement = judge_kubernetes(table, SPEC, accounting, confirmed, now)
        assert judgement.accounting is not None
        accounting = judgement.accounting
        reported += judgement.new_runs

    ran = {minute(s) for s in started}
    falsely_missed = [r for r in reported if counts_as_missed(r) and r.scheduled_time in ran]
    assert falsely_missed == []
    times = [r.scheduled_time for r in reported]
    assert len(times) == len(set(times)), "a slot reported twice"
