"""When the temporal backend lists a schedule's executions (temporal_runs.observe_all_runs):
only when more actions were taken than describe's recent actions hold, and it keeps
listing while a listed run is still going. Temporal is a fake; `asyncio.run` drives it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sundial.api.models import ScheduledJob
from sundial.temporal import ListedRun
from sundial.temporal_runs import observe_all_runs

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


class FakeTemporal:
    def __init__(self, listed: list[ListedRun]) -> None:
        self.listed = listed
        self.listings: list[datetime | None] = []

    async def list_runs(self, connection: Any, schedule_id: str, since: datetime | None,
                        limit: int) -> list[ListedRun]:  # fmt: skip
        self.listings.append(since)
        return self.listed


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


def sj(seen: int | None) -> ScheduledJob:
    return ScheduledJob.model_validate({
        "metadata": {"name": "nightly", "namespace": "team"},
        "spec": {"backend": "temporal", "schedule": "0 * * * *",
                 "workflow": {"type": "Tick", "taskQueue": "q"}},
        "status": {"seenActions": seen} if seen is not None else {},
    })  # fmt: skip


def observe(temporal: FakeTemporal, obj: ScheduledJob, actions: int) -> tuple[list[str], int]:
    runs, seen = asyncio.run(observe_all_runs(temporal, obj, None, description(actions)))  # type: ignore[arg-type]
    return [run.workflow_id or "" for run in runs], seen


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
