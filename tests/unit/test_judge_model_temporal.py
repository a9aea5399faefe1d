"""A randomized model of the temporal judge (issue 14): a Temporal schedule whose slots
run, are missed past the catch-up window, skipped by the overlap policy or dropped from
the buffer; the operator looks at random moments (or is down for a while), and the schedule
is paused for stretches. Whatever happens, the totals are exactly Temporal's counter rises,
no slot is counted twice, and no slot that ran is named missed by an entry that claims to
know its time (`approximate` unset)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.api.models import MissedRun, ScheduledJobSpec, TemporalCounters
from sundial.planning.missed import (
    RECENT_ACTIONS_KEPT,
    SETTLE,
    TemporalEvidence,
    judge_temporal,
    start_accounting,
    timetable_hash,
)
from sundial.planning.schedule import timetable

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
SLOTS = 40
EVERY = 10  # seconds
SPEC = ScheduledJobSpec.model_validate(
    {"backend": "temporal", "interval": {"every": f"{EVERY}s"},
     "workflow": {"type": "w", "taskQueue": "q"}}
)  # fmt: skip
FATES = ("Ran", "CatchupWindowExceeded", "OverlapSkipped", "BufferDropped")
COUNTER_OF = {
    "CatchupWindowExceeded": "missed_catchup_window",
    "OverlapSkipped": "overlap_skipped",
    "BufferDropped": "buffer_dropped",
}


def slot(i: int) -> datetime:
    return T0 + timedelta(seconds=EVERY * (i + 1))


@dataclass(frozen=True)
class World:
    fates: list[str]  # what became of each slot
    paused: list[bool]  # whether the schedule was paused over each slot
    looks: list[float]  # seconds after each slot at which the operator looks (or not)
    operator_up: list[bool]


worlds = st.builds(
    World,
    fates=st.lists(st.sampled_from(FATES), min_size=SLOTS, max_size=SLOTS),
    paused=st.lists(st.booleans(), min_size=SLOTS, max_size=SLOTS),
    looks=st.lists(st.floats(0, EVERY - 0.1), min_size=SLOTS, max_size=SLOTS),
    operator_up=st.lists(st.booleans(), min_size=SLOTS, max_size=SLOTS),
)


def evidence_at(world: World, now: datetime) -> TemporalEvidence:
    """What describe() shows at `now`: counters of the slots resolved by then, the ten most
    recent actions, and whether the schedule is paused now. Paused slots do nothing."""
    counters = Counter[str]()
    ran: list[datetime] = []
    for i, fate in enumerate(world.fates):
        if slot(i) > now or world.paused[i]:
            continue
        if fate == "Ran":
            ran.append(slot(i))
        else:
            counters[COUNTER_OF[fate]] += 1
    recent = ran[-RECENT_ACTIONS_KEPT:]
    current = next((world.paused[i] for i in range(SLOTS) if slot(i) > now), world.paused[-1])
    return TemporalEvidence(
        counters=TemporalCounters(**counters),
        recent_scheduled=recent,
        recent_started=[t + timedelta(seconds=1) for t in recent],
        paused=current,
    )


@settings(max_examples=200, deadline=None)
@given(worlds)
def test_totals_are_temporals_and_known_times_are_true(world: World) -> None:
    table = timetable(SPEC)
    accounting = start_accounting(None, timetable_hash(SPEC), T0, since=T0)
    accounting = accounting.model_copy(update={"temporal_counters": TemporalCounters()})
    reported: list[MissedRun] = []
    moments = [slot(i) + timedelta(seconds=world.looks[i]) for i in range(SLOTS)]
    # A last look well after the end, when everything has settled.
    moments.append(slot(SLOTS - 1) + SETTLE + timedelta(seconds=EVERY))
    for i, now in enumerate(moments):
        if i < SLOTS and not world.operator_up[i]:
            continue
        judgement = judge_temporal(table, accounting, evidence_at(world, now), now)
        reported += judgement.new_runs
        accounting = judgement.accounting

    final = evidence_at(world, moments[-1]).counters
    by_reason = Counter(run.reason for run in reported)
    assert by_reason["CatchupWindowExceeded"] == final.missed_catchup_window
    assert by_reason["OverlapSkipped"] == final.overlap_skipped
    assert by_reason["BufferDropped"] == final.buffer_dropped

    exact = [run for run in reported if not run.approximate]
    assert len({run.scheduled_time for run in exact}) == len(exact), "a slot counted twice"
    # (A slot paused by hand between two looks is invisible to Sundial, as to anyone
    # reading describe(); only slots that really ran are held against it.)
    healthy = {
        slot(i) for i, fate in enumerate(world.fates) if fate == "Ran" and not world.paused[i]
    }
    wrongly = [run for run in exact if run.scheduled_time in healthy]
    assert wrongly == [], "a slot that ran was named missed"
