"""kubectl-sundial (plugin.py): what it prints, and how it is started."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from sundial import plugin


def scheduledjob(zone: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "nightly", "namespace": "shop"},
        "spec": {"schedule": "0 3 * * *", "timeZone": zone, "job": {"image": "busybox"}},
        # Next runs from before the zone was changed: the status is not rebuilt meanwhile.
        "status": {"nextRunTimes": ["2026-12-04T03:00:00Z"]},
    }


def test_status_shows_the_next_runs_in_the_objects_time_zone() -> None:
    shown = plugin.describe(scheduledjob("Europe/Berlin"))
    assert "2026-12-04T04:00:00+01:00" in shown


def test_status_shows_each_runs_message_under_it() -> None:
    """What the job said it did (its termination message, sundial-cron's summary) is in
    status; `kubectl sundial status` shows it under its run."""
    obj = scheduledjob("UTC")
    obj["status"]["recentRuns"] = [
        {"scheduledTime": "2026-12-02T03:00:00Z", "result": "Succeeded", "durationSeconds": 4,
         "message": "sent invoices (sent=1204, skipped=3)"},
        {"scheduledTime": "2026-12-01T03:00:00Z", "result": "Failed", "reason": "Error"},
    ]  # fmt: skip
    lines = plugin.describe(obj).splitlines()
    at = next(i for i, line in enumerate(lines) if "2026-12-02T03:00:00Z" in line)
    assert lines[at + 1].strip() == "sent invoices (sent=1204, skipped=3)"
    failed = next(i for i, line in enumerate(lines) if "2026-12-01T03:00:00Z" in line)
    assert lines[failed + 1].strip().startswith("Missed"), "no message, no line"


def test_status_of_an_invalid_time_zone_is_a_one_line_error_naming_the_field() -> None:
    with pytest.raises(plugin.Failure) as raised:
        plugin.describe(scheduledjob("Mars/Olympus_Mons"))
    message = str(raised.value)
    assert "spec.timeZone" in message
    assert "Mars/Olympus_Mons" in message
    assert "\n" not in message
    assert raised.value.code != 0


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sundial.plugin", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_python_dash_m_runs_the_command_line() -> None:
    helped = run_module("--help")
    assert helped.returncode == 0, helped.stderr
    assert "usage: kubectl sundial" in helped.stdout
    # No verb: usage and argparse's exit status for a usage error, as the entry point.
    bare = run_module()
    assert bare.returncode == 2, (bare.stdout, bare.stderr)
    assert "usage: kubectl sundial" in bare.stderr
