"""The run timeline (timeline.py): cells from a status and a given `now`, no I/O."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sundial import timeline
from sundial.api.status_models import ScheduledJobStatus

NOW = datetime(2026, 12, 4, 0, 47, tzinfo=UTC)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def status(**fields: Any) -> ScheduledJobStatus:
    return ScheduledJobStatus.model_validate(fields)


def run(hour: str, result: str, **extra: Any) -> dict[str, Any]:
    return {"scheduledTime": f"2026-12-03T{hour}:00:00Z", "result": result, **extra}


def miss(hour: str, reason: str) -> dict[str, Any]:
    return {"scheduledTime": f"2026-12-03T{hour}:00:00Z", "reason": reason}


EVERY_KIND = status(
    recentRuns=[  # newest first, as in status
        run("23", "Running", startTime="2026-12-03T23:00:02Z"),
        run("21", "Unknown"),
        run("20", "Cancelled"),
        run("18", "TimedOut", durationSeconds=2400),
        run("17", "Failed", reason="BackoffLimitExceeded", durationSeconds=30),
        run("16", "Succeeded", durationSeconds=252),
    ],
    recentMissedRuns=[
        miss("19", "ControllerDown"),
        miss("22", "OverlapSkipped"),
        miss("14", "DeadlineExceeded"),
        miss("13", "CatchupWindowExceeded"),
        miss("12", "BufferDropped"),
        miss("11", "TooManyMissed"),
        miss("15", "Unknown"),
    ],
    nextRunTimes=["2026-12-04T01:00:00Z", "2026-12-04T02:00:00Z"],
)


def test_one_cell_per_slot_oldest_first_each_kind_its_own_glyph() -> None:
    drawn = timeline.build(EVERY_KIND, NOW)
    # 11 12 13 14 missed by reason, 15 unknown slot, 16 ok, 17 failed, 18 timed out,
    # 19 missed (controller down), 20 cancelled, 21 unknown run, 22 skipped, 23 running.
    assert drawn.plain == "MBWD?+xTCc?s>"
    kinds = [cell.kind for cell in drawn.cells]
    assert kinds == ["missed"] * 4 + ["unknown", "succeeded", "failed", "timedout", "missed",
                                      "cancelled", "unknown", "skipped", "running"]  # fmt: skip
    assert [cell.at.hour for cell in drawn.cells] == list(range(11, 24))
    failed = drawn.cells[6]
    assert failed.detail == "Failed: BackoffLimitExceeded"


def test_a_missed_cell_carries_its_reason() -> None:
    drawn = timeline.build(status(recentMissedRuns=[miss("10", "ControllerDown")]), NOW)
    (cell,) = drawn.cells
    assert (cell.kind, cell.glyph, cell.detail) == ("missed", "C", "ControllerDown")
    assert "C missed (ControllerDown)" in timeline.legend(drawn.cells)


def test_a_run_no_worker_took_up_in_time_is_one_missed_cell() -> None:
    """Its run is listed (Cancelled, its workflow's reason) beside the missed slot; the slot
    is drawn once, as missed. Another run cancelled at a missed slot is drawn."""
    drawn = timeline.build(status(
        recentRuns=[run("10", "Cancelled", reason="WorkerUnavailable"),
                    run("09", "Cancelled", reason="JobDeleted")],
        recentMissedRuns=[miss("10", "WorkerUnavailable")],
    ), NOW)  # fmt: skip
    assert drawn.plain == "cU"
    assert drawn.cells[-1].detail == "WorkerUnavailable"


def test_the_newest_slots_are_kept_up_to_the_limit() -> None:
    drawn = timeline.build(EVERY_KIND, NOW, limit=4)
    assert drawn.plain == "c?s>"
    assert drawn.span == "4 slot(s), oldest first: 12-03 20:00 .. 12-03 23:00"


def test_an_object_with_no_runs_yet_says_so() -> None:
    drawn = timeline.build(status(nextRunTimes=["2026-12-04T03:00:00Z"]), NOW)
    assert drawn.cells == ()
    assert drawn.plain.startswith("no runs yet")
    assert drawn.next_runs == "next in 2h13m (03:00)"
    assert drawn.duration == "no run has ended yet"
    assert drawn.duration_short == "-"
    block = "\n".join(drawn.block())
    assert "no runs yet" in block
    assert "Legend" not in block, "no cells, nothing to explain"


def test_the_next_runs_are_relative_to_now_in_the_objects_zone() -> None:
    berlin = timeline.build(EVERY_KIND, NOW, zone=ZoneInfo("Europe/Berlin"))
    assert berlin.next_runs == "next in 13m (02:00), then 03:00"
    utc = timeline.build(EVERY_KIND, NOW)
    assert utc.next_runs == "next in 13m (01:00), then 02:00"
    tomorrow = timeline.next_runs([NOW + timedelta(days=1, hours=2)], NOW)
    assert tomorrow == "next in 1d2h (12-05 02:47)"


def test_an_overdue_next_run_says_how_late_it_is() -> None:
    late = timeline.next_runs([NOW - timedelta(minutes=7)], NOW)
    assert late == "next due 7m ago (00:40)"


def test_a_suspended_object_ends_with_a_suspended_cell_and_no_next_run() -> None:
    drawn = timeline.build(EVERY_KIND, NOW, suspended=True, suspend_note="quarter close")
    assert drawn.plain.endswith(">z")
    assert drawn.cells[-1].at == NOW
    assert drawn.next_runs == "next: none, suspended (quarter close)"
    assert drawn.span.startswith("13 slot(s)"), "the suspension is no slot"


def test_a_schedule_paused_in_temporal_or_by_policy_shows_as_paused() -> None:
    for reason, words in (("PausedInTemporal", "paused in Temporal"),
                          ("ConnectionNotAllowed", "no longer admits")):  # fmt: skip
        ready = {"type": "Ready", "status": "True", "reason": reason,
                 "lastTransitionTime": "2026-12-03T00:00:00Z"}  # fmt: skip
        drawn = timeline.build(status(conditions=[ready]), NOW)
        assert drawn.cells[-1].kind == "suspended"
        assert words in drawn.next_runs
    ready = {"type": "Ready", "status": "True", "reason": "Reconciled",
             "lastTransitionTime": "2026-12-03T00:00:00Z"}  # fmt: skip
    assert timeline.build(status(conditions=[ready]), NOW).cells == ()


def test_the_last_duration_against_max_run_duration() -> None:
    ended = status(recentRuns=[run("22", "Succeeded", durationSeconds=900),
                               run("21", "Succeeded", durationSeconds=60)])  # fmt: skip
    half = timeline.build(ended, NOW, max_run_duration=timedelta(minutes=30))
    assert half.duration == ("[##########----------] last run took 15m of maxRunDuration 30m (50%)")
    assert half.duration_short == "15m/30m"
    over = timeline.build(ended, NOW, max_run_duration=timedelta(minutes=10))
    assert over.duration.startswith("[" + "#" * timeline.BAR_WIDTH + "]")
    assert over.duration.endswith("(150%) OVER")
    assert over.duration_short == "15m/10m!"
    unlimited = timeline.build(ended, NOW)
    assert unlimited.duration == "last run took 15m (no maxRunDuration)"
    assert unlimited.duration_short == "15m"


def test_a_running_run_is_measured_up_to_now() -> None:
    drawn = timeline.build(EVERY_KIND, NOW, max_run_duration=timedelta(hours=2))
    # Started 23:00:02, now 00:47:00: 1h46m58s of 2h.
    assert "running for 1h46m of maxRunDuration 2h (89%)" in drawn.duration
    assert drawn.duration_short == ">1h46m/2h"


def test_late_starts_are_counted_among_the_started_runs() -> None:
    runs = status(recentRuns=[
        run("22", "Succeeded", startTime="2026-12-03T22:03:00Z", late=True),
        run("21", "Succeeded", startTime="2026-12-03T21:00:01Z"),
        run("20", "Unknown"),
    ])  # fmt: skip
    assert timeline.build(runs, NOW).late == "late starts: 1 of the last 2 runs"


def test_colour_paints_the_same_characters() -> None:
    plain = timeline.build(EVERY_KIND, NOW, palette=timeline.PLAIN)
    colour = timeline.build(EVERY_KIND, NOW, palette=timeline.COLOUR)
    assert "\x1b[" not in plain.painted
    assert plain.painted == plain.plain
    assert "\x1b[32m+\x1b[0m" in colour.painted, "succeeded is green"
    assert "\x1b[1;31mx\x1b[0m" in colour.painted, "failed is bold red"
    assert ANSI.sub("", colour.painted) == plain.plain
    assert colour.plain == plain.plain
    assert ANSI.sub("", timeline.legend(colour.cells, timeline.COLOUR)) == timeline.legend(
        colour.cells
    )


def test_the_legend_names_each_glyph_drawn_once() -> None:
    text = timeline.legend(timeline.build(EVERY_KIND, NOW).cells)
    for words in ("+ succeeded", "x failed", "T timed out", "s skipped (overlap)",
                  "c cancelled/terminated", "? unknown", "> running",
                  "C missed (ControllerDown)", "M missed (TooManyMissed)",
                  "W missed (CatchupWindowExceeded)"):  # fmt: skip
        assert text.count(words) == 1, (words, text)
    assert "suspended" not in text, "only what is drawn"
    only_ok = timeline.legend(
        timeline.build(status(recentRuns=[run("01", "Succeeded")]), NOW).cells
    )
    assert only_ok == "+ succeeded"


def test_the_status_block_puts_the_cells_then_the_next_runs() -> None:
    block = timeline.build(EVERY_KIND, NOW, max_run_duration=timedelta(hours=2)).block()
    assert block[0] == "  Timeline:  MBWD?+xTCc?s>|  next in 13m (01:00), then 02:00"
    assert block[1].strip() == "13 slot(s), oldest first: 12-03 11:00 .. 12-03 23:00"
    assert block[2].startswith("  Duration:  [")
    assert block[-1].startswith("  Legend:    ")
    assert sum(line.startswith("  Legend:") for line in block) == 1


def test_a_maintenance_window_and_a_failure_pause_say_why_nothing_runs() -> None:
    window = status(pause={"reason": "MaintenanceWindow", "until": "2026-12-04T06:00:00Z"})
    assert timeline.pause_note(window.conditions, False, "db migration", window.pause) == (
        "suspended until 2026-12-04T06:00:00Z (db migration)"
    )
    paused = status(conditions=[{
        "type": "Ready", "status": "True", "reason": "PausedByFailurePolicy",
        "message": "paused after 3", "lastTransitionTime": "2026-12-04T00:00:00Z",
    }], pause={"reason": "FailurePolicy"})  # fmt: skip
    note = timeline.pause_note(paused.conditions, False, None, paused.pause)
    assert note is not None
    assert note.startswith("paused by the failure policy")
    assert timeline.pause_note(status().conditions, False, None, None) is None
