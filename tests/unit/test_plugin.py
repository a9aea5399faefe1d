"""kubectl-sundial (plugin.py): what it prints, and how it is started."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from plugin_samples import with_runs
from sundial import plugin, timeline


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


def test_status_says_what_runs_late_and_the_catch_ups_sundial_made() -> None:
    obj = scheduledjob("UTC")
    obj["spec"]["catchUp"] = {"policy": "All", "window": "2h"}
    obj["status"]["requests"] = [
        {"kind": "CatchUp", "id": "catchup-20261204t010000z", "outcome": "Done",
         "receivedTime": "2026-12-04T02:10:00Z", "message": "1 of 1 run(s) started"},
    ]  # fmt: skip
    shown = plugin.describe(obj)
    assert "  Catch-up:  All within 2h (after an outage or a maintenance window)" in shown
    assert "CatchUp catchup-20261204t010000z: Done" in shown
    obj["spec"]["catchUp"] = {"policy": "Latest"}
    assert "  Catch-up:  Latest within 1h" in plugin.describe(obj)
    obj["spec"]["catchUp"] = {"policy": "None"}
    assert "  Catch-up:  None (a slot later than 15s never runs)" in plugin.describe(obj)
    del obj["spec"]["catchUp"]
    assert "Catch-up" not in plugin.describe(obj)


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


# ---- the timeline in status and list ---------------------------------------------------

NOW = datetime(2026, 12, 4, 0, 47, tzinfo=UTC)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_status_draws_the_timeline_before_the_details() -> None:
    shown = plugin.describe(with_runs("nightly"), now=NOW).splitlines()
    at = next(i for i, line in enumerate(shown) if line.startswith("  Timeline:"))
    assert shown[at] == "  Timeline:  +Cx|  next in 2h13m (03:00)"
    assert at < shown.index("  Next runs:")
    assert any("last run took 45m of maxRunDuration 30m (150%) OVER" in ln for ln in shown)
    legend = [line for line in shown if line.startswith("  Legend:")]
    assert legend == ["  Legend:    + succeeded  x failed  C missed (ControllerDown)"]


def test_status_of_an_object_with_no_runs_yet_says_so() -> None:
    shown = plugin.describe(scheduledjob("UTC"), now=NOW)
    assert "  Timeline:  no runs yet |  next in 2h13m (03:00)" in shown
    assert "Legend" not in shown


def test_status_with_an_unreadable_status_still_shows_the_rest() -> None:
    obj = with_runs("odd")
    obj["status"]["recentRuns"][0]["result"] = "Exploded"
    shown = plugin.describe(obj, now=NOW)
    assert "  Timeline:  <status unreadable: " in shown
    assert "Exploded" in shown, "the recent runs are still listed"


def test_list_draws_a_row_of_cells_per_object_and_the_legend_once() -> None:
    fresh = scheduledjob("UTC")
    fresh["metadata"] = {"name": "fresh", "namespace": "shop"}
    rows = plugin.table([with_runs("nightly"), with_runs("weekly", "ops"), fresh], NOW)
    assert rows[0].split()[:7] == ["NAMESPACE", "NAME", "BACKEND", "SCHEDULE", "TIMEZONE",
                                   "LAST", "RESULT"]  # fmt: skip
    assert "RECENT" in rows[0]
    body = {row.split()[1]: row for row in rows[1:4]}
    assert list(body) == ["weekly", "fresh", "nightly"], "sorted by namespace, then name"
    recent = rows[0].index("RECENT")
    assert body["nightly"][recent:].startswith("+Cx ")
    assert body["fresh"][recent:].startswith("no runs yet ")
    assert "in 2h13m" in body["nightly"]
    assert "45m/30m!" in body["nightly"]
    legends = [row for row in rows if "succeeded" in row]
    assert legends == ["RECENT: oldest to newest. + succeeded  x failed  C missed (ControllerDown)"]


def test_list_in_colour_lines_up_as_without() -> None:
    objs = [with_runs("nightly"), with_runs("weekly", "ops")]
    plain = plugin.table(objs, NOW, timeline.PLAIN, namespaces=False)
    coloured = plugin.table(objs, NOW, timeline.COLOUR, namespaces=False)
    assert any("\x1b[" in row for row in coloured)
    assert [ANSI.sub("", row) for row in coloured] == plain
    assert not plain[0].startswith("NAMESPACE")


@pytest.mark.parametrize(
    ("choice", "tty", "environ", "colour"),
    [
        ("auto", True, {"TERM": "xterm-256color"}, True),
        ("auto", False, {"TERM": "xterm-256color"}, False),
        ("auto", True, {"TERM": "dumb"}, False),
        ("auto", True, {}, False),
        ("auto", True, {"TERM": "xterm", "NO_COLOR": "1"}, False),
        ("auto", True, {"TERM": "xterm", "NO_COLOR": ""}, True),
        ("always", False, {"NO_COLOR": "1"}, True),
        ("never", True, {"TERM": "xterm"}, False),
    ],
)
def test_colour_only_where_the_terminal_takes_it(
    choice: str, tty: bool, environ: dict[str, str], colour: bool
) -> None:
    stream = io.StringIO()
    stream.isatty = lambda: tty  # type: ignore[method-assign]
    assert plugin.palette(choice, stream, environ).colour is colour
