"""nextRunTimes move with the slots Sundial has settled, not with the clock: a minute
schedule's status is written once per slot, not once when the slot passes and again when
it is judged (issue 11: 1,287 status writes for 740 slots)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sundial.api.models import RunAccounting, ScheduledJob
from sundial.planning.cronjob import cronjob_view
from sundial.planning.missed import SETTLE, Judgement, temporal_requeue
from sundial.planning.runs import limits, run_history
from sundial.planning.schedule import timetable
from sundial.planning.status import kubernetes_status

SLOT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def minute_job() -> ScheduledJob:
    return ScheduledJob.model_validate({
        "metadata": {"name": "tick", "namespace": "shop", "generation": 1},
        "spec": {"schedule": "* * * * *", "job": {"image": "busybox:1"}},
    })  # fmt: skip


def next_runs(accounted_until: datetime, now: datetime) -> list[datetime]:
    sj = minute_job()
    accounting = RunAccounting(accounted_until=accounted_until, spec_hash="h")
    history = run_history(sj.status, [], limits(sj.spec), now, complete=True)
    status = kubernetes_status(
        sj,
        cronjob_view({"status": {}}),
        timetable(sj.spec),
        Judgement(accounting=accounting),
        history,
        now=now,
    )
    return status.next_run_times


def test_a_slot_stays_listed_until_it_has_settled() -> None:
    """Between a slot and its settle time nothing the status says has been decided: the
    list is the one written before the slot, so a pass woken then (the CronJob
    controller's own status write) writes nothing."""
    before = next_runs(SLOT - MINUTE, SLOT - timedelta(seconds=1))
    assert before[0] == SLOT
    assert next_runs(SLOT - MINUTE, SLOT + SETTLE - timedelta(seconds=1)) == before


def test_a_settled_slot_leaves_the_list() -> None:
    assert next_runs(SLOT - MINUTE, SLOT + SETTLE + timedelta(seconds=1))[0] == SLOT + MINUTE


def test_a_slot_seen_started_leaves_the_list_at_once() -> None:
    """The pass that records the run (the Job seen, the watermark on its slot) also moves
    the list: one write for both."""
    assert next_runs(SLOT, SLOT + timedelta(seconds=2))[0] == SLOT + MINUTE


def test_a_temporal_schedule_is_looked_at_once_its_next_slot_has_settled() -> None:
    """Looked at on the resync period alone, a minute schedule is seen once just after
    its action (a write) and again once the slot has settled (another write). The look
    that falls due before the next slot settles waits for it instead."""
    jitter = timedelta(seconds=2)
    settles = SLOT + SETTLE + jitter
    early = SLOT - timedelta(seconds=20)
    assert temporal_requeue([SLOT], jitter, early, 30.0) == pytest.approx(
        (settles - early).total_seconds() + 1
    )
    # A slot further off than the resync period: the resync period.
    assert temporal_requeue([SLOT], jitter, SLOT - timedelta(seconds=50), 30.0) == 30.0
    assert temporal_requeue([], jitter, early, 30.0) == 30.0


def test_a_temporal_slot_is_looked_at_when_it_settles_however_long_the_resync() -> None:
    """The resync is a safety net (the listing of schedules wakes what changed), minutes
    long: a minute schedule is still judged slot by slot, each once it has settled."""
    jitter = timedelta(0)
    early = SLOT - timedelta(seconds=20)
    assert temporal_requeue([SLOT], jitter, early, 300.0) == pytest.approx(
        (SLOT + SETTLE - early).total_seconds() + 1
    )
    # A daily slot hours away: the resync period.
    assert temporal_requeue([SLOT], jitter, SLOT - timedelta(hours=5), 300.0) == 300.0
