"""A known history for the dashboard's tests and benchmark: ScheduledJobs no operator serves
(labelled with a shard no operator of the tests runs, tests/conftest.py) whose status the
test writes itself, as the operator would (the status subresource): the dashboard renders
status, so this is its input, not a stand-in server.

Times are relative to `now`, so the cells fall in the page's default range (24 hours).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from support import SHARD_LABEL, Kubectl

UNSERVED = {SHARD_LABEL: "dashboard-history"}  # no operator of the tests serves this shard


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scheduledjob(
    name: str, namespace: str, *, backend: str = "kubernetes", suspend: bool = False,
    note: str | None = None, labels: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {
        "schedule": "0 * * * *", "backend": backend, "job": {"image": "busybox:1.36"},
        "monitoring": {"maxRunDuration": "10m"},
    }  # fmt: skip
    if suspend:
        spec["suspend"] = True
        if note:
            spec["suspendNote"] = note
    meta = {"name": name, "namespace": namespace, "labels": {**UNSERVED, **(labels or {})}}
    return {"apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob", "metadata": meta,
            "spec": spec}  # fmt: skip


def run(
    slot: datetime, result: str, seconds: float | None, *, name: str, delay: float = 2.0,
    reason: str | None = None, message: str | None = None, late: bool = False,
    temporal: bool = False, requested: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    start = slot + timedelta(seconds=delay)
    out: dict[str, Any] = {
        "scheduledTime": iso(slot), "startTime": iso(start), "result": result,
        "startDelaySeconds": delay, "late": late,
    }  # fmt: skip
    if seconds is not None:
        out["completionTime"] = iso(start + timedelta(seconds=seconds))
        out["durationSeconds"] = seconds
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    if requested:
        out["requested"] = requested
    if temporal:
        out["workflowId"] = name
        out["runId"] = "0b6f" + name[-8:]
    else:
        out["jobName"] = name
    return out


def condition(kind: str, status: str, reason: str, message: str, since: datetime) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": iso(since)}  # fmt: skip


def hour(now: datetime, back: int) -> datetime:
    """The top of the hour `back` hours before now's."""
    return now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=back)


def nightly_status(now: datetime, namespace: str) -> dict[str, Any]:
    """Succeeded, failed (with the Job's reason and message), missed while the controller
    was down, skipped by overlap, succeeded late, and one run asked for by hand, running."""
    slots = {back: hour(now, back) for back in range(7)}
    runs = [
        run(now - timedelta(minutes=4), "Running", None, name="nightly-manual-7f3a", delay=1.0,
            requested="RunNow/rerun-after-fix"),
        run(slots[1], "Succeeded", 312.0, name="nightly-28999940", delay=95.0, late=True),
        run(slots[4], "Failed", 48.0, name="nightly-28999760", reason="BackoffLimitExceeded",
            message="loaded 0 of 1200 rows: connection refused"),
        run(slots[5], "Succeeded", 240.0, name="nightly-28999700"),
        run(slots[6], "Succeeded", 180.0, name="nightly-28999640"),
    ]  # fmt: skip
    missed = [
        {"scheduledTime": iso(slots[2]), "reason": "OverlapSkipped"},
        {"scheduledTime": iso(slots[3]), "reason": "ControllerDown"},
    ]
    return {
        "backend": "kubernetes",
        "backendRef": {"kind": "CronJob", "name": "nightly", "namespace": namespace},
        "recentRuns": runs,
        "recentMissedRuns": missed,
        "missedRuns": 1,
        "skippedRuns": 1,
        "lastResult": "Running",
        "active": 1,
        "consecutiveFailures": 0,
        "consecutiveSuccesses": 1,
        "nextRunTimes": [iso(hour(now, -1)), iso(hour(now, -2)), iso(hour(now, -3))],
        "conditions": [
            condition("Ready", "True", "Reconciled", "the CronJob is in step", slots[6]),
            condition(
                "RunsMissed",
                "True",
                "ControllerDown",
                "1 run missed: the CronJob controller was down",
                slots[3],
            ),
            condition("RunsFailing", "False", "LastRunSucceeded", "", slots[1]),
        ],
    }


def failing_status(now: datetime, namespace: str) -> dict[str, Any]:
    """Temporal: two failures in a row after a success, one past maxRunDuration."""
    slots = {back: hour(now, back) for back in range(4)}
    runs = [
        run(slots[1], "TimedOut", 660.0, name="reports-wf-3", reason="MaxRunDurationExceeded",
            temporal=True),
        run(slots[2], "Failed", 30.0, name="reports-wf-2", reason="ApplicationError",
            message="KeyError: 'region'", temporal=True),
        run(slots[3], "Succeeded", 420.0, name="reports-wf-1", temporal=True),
    ]  # fmt: skip
    return {
        "backend": "temporal",
        "backendRef": {
            "kind": "TemporalSchedule",
            "scheduleId": "sundial-reports",
            "namespace": "default",
        },
        "recentRuns": runs,
        "lastResult": "TimedOut",
        "consecutiveFailures": 2,
        "nextRunTimes": [iso(hour(now, -1))],
        "conditions": [
            condition("Ready", "True", "Reconciled", "", slots[3]),
            condition(
                "RunsFailing", "True", "ConsecutiveFailures", "2 runs failed in a row", slots[1]
            ),
        ],
    }


def suspended_status(now: datetime, namespace: str) -> dict[str, Any]:
    slots = {back: hour(now, back) for back in range(3)}
    return {
        "backend": "kubernetes",
        "recentRuns": [run(slots[2], "Succeeded", 60.0, name="cleanup-1")],
        "lastResult": "Suspended",
        "conditions": [condition("Ready", "True", "Suspended", "spec.suspend is true", slots[1])],
    }


# name -> (backend, status builder, suspended, note), as the test creates them.
HISTORY = {
    "nightly": ("kubernetes", nightly_status, False, None),
    "reports": ("temporal", failing_status, False, None),
    "cleanup": ("kubernetes", suspended_status, True, "db migration, ask #data"),
}
# The cells each row shows (kinds, oldest first), from the statuses above.
EXPECTED_CELLS = {
    "nightly": ["succeeded", "succeeded", "failed", "missed", "skipped", "succeeded", "running"],
    "reports": ["succeeded", "failed", "timedout"],
    "cleanup": ["succeeded"],
}
EXPECTED_STATES = {"nightly": "missed", "reports": "failing", "cleanup": "suspended"}


def write_history(kubectl: Kubectl, namespace: str, now: datetime) -> None:
    """The three objects of HISTORY in `namespace`, each with its status written."""
    for name, (backend, build, suspend, note) in HISTORY.items():
        labels = {"team": "web" if backend == "temporal" else "data"}
        kubectl.apply(scheduledjob(name, namespace, backend=backend, suspend=suspend, note=note,
                                   labels=labels))  # fmt: skip
        write_status(kubectl, namespace, name, build(now, namespace))


def write_status(kubectl: Kubectl, namespace: str, name: str, status: dict[str, Any]) -> None:
    """The status, as the operator writes it (the status subresource, merged)."""
    kubectl.run("patch", "scheduledjob", name, "-n", namespace, "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip
