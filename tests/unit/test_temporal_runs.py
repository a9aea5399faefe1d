"""When the temporal backend lists a schedule's executions (temporal_runs.observe_all_runs):
only when more actions were taken than describe's recent actions hold, and it keeps
listing while a listed run is still going. Temporal is a fake; `asyncio.run` drives it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sundial.api.models import ScheduledJob
from sundial.backends.temporal.client import ListedRun
from sundial.backends.temporal.runs import MAX_LISTED_RUNS, observe_all_runs

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


class FakeTemporal:
    def __init__(self, listed: list[ListedRun], kept: int | None = None) -> None:
        self.listed = listed
        # The schedule's executions Temporal still has (its visibility count).
        self.kept = len(listed) if kept is None else kept
        self.listings: list[datetime | None] = []
        self.counts: list[datetime | None] = []

    async def list_runs(self, connection: Any, schedule_id: str, closed_after: datetime | None,
                        limit: int) -> list[ListedRun]:  # fmt: skip
        self.listings.append(closed_after)
        return self.listed[:limit]

    async def count_runs(self, connection: Any, schedule_id: str,
                         closed_after: datetime | None = None) -> int:  # fmt: skip
        self.counts.append(closed_after)
        if closed_after is None:
            return self.kept
        return len([r for r in self.listed if r.close_time is None or r.close_time > closed_after])


def description(num_actions: int) -> Any:
    info = SimpleNamespace(recent_actions=[], running_workflows=[], num_actions=num_actions)
    return SimpleNamespace(id="sundial/team/nightly", info=info,
                           raw_description=SimpleNamespace(info=info))  # fmt: skip


def listed(n: int, status: str = "COMPLETED") -> ListedRun:
    started = T0 + timedelta(days=1)
    return ListedRun(
        workflow_id=f"w-{n}", run_id=f"r-{n}", status=status,
        scheduled_time=T0 + timedelta(hours=n), start_time=started,
        close_time=started + timedelta(seconds=n) if status != "RUNNING" else None,
    )  # fmt: skip


def sj(seen: int | None, **status: Any) -> ScheduledJob:
    return ScheduledJob.model_validate({
        "metadata": {"name": "nightly", "namespace": "team"},
        "spec": {"backend": "temporal", "schedule": "0 * * * *",
                 "workflow": {"type": "Tick", "taskQueue": "q"}},
        "status": {**status, "seenActions": seen} if seen is not None else status,
    })  # fmt: skip


def observe(temporal: FakeTemporal, obj: ScheduledJob, actions: int) -> tuple[list[str], int]:
    ids, seen, _ = observe_counting(temporal, obj, actions)
    return ids, seen


def observe_counting(
    temporal: FakeTemporal, obj: ScheduledJob, actions: int
) -> tuple[list[str], int, int]:
    runs, seen, unseen = asyncio.run(observe_all_runs(temporal, obj, None, description(actions)))  # type: ignore[arg-type]
    return [run.workflow_id or "" for run in runs], seen, unseen


def test_no_listing_while_the_recent_actions_cover_every_new_action() -> None:
    temporal = FakeTemporal([listed(0)])
    assert observe(temporal, sj(5), 5) == ([], 5)
    assert temporal.listings == []


def test_actions_beyond_the_recent_ones_come_from_the_listing() -> None:
    temporal = FakeTemporal([listed(n) for n in range(15)])
    ids, seen = observe(temporal, sj(0), 15)
    assert (sorted(ids), seen) == (sorted(f"w-{n}" for n in range(15)), 15)
    assert len(temporal.listings) == 1


def test_a_listed_run_still_going_holds_the_count_so_the_next_pass_lists_again() -> None:
    temporal = FakeTemporal([listed(0), listed(1, status="RUNNING")])
    assert observe(temporal, sj(3), 15) == (["w-0"], 3)


def test_actions_whose_runs_temporal_no_longer_has_are_stated_unseen_once() -> None:
    # 15 actions since the last pass; Temporal deleted the 5 oldest executions (retention)
    # before Sundial looked: 10 are counted, 5 stated unseen, and the count moves on.
    temporal = FakeTemporal([listed(n) for n in range(5, 15)])
    ids, seen, unseen = observe_counting(temporal, sj(0), 15)
    assert (len(ids), seen, unseen) == (10, 15, 5)
    assert temporal.counts == [None]  # the schedule's executions Temporal still has


def test_no_gap_is_claimed_while_temporal_still_has_every_run() -> None:
    temporal = FakeTemporal([listed(n) for n in range(15)])
    assert observe_counting(temporal, sj(0), 15)[1:] == (15, 0)
    assert temporal.counts == []  # as many found as actions taken: no count asked
    # Old executions Temporal keeps pad its count: a short listing alone claims nothing.
    temporal = FakeTemporal([listed(n) for n in range(12)], kept=40)
    assert observe_counting(temporal, sj(0), 15)[1:] == (15, 0)
    # No baseline (a status from before seenActions): nothing claimed either.
    temporal = FakeTemporal([listed(n) for n in range(5, 15)])
    assert observe_counting(temporal, sj(None), 15)[1:] == (15, 0)


def test_no_gap_is_judged_while_a_listed_run_is_still_going() -> None:
    temporal = FakeTemporal([listed(n) for n in range(5, 14)] + [listed(14, status="RUNNING")])
    ids, seen, unseen = observe_counting(temporal, sj(0), 15)
    assert (len(ids), seen, unseen) == (9, 0, 0)


def test_the_listing_reaches_back_to_the_counted_floor_not_to_a_start() -> None:
    # A run still going that fell off the recent actions started before every run status
    # lists: the listing is bounded by countedSince (runs ending later are not counted
    # yet, whenever they started), so it is listed again once it has ended.
    floor = T0 + timedelta(days=1, seconds=3)
    status = {
        "countedSince": floor.isoformat(),
        "countedRuns": [{"name": "w-9", "ended": (floor + timedelta(hours=1)).isoformat()}],
    }
    temporal = FakeTemporal([listed(n) for n in range(4, 12)])
    ids, _, _ = observe_counting(temporal, sj(0, **status), 15)
    assert temporal.listings == [floor]
    assert "w-9" not in ids  # counted before


def test_more_runs_than_one_listing_holds_are_stated_not_dropped() -> None:
    many = [listed(n) for n in range(MAX_LISTED_RUNS + 30)]
    temporal = FakeTemporal(many)
    ids, seen, unseen = observe_counting(temporal, sj(0), len(many))
    assert (len(ids), seen, unseen) == (MAX_LISTED_RUNS, len(many), 30)
