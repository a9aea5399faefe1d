"""planning/catchup.py: what each backend is told, and which missed or held slots Sundial
runs late under spec.catchUp, the same on both backends. Pure: `now` is passed in. (Each
cell against the real controller manager and Temporal: test_missed_runs_kubernetes,
test_missed_runs_temporal and test_pause_policies.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sundial.api.models import (
    MissedRun,
    PauseStatus,
    RequestStatus,
    ScheduledJob,
    ScheduledJobSpec,
)
from sundial.planning import catchup
from sundial.planning import requests as rq
from sundial.planning.cronjob import cronjob_manifest
from sundial.planning.schedule import timetable
from sundial.planning.temporal_schedule import catchup_window

NOW = datetime(2026, 12, 6, 5, 0, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
# An outage of the last seven minute slots.
OUTAGE = [datetime(2026, 12, 6, 4, 53, tzinfo=UTC) + n * MINUTE for n in range(7)]


def spec(catch_up: dict[str, Any] | None = None, **fields: Any) -> ScheduledJobSpec:
    return ScheduledJobSpec.model_validate({
        "schedule": "* * * * *", "job": {"image": "registry.example/a:1"},
        **({"catchUp": catch_up} if catch_up else {}), **fields,
    })  # fmt: skip


def missed(*slots: datetime, reason: str = "ControllerDown", approximate: bool = False
           ) -> list[MissedRun]:  # fmt: skip
    return [MissedRun(scheduled_time=slot, reason=reason, approximate=approximate or None)
            for slot in slots]  # fmt: skip


def ranges(requests: list[RequestStatus]) -> list[tuple[datetime | None, datetime | None]]:
    return [(r.start, r.end) for r in requests]


@pytest.mark.parametrize(
    ("catch_up", "deadline", "window"),
    [
        (None, None, timedelta(days=365)),
        ({"policy": "None"}, 15, timedelta(seconds=15)),
        ({"policy": "Latest"}, 3600, timedelta(seconds=15)),
        ({"policy": "All", "window": "10m"}, 600, timedelta(seconds=15)),
    ],
)
def test_each_backend_is_told_only_what_it_does_as_the_policy_says(
    catch_up: dict[str, Any] | None, deadline: int | None, window: timedelta
) -> None:
    # kubernetes: the controller runs the latest unmet slot within the deadline; Temporal
    # would run the oldest, so it is left only the grace.
    assert catchup.kubernetes_deadline(spec(catch_up)) == deadline
    assert catchup_window(spec(catch_up)) == window


def test_without_catch_up_startingdeadlineseconds_is_each_backends_as_before() -> None:
    legacy = spec(startingDeadlineSeconds=300)
    assert catchup.kubernetes_deadline(legacy) == 300
    assert catchup_window(legacy) == timedelta(seconds=300)


def test_the_rendered_cronjob_carries_the_policys_deadline() -> None:
    def rendered(s: ScheduledJobSpec) -> dict[str, Any]:
        sj = ScheduledJob.model_validate(
            {"metadata": {"name": "invoices", "namespace": "shop", "uid": "u1"},
             "spec": s.model_dump(by_alias=True, exclude_none=True)}
        )  # fmt: skip
        return dict(cronjob_manifest(sj)["spec"])

    assert rendered(spec({"policy": "Latest", "window": "15m"}))["startingDeadlineSeconds"] == 900
    assert "startingDeadlineSeconds" not in rendered(spec())


@pytest.mark.parametrize("backend", ["kubernetes", "temporal"])
def test_none_runs_nothing_late_and_every_slot_stays_missed(backend: Any) -> None:
    s = spec({"policy": "None"})
    runs = missed(*OUTAGE)
    kept, requests = catchup.from_misses(s, backend, timetable(s), runs, None, NOW)
    assert (kept, requests) == (runs, [])


def test_latest_on_temporal_runs_the_newest_missed_slot_once_and_the_rest_stay_missed() -> None:
    s = spec({"policy": "Latest"})
    runs = missed(*OUTAGE, reason="CatchupWindowExceeded")
    kept, requests = catchup.from_misses(s, "temporal", timetable(s), runs, None, NOW)
    assert ranges(requests) == [(OUTAGE[-1], OUTAGE[-1])]
    assert [r.scheduled_time for r in kept] == OUTAGE[:-1]
    assert requests[0].kind == "CatchUp"
    assert requests[0].outcome == "InProgress"
    assert requests[0].id == catchup.request_id(OUTAGE[-1])


def test_latest_on_kubernetes_is_the_controllers_own_and_sundial_adds_nothing() -> None:
    s = spec({"policy": "Latest"})
    runs = missed(*OUTAGE[:-1])  # the controller ran the latest itself: not judged missed
    assert catchup.from_misses(s, "kubernetes", timetable(s), runs, None, NOW) == (runs, [])


def test_latest_never_runs_a_slot_older_than_one_that_ran() -> None:
    s = spec({"policy": "Latest"})
    runs = missed(OUTAGE[2], reason="CatchupWindowExceeded")
    kept, requests = catchup.from_misses(s, "temporal", timetable(s), runs, OUTAGE[4], NOW)
    assert (kept, requests) == (runs, [])


@pytest.mark.parametrize("backend", ["kubernetes", "temporal"])
def test_all_runs_every_missed_slot_within_the_window_as_one_request(backend: Any) -> None:
    s = spec({"policy": "All", "window": "5m"})
    reason = "ControllerDown" if backend == "kubernetes" else "CatchupWindowExceeded"
    runs = missed(*OUTAGE, reason=reason)
    kept, requests = catchup.from_misses(s, backend, timetable(s), runs, None, NOW)
    within = [slot for slot in OUTAGE if slot >= NOW - timedelta(minutes=5)]
    assert ranges(requests) == [(within[0], within[-1])]
    assert requests[0].runs_requested == len(within)
    # Beyond the window: missed, with the outage's reason.
    assert [(r.scheduled_time, r.reason) for r in kept] == [
        (slot, reason) for slot in OUTAGE if slot not in within
    ]


def test_all_never_runs_what_sundial_cannot_tell_or_the_overlap_policy_skipped() -> None:
    s = spec({"policy": "All"})
    runs = [
        *missed(OUTAGE[0], reason="Unknown"),
        *missed(OUTAGE[1], reason="OverlapSkipped"),
        *missed(OUTAGE[2], reason="BufferDropped"),
        *missed(OUTAGE[3], reason="CatchupWindowExceeded", approximate=True),
    ]
    assert catchup.from_misses(s, "temporal", timetable(s), runs, None, NOW) == (runs, [])


def test_a_slot_that_ran_inside_an_outage_splits_it_into_two_requests() -> None:
    s = spec({"policy": "All"})
    runs = missed(*OUTAGE[:3], *OUTAGE[4:])
    _, requests = catchup.from_misses(s, "kubernetes", timetable(s), runs, None, NOW)
    assert ranges(requests) == [(OUTAGE[0], OUTAGE[2]), (OUTAGE[4], OUTAGE[6])]
    # Each runs only its own range's slots: the slot that ran is in neither.
    for request in requests:
        slots = rq.catch_up_slots(
            rq.Request("CatchUp", request.id, request.start, request.end), request,
            timetable(s), NOW,
        )  # fmt: skip
        assert OUTAGE[3] not in slots


WINDOW = PauseStatus(reason="MaintenanceWindow", message="window", since=OUTAGE[0] - MINUTE / 2,
                     until=OUTAGE[-1] + MINUTE / 2)  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "backend", "expected"),
    [
        ("None", "kubernetes", []),
        ("None", "temporal", []),
        # The controller starts the window's latest slot by itself (suspended slots count
        # as unmet); Temporal runs nothing of a paused time.
        ("Latest", "kubernetes", []),
        ("Latest", "temporal", [(OUTAGE[-1], OUTAGE[-1])]),
        ("All", "kubernetes", [(OUTAGE[0], OUTAGE[-2])]),
        ("All", "temporal", [(OUTAGE[0], OUTAGE[-1])]),
    ],
)
def test_after_a_maintenance_window_the_same_slots_run_on_both_backends(
    policy: str, backend: Any, expected: list[tuple[datetime, datetime]]
) -> None:
    s = spec({"policy": policy})
    assert ranges(catchup.after_window(s, backend, timetable(s), WINDOW, NOW)) == expected


def test_after_a_window_only_slots_within_the_catch_up_window_run() -> None:
    s = spec({"policy": "All", "window": "3m"})
    requests = catchup.after_window(s, "temporal", timetable(s), WINDOW, NOW)
    assert ranges(requests) == [(OUTAGE[-2], OUTAGE[-1])]  # 04:58 and 04:59: since 04:57:30


def test_a_failure_pause_or_a_plain_suspend_catches_nothing_up() -> None:
    s = spec({"policy": "All"})
    for reason in ("FailurePolicy", "Suspended"):
        ended = WINDOW.model_copy(update={"reason": reason})
        assert catchup.after_window(s, "temporal", timetable(s), ended, NOW) == []


def test_a_catch_up_is_acted_on_from_status_alone_until_it_is_done() -> None:
    s = spec({"policy": "All"})
    _, made = catchup.from_misses(s, "temporal", timetable(s), missed(*OUTAGE[:2]), None, NOW)
    handled = rq.with_new([], made)
    refusals, to_act = rq.open_requests({}, handled, timetable(s), NOW)
    assert refusals == []
    assert [(o.request.kind, o.slots) for o in to_act] == [("CatchUp", OUTAGE[:2])]
    # Decided again (a status write was lost): the same request, not a second one.
    assert rq.with_new(handled, made) == handled
    done = [handled[0].model_copy(update={"outcome": "Done"})]
    assert rq.open_requests({}, done, timetable(s), NOW) == ([], [])


def test_an_unfinished_catch_up_outlives_the_ten_requests_kept() -> None:
    received = NOW - timedelta(hours=1)
    old = [
        RequestStatus(kind="RunNow", id=f"r{n}", outcome="Done", received_time=received)
        for n in range(rq.REQUESTS_KEPT)
    ]
    pending = RequestStatus(kind="CatchUp", id="catchup-x", outcome="InProgress",
                            received_time=received, start=OUTAGE[0], end=OUTAGE[1])  # fmt: skip
    newer = RequestStatus(kind="RunNow", id="new", outcome="Done", received_time=NOW)
    kept = rq.with_entries([pending, *old], [newer], {})
    assert pending in kept
    assert len(kept) == rq.REQUESTS_KEPT
