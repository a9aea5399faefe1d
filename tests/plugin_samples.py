"""A ScheduledJob with a known history, as `kubectl sundial` is tested on it: a failed run,
a missed slot and a success (the unit tests render it; the integration test has the real
apiserver hold it)."""

from __future__ import annotations

from typing import Any


def with_runs(name: str, namespace: str = "shop") -> dict[str, Any]:
    return {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedule": "0 3 * * *", "timeZone": "UTC", "job": {"image": "busybox"},
                 "monitoring": {"maxRunDuration": "30m"}},
        "status": {
            "lastResult": "Failed",
            "nextRunTimes": ["2026-12-04T03:00:00Z"],
            "recentRuns": [
                {"scheduledTime": "2026-12-03T03:00:00Z", "result": "Failed",
                 "durationSeconds": 2700},
                {"scheduledTime": "2026-12-01T03:00:00Z", "result": "Succeeded",
                 "durationSeconds": 4},
            ],
            "recentMissedRuns": [
                {"scheduledTime": "2026-12-02T03:00:00Z", "reason": "ControllerDown"}],
        },
    }  # fmt: skip
