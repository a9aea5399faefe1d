"""status.not_ready: the status of an object whose spec cannot be acted on now. Ready says
why (Unknown when Sundial cannot tell, False otherwise); what the backend last did stays;
a switch in progress shows in Switching."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sundial.api import reasons
from sundial.api.models import ScheduledJob
from sundial.planning.status import find_condition, not_ready

NOW = datetime(2026, 12, 6, 5, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(hours=1)


def scheduledjob(kind: str = "kubernetes", **status: Any) -> ScheduledJob:
    backend = kind
    spec: dict[str, Any] = {"backend": backend, "schedule": "*/5 * * * *"}
    if backend == "kubernetes":
        spec["job"] = {"image": "registry.example/a:1"}
    else:
        spec["workflow"] = {"type": "Billing", "taskQueue": "billing"}
    return ScheduledJob.model_validate({
        "metadata": {"name": "invoices", "namespace": "shop", "generation": 4},
        "spec": spec,
        "status": status,
    })  # fmt: skip


def ready_since(status: str, reason: str) -> dict[str, Any]:
    return {"type": reasons.READY, "status": status, "reason": reason, "message": "m",
            "lastTransitionTime": EARLIER.isoformat()}  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (reasons.BACKEND_UNAVAILABLE, "Unknown"),  # it may well be in step: cannot tell
        (reasons.FORBIDDEN, "False"),
        (reasons.INVALID_SCHEDULE, "False"),
        (reasons.CONNECTION_NOT_ALLOWED, "False"),
    ],
)
def test_ready_says_unknown_only_when_sundial_cannot_tell(reason: str, expected: str) -> None:
    status = not_ready(scheduledjob(), reason, "why", now=NOW)
    ready = find_condition(status.conditions, reasons.READY)
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (expected, reason, "why")
    assert ready.observed_generation == status.observed_generation == 4


def test_the_transition_time_moves_only_with_the_status() -> None:
    already_false = scheduledjob(conditions=[ready_since("False", reasons.INVALID_SCHEDULE)])
    kept = find_condition(not_ready(already_false, reasons.FORBIDDEN, "x", now=NOW).conditions,
                          reasons.READY)  # fmt: skip
    assert kept is not None
    assert kept.last_transition_time == EARLIER
    was_true = scheduledjob(conditions=[ready_since("True", reasons.RECONCILED)])
    moved = find_condition(not_ready(was_true, reasons.FORBIDDEN, "x", now=NOW).conditions,
                           reasons.READY)  # fmt: skip
    assert moved is not None
    assert moved.last_transition_time == NOW


def test_what_the_backend_last_did_stays() -> None:
    sj = scheduledjob(lastScheduleTime=EARLIER.isoformat(), missedRuns=2, skippedRuns=1,
                      conditions=[ready_since("True", reasons.RECONCILED)])  # fmt: skip
    status = not_ready(sj, reasons.BACKEND_UNAVAILABLE, "no answer", now=NOW)
    assert (status.last_schedule_time, status.missed_runs, status.skipped_runs) == (EARLIER, 2, 1)


def test_a_switch_refused_by_the_new_backend_shows_in_switching() -> None:
    """Mid-switch to temporal, the new backend refused: the old one keeps running."""
    sj = scheduledjob("temporal", backend="kubernetes")
    status = not_ready(sj, reasons.CONNECTION_NOT_FOUND, "no connection", now=NOW)
    switching = find_condition(status.conditions, reasons.SWITCHING)
    assert switching is not None
    assert (switching.status, switching.reason) == ("True", reasons.SWITCH_PENDING)
    assert "no connection" in switching.message
    assert "kubernetes keeps running" in switching.message
