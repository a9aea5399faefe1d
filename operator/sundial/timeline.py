"""The run timeline `kubectl sundial status` and `list` draw: one cell per recent slot,
oldest to newest, then the next runs and the last run's duration against maxRunDuration.

Pure: it takes a ScheduledJob's status model and `now` and returns text (colour, if asked,
as ANSI SGR codes); whether the terminal takes colour is the caller's question (plugin.py).
The same characters are drawn with or without colour, so nothing rests on colour alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final, Literal

from sundial.api import reasons
from sundial.api.status_models import (
    Condition,
    MissedRun,
    PauseStatus,
    RecentRun,
    ScheduledJobStatus,
)
from sundial.planning.schedule import iso

Kind = Literal[
    "succeeded", "failed", "timedout", "missed", "skipped", "cancelled", "unknown", "running",
    "suspended",
]  # fmt: skip
# The legend's order; each kind's glyph (missed: one per reason, below) and its words.
KINDS: Final[tuple[tuple[Kind, str, str], ...]] = (
    ("succeeded", "+", "succeeded"),
    ("failed", "x", "failed"),
    ("timedout", "T", "timed out"),
    ("missed", "", "missed"),
    ("skipped", "s", "skipped (overlap)"),
    ("cancelled", "c", "cancelled/terminated"),
    ("unknown", "?", "unknown"),
    ("running", ">", "running"),
    ("suspended", "z", "suspended/paused"),
)
GLYPHS: Final[dict[Kind, str]] = {kind: glyph for kind, glyph, _ in KINDS}
# A missed slot's cell is its reason's letter: the reason is in the cell itself.
MISSED_GLYPHS: Final = {
    "ControllerDown": "C",
    "DeadlineExceeded": "D",
    "CatchupWindowExceeded": "W",
    "BufferDropped": "B",
    "TooManyMissed": "M",
    reasons.WORKER_UNAVAILABLE: "U",
}
MISSED_OTHER: Final = "!"
RESULT_KINDS: Final[dict[str, Kind]] = {
    "Succeeded": "succeeded",
    "Failed": "failed",
    "TimedOut": "timedout",
    "Cancelled": "cancelled",
    "Terminated": "cancelled",
    "Running": "running",
    "Unknown": "unknown",
}
# ANSI SGR colours, by kind.
COLOURS: Final[dict[Kind, str]] = {
    "succeeded": "32",
    "failed": "1;31",
    "timedout": "1;35",
    "missed": "1;33",
    "skipped": "36",
    "cancelled": "90",
    "unknown": "90",
    "running": "1;34",
    "suspended": "2",
}
# Ready reasons under which the backend does not schedule, though spec.suspend is false.
PAUSED_BY_SUNDIAL: Final = {
    reasons.PAUSED_IN_TEMPORAL: "paused in Temporal",
    reasons.CONNECTION_NOT_ALLOWED: "paused: the connection no longer admits it",
    reasons.PAUSED_BY_FAILURE_POLICY: "paused by the failure policy: kubectl sundial resume",
}
NO_RUNS: Final = "no runs yet"
BAR_WIDTH: Final = 20


@dataclass(frozen=True)
class Palette:
    """How cells are painted: `colour` False draws the characters alone."""

    colour: bool = False

    def paint(self, kind: Kind, text: str) -> str:
        return f"\x1b[{COLOURS[kind]}m{text}\x1b[0m" if self.colour and text else text


PLAIN: Final = Palette(colour=False)
COLOUR: Final = Palette(colour=True)


@dataclass(frozen=True)
class Cell:
    kind: Kind
    glyph: str
    at: datetime  # the slot (a run's scheduled time), or now for a suspension
    detail: str = ""
    # The run or missed slot the cell was drawn from (the dashboard's hover shows it).
    source: RecentRun | MissedRun | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Timeline:
    """One object's timeline, in pieces a table or the status view lays out."""

    cells: tuple[Cell, ...]
    painted: str  # the cells as drawn (with colour codes if the palette has colour)
    plain: str  # the same without colour: its length is the width on screen
    next_runs: str  # `next in 2h13m (03:00), then 04:00, 05:00`
    duration: str  # the last run's duration against maxRunDuration, with a bar
    duration_short: str  # the same for a table: `4m12s/30m`
    late: str  # `late starts: 2 of the last 10 runs`, or empty
    span: str  # `9 slot(s), oldest first: 12-01 03:00 .. 02:00`, or empty
    palette: Palette = PLAIN

    def block(self) -> list[str]:
        """The status view's lines: the cells (oldest to newest, then now) and the next
        runs, the span the cells cover, the duration, late starts and the legend."""
        out = [f"  Timeline:  {self.painted}|  {self.next_runs}"]
        if self.span:
            out.append(f"             {self.span}")
        out.append(f"  Duration:  {self.duration}")
        if self.late:
            out.append(f"             {self.late}")
        if self.cells:
            out.append(f"  Legend:    {legend(self.cells, self.palette)}")
        return out


def build(
    status: ScheduledJobStatus,
    now: datetime,
    *,
    suspended: bool = False,
    suspend_note: str | None = None,
    max_run_duration: timedelta | None = None,
    zone: tzinfo = UTC,
    palette: Palette = PLAIN,
    limit: int = 30,
) -> Timeline:
    """The timeline of a ScheduledJob with `status`, at `now`: its `limit` latest slots."""
    pause = pause_note(status.conditions, suspended, suspend_note, status.pause)
    cells = slots(status, now, pause, limit)
    slotted = [cell for cell in cells if cell.kind != "suspended"]
    span = ""
    if slotted:
        span = (f"{len(slotted)} slot(s), oldest first: {_clock(slotted[0].at, now, zone)} "
                f".. {_clock(slotted[-1].at, now, zone)}")  # fmt: skip
    prefix = "" if slotted else NO_RUNS + " "
    return Timeline(
        cells=tuple(cells),
        painted=prefix + "".join(palette.paint(cell.kind, cell.glyph) for cell in cells),
        plain=prefix + "".join(cell.glyph for cell in cells),
        next_runs=next_runs(status.next_run_times, now, zone, pause),
        duration=duration(status, now, max_run_duration),
        duration_short=short_duration(status, now, max_run_duration),
        late=late_starts(status),
        span=span,
        palette=palette,
    )


def slots(
    status: ScheduledJobStatus, now: datetime, pause: str | None = None, limit: int = 30
) -> list[Cell]:
    """Runs and missed or skipped slots, one cell each, oldest first: the `limit` newest,
    then a suspension (if any) as a last cell at `now`."""
    missed = {(miss.scheduled_time, miss.reason) for miss in status.recent_missed_runs}
    cells = [
        Cell(RESULT_KINDS.get(run.result, "unknown"),
             GLYPHS[RESULT_KINDS.get(run.result, "unknown")], run.scheduled_time,
             _run_detail(run.result, run.reason), run)
        for run in status.recent_runs
        # A run no worker took up in time never ran: its slot's missed cell stands for it.
        if (run.scheduled_time, run.reason) not in missed
    ]  # fmt: skip
    for miss in status.recent_missed_runs:
        approx = " (approximate)" if miss.approximate else ""
        at = miss.scheduled_time
        if miss.reason == "OverlapSkipped":
            cells.append(Cell("skipped", GLYPHS["skipped"], at, "OverlapSkipped", miss))
        elif miss.reason == "Unknown":
            cells.append(Cell("unknown", GLYPHS["unknown"], at, "Unknown", miss))
        else:
            glyph = MISSED_GLYPHS.get(miss.reason, MISSED_OTHER)
            cells.append(Cell("missed", glyph, at, miss.reason + approx, miss))
    cells.sort(key=lambda cell: cell.at)
    cells = cells[-limit:] if limit > 0 else []
    if pause is not None:
        cells.append(Cell("suspended", GLYPHS["suspended"], now, pause))
    return cells


def next_runs(
    times: Sequence[datetime], now: datetime, zone: tzinfo = UTC, pause: str | None = None,
    count: int = 3,
) -> str:  # fmt: skip
    """`next in 2h13m (03:00), then 04:00, 05:00`; an overdue one says how late it is."""
    if pause is not None:
        return f"next: none, {pause}"
    if not times:
        return "next: none"
    first, *rest = times[:count]
    when = first - now
    relative = f"due {_span(-when)} ago" if when < timedelta(0) else f"in {_span(when)}"
    text = f"next {relative} ({_clock(first, now, zone)})"
    if rest:
        text += ", then " + ", ".join(_clock(moment, now, zone) for moment in rest)
    return text


def duration(status: ScheduledJobStatus, now: datetime, max_run_duration: timedelta | None) -> str:
    """The last run's duration (or the running one's so far) against maxRunDuration."""
    last = _last_duration(status, now)
    if last is None:
        return "no run has ended yet"
    seconds, running = last
    label = "running for" if running else "last run took"
    if max_run_duration is None or max_run_duration.total_seconds() <= 0:
        return f"{label} {_span(timedelta(seconds=seconds))} (no maxRunDuration)"
    limit = max_run_duration.total_seconds()
    share = seconds / limit
    filled = min(BAR_WIDTH, round(share * BAR_WIDTH))
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    over = " OVER" if seconds > limit else ""
    return (f"[{bar}] {label} {_span(timedelta(seconds=seconds))} of maxRunDuration "
            f"{_span(max_run_duration)} ({share:.0%}){over}")  # fmt: skip


def short_duration(
    status: ScheduledJobStatus, now: datetime, max_run_duration: timedelta | None
) -> str:
    """The table's form: `4m12s/30m`, `>12m/30m` running, a `!` past the limit, `-`."""
    last = _last_duration(status, now)
    if last is None:
        return "-"
    seconds, running = last
    text = (">" if running else "") + _span(timedelta(seconds=seconds))
    if max_run_duration is None or max_run_duration.total_seconds() <= 0:
        return text
    over = "!" if seconds > max_run_duration.total_seconds() else ""
    return f"{text}/{_span(max_run_duration)}{over}"


def _last_duration(status: ScheduledJobStatus, now: datetime) -> tuple[float, bool] | None:
    """How long the newest running run has gone (True), else the newest ended run took."""
    for run in status.recent_runs:  # newest first
        if run.result == "Running" and run.start_time is not None:
            return max((now - run.start_time).total_seconds(), 0.0), True
    for run in status.recent_runs:
        if run.duration_seconds is not None:
            return run.duration_seconds, False
    return None


def late_starts(status: ScheduledJobStatus) -> str:
    started = [run for run in status.recent_runs if run.start_time is not None]
    if not started:
        return ""
    late = sum(1 for run in started if run.late)
    return f"late starts: {late} of the last {len(started)} runs"


def legend(cells: Iterable[Cell], palette: Palette = PLAIN) -> str:
    """The glyphs drawn in `cells` (all of them if none), each once, with their words."""
    cells = list(cells)
    shown = {cell.kind for cell in cells} or {kind for kind, _, _ in KINDS}
    reasons_shown = {cell.glyph: cell.detail.split(" ")[0] for cell in cells
                     if cell.kind == "missed"}  # fmt: skip
    parts = []
    for kind, glyph, words in KINDS:
        if kind not in shown:
            continue
        if kind == "missed":
            table = reasons_shown or {g: r for r, g in MISSED_GLYPHS.items()}
            for letter, reason in sorted(table.items(), key=lambda item: _miss_order(item[0])):
                parts.append(f"{palette.paint(kind, letter)} missed ({reason})")
        else:
            parts.append(f"{palette.paint(kind, glyph)} {words}")
    return "  ".join(parts)


def pause_note(
    conditions: Sequence[Condition],
    suspended: bool,
    note: str | None,
    pause: PauseStatus | None = None,
) -> str | None:
    """Why the backend schedules nothing now (spec.suspend, a maintenance window, or paused
    by Sundial), or None."""
    if suspended:
        return "suspended" + (f" ({note})" if note else "")
    if pause is not None and pause.reason == "MaintenanceWindow" and pause.until is not None:
        return f"suspended until {iso(pause.until)}" + (f" ({note})" if note else "")
    ready = next((c for c in conditions if c.type == reasons.READY), None)
    if ready is not None:
        return PAUSED_BY_SUNDIAL.get(ready.reason)
    return None


def _run_detail(result: str, reason: str | None) -> str:
    return f"{result}: {reason}" if reason else result


def _miss_order(letter: str) -> int:
    order = list(MISSED_GLYPHS.values())
    return order.index(letter) if letter in order else len(order)


def _clock(moment: datetime, now: datetime, zone: tzinfo) -> str:
    """HH:MM in `zone`, with the date when it is not `now`'s day there."""
    local, today = moment.astimezone(zone), now.astimezone(zone)
    if local.date() == today.date():
        return local.strftime("%H:%M")
    return local.strftime("%m-%d %H:%M")


def _span(delta: timedelta) -> str:
    """1h30m, 4m12s, 42s, 3d4h: the two largest units."""
    seconds = round(delta.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{minutes}m{secs}s" if secs else f"{minutes}m"
