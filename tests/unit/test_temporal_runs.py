"""When the temporal backend lists a schedule's executions, and what a listing means
(temporal.runs: listing_needed, sort_listed, listed_run, unseen_after): pure functions,
no server. The I/O between them (describe, the listing, Temporal's counts) runs against the
real dev server in tests/integration/test_unseen_runs_temporal.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sundial.api.models import RequestStatus, ScheduledJob
from sundial.backends.temporal.client import ListedRun
from sundial.backends.temporal.runs import (
    MAX_LISTED_RUNS,
    listed_run,
    listing_needed,
    settled_ids,
    sort_listed,
    unseen_after,
)
from sundial.planning.runs import counted_floor

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


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


def ids(runs: list[ListedRun]) -> list[str]:
    return [run.workflow_id for run in runs]


def test_no_listing_while_the_recent_actions_cover_every_new_action() -> None:
    assert not listing_needed(5, 5, 0)
    assert not listing_needed(0, 10, 10)  # describe keeps the 10 latest
    assert listing_needed(0, 11, 10)
    assert listing_needed(None, 15, 10), "no baseline yet: list"


def test_actions_beyond_the_recent_ones_come_from_the_listing() -> None:
    to_record, going = sort_listed([listed(n) for n in range(15)], set())
    assert (sorted(ids(to_record)), going) == (sorted(f"w-{n}" for n in range(15)), False)


def test_a_listed_run_still_going_is_not_recorded_and_holds_the_count() -> None:
    to_record, going = sort_listed([listed(0), listed(1, status="RUNNING")], set())
    assert (ids(to_record), going) == (["w-0"], True)


def test_what_is_counted_already_is_not_recorded_again() -> None:
    # A run still going that fell off the recent actions started before every run status
    # lists: the listing is bounded by countedSince (runs ending later are not counted
    # yet, whenever they started), and what status counted is not counted twice.
    floor = T0 + timedelta(days=1, seconds=3)
    status = sj(0, countedSince=floor.isoformat(), countedRuns=[
        {"name": "w-9", "ended": (floor + timedelta(hours=1)).isoformat()}]).status  # fmt: skip
    assert counted_floor(status) == floor
    to_record, _ = sort_listed([listed(n) for n in range(4, 12)] + [listed(5)],
                               settled_ids(status, []))  # fmt: skip
    assert ids(to_record) == [f"w-{n}" for n in range(4, 12) if n != 9], "once each"


def test_actions_whose_runs_temporal_no_longer_has_are_stated_unseen() -> None:
    # 15 actions since the last pass; Temporal deleted the 5 oldest executions (retention)
    # before Sundial looked: 10 found, Temporal keeps 10, so 5 are unseen.
    assert unseen_after(0, 15, shown=10, listed=10, kept=10, pending=None) == 5


def test_no_gap_is_claimed_while_temporal_still_has_every_run() -> None:
    assert unseen_after(0, 15, shown=15, listed=15, kept=None, pending=None) == 0
    # Old executions Temporal keeps pad its count: a short listing alone claims nothing.
    assert unseen_after(0, 15, shown=12, listed=12, kept=40, pending=None) == 0
    # No baseline (a status from before seenActions): nothing claimed either.
    assert unseen_after(None, 15, shown=10, listed=10, kept=10, pending=None) == 0
    # A count that went back (a schedule made anew): nothing claimed.
    assert unseen_after(20, 15, shown=0, listed=0, kept=0, pending=None) == 0


def test_more_runs_than_one_listing_holds_are_stated_not_dropped() -> None:
    many = MAX_LISTED_RUNS + 30
    assert unseen_after(0, many, shown=MAX_LISTED_RUNS, listed=MAX_LISTED_RUNS,
                        kept=many, pending=many) == 30  # fmt: skip


def test_a_listed_run_carries_its_backfill_and_its_failure() -> None:
    request = RequestStatus(kind="Backfill", id="fill", outcome="Done",
                            received_time=T0 - timedelta(minutes=1), start=T0,
                            end=T0 + timedelta(hours=20), runs_requested=20,
                            runs_started=20)  # fmt: skip
    failed = listed_run(listed(3, status="FAILED"), [request], ("ApplicationError", "boom"))
    assert failed.requested == "Backfill/fill"
    assert failed.workflow_id == "w-3"
    assert "boom" in (failed.message or "")
    scheduled = listed_run(listed(3), [], None)
    assert scheduled.requested is None
