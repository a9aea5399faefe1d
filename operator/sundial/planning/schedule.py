"""When a ScheduledJob runs: slot arithmetic with each backend's own semantics. Pure.

croniter finds the matching wall-clock times; this module decides what those wall-clock
times mean in a real zone, the way both backends do (robfig/cron for CronJob, Temporal's
calendar specs): a time inside a DST gap does not exist and is skipped, a time inside the
repeated hour happens twice. croniter's own time-zone handling moves gap times to after
the gap, which would show a run the backend never makes (and a false miss once a year).

The one semantic difference kept here: with both day-of-month and day-of-week restricted,
CronJob fires when EITHER matches (Vixie cron), Temporal only when BOTH do.
"""

from __future__ import annotations

import copy
import functools
import heapq
import re
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from sundial.api import reasons
from sundial.api.models import Backend, IntervalSpec, ScheduledJobSpec


def parse_time(value: object) -> datetime | None:
    """A time in RFC 3339 (Z or an offset), as the apiserver writes it; None when absent.
    A time without a zone is refused (ValueError): it would mean the reader's local time."""
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone (end it with Z or an offset)")
    return parsed


def iso(moment: datetime) -> str:
    """A time as Kubernetes writes it: UTC, with Z."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# What robfig/cron's standard parser and Temporal's cron both accept: numbers, ranges,
# lists, steps, `*`, `?`, and month/day names. croniter also takes L, W and #, which
# CronJob rejects, so they are refused here rather than discovered by the backend.
_NUMERIC_FIELD = re.compile(r"^[0-9*?,/\-]+$")
_MONTH_FIELD = re.compile(r"^([0-9*?,/\-]|JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC)+$", re.I)
_WEEKDAY_FIELD = re.compile(r"^([0-9*?,/\-]|SUN|MON|TUE|WED|THU|FRI|SAT)+$", re.I)
_FIELDS = (
    ("minute", _NUMERIC_FIELD),
    ("hour", _NUMERIC_FIELD),
    ("day-of-month", _NUMERIC_FIELD),
    ("month", _MONTH_FIELD),
    ("day-of-week", _WEEKDAY_FIELD),
)

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class ScheduleError(ValueError):
    """The spec asks for something no backend can schedule; `reason` goes into status."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def parse_duration(text: str) -> timedelta:
    """Go-style duration ("1h30m", "90s") as validated by the CRD pattern."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ScheduleError(
            reasons.INVALID_DURATION, f"{text!r} is not a duration such as 30s or 1h30m"
        )
    return timedelta(seconds=sum(float(n) * _DURATION_UNITS[u] for n, u in parts))


def jitter(spec: ScheduledJobSpec) -> timedelta:
    """How late Temporal may start a slot on purpose (spec.jitter; none by default)."""
    return parse_duration(spec.jitter) if spec.jitter else timedelta(0)


def time_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            reasons.INVALID_TIME_ZONE,
            f"spec.timeZone {name!r} is not an IANA time zone name (for example UTC, "
            "Europe/Berlin, America/New_York)",
        ) from None


def normalize_cron(expression: str, backend: Backend) -> str:
    """The 5-field form of a cron expression or macro; ScheduleError if the backend would
    reject it."""
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text not in MACROS:
            raise ScheduleError(
                reasons.INVALID_SCHEDULE,
                f"spec.schedule {expression!r}: unknown macro; use one of {', '.join(MACROS)}",
            )
        return MACROS[text]
    fields = text.split(" ")
    if len(fields) != 5:
        raise ScheduleError(
            reasons.INVALID_SCHEDULE,
            f"spec.schedule {expression!r} has {len(fields)} fields; a cron expression has 5: "
            "minute hour day-of-month month day-of-week",
        )
    for (name, pattern), text_field in zip(_FIELDS, fields, strict=True):
        if not pattern.match(text_field):
            raise ScheduleError(
                reasons.INVALID_SCHEDULE,
                f"spec.schedule {expression!r}: the {name} field {text_field!r} is not valid "
                "(numbers, ranges a-b, lists a,b, steps */n, * or ?; L, W and # are not "
                "supported by CronJob)",
            )
    refusal = _backend_refusal(text, backend)
    if refusal is not None:
        raise ScheduleError(reasons.INVALID_SCHEDULE, f"spec.schedule {expression!r}: {refusal}")
    # robfig reads `?` as `*` in every field; croniter only in the day fields.
    text = " ".join("*" if field == "?" else field for field in text.split(" "))
    if not croniter.is_valid(text):
        raise ScheduleError(
            reasons.INVALID_SCHEDULE,
            f"spec.schedule {expression!r} is not a valid cron expression "
            "(minute 0-59, hour 0-23, day-of-month 1-31, month 1-12, day-of-week 0-6)",
        )
    return text


def has_star(field: str) -> bool:
    """robfig/cron's "star bit": a field one of whose ranges is `*` or `?` with no step, or
    a step of 1 (`*/1`; `*/2` clears it). The CronJob controller ANDs the two day fields
    when either has it and ORs them otherwise, so `0 0 */1 * 1` is Mondays only, not every
    day; croniter knows only a bare `*`, so Sundial decides this itself."""
    for part in field.split(","):
        base, _, step = part.partition("/")
        if base in ("*", "?") and step in ("", "1"):
            return True
    return False


def both_days_restricted(cron: str) -> bool:
    """True when day-of-month and day-of-week are both restricted: CronJob reads the
    expression as OR, Temporal as AND."""
    _, _, dom, _, dow = cron.split(" ")
    return not has_star(dom) and not has_star(dow)


def _backend_refusal(text: str, backend: Backend) -> str | None:
    """What one backend's parser refuses that croniter (and the other backend) accepts."""
    ranges = [part.split("/", 1)[0] for part in text.split(" ")[4].split(",")]
    if backend == "kubernetes" and any(
        int(n) > 6 for part in ranges for n in re.findall(r"[0-9]+", part)
    ):
        return (
            "day-of-week 7 is refused by the CronJob controller (robfig/cron: 0-6, "
            "Sunday is 0): write 0 or SUN"
        )
    if backend == "temporal" and "?" in text:
        return "Temporal does not accept `?`: write `*`"
    return None


def cron_slots(
    cron: str, zone: ZoneInfo, after: datetime, *, backend: Backend
) -> Iterator[datetime]:
    """Every slot strictly after `after` (aware), in order, as aware UTC datetimes."""
    _, _, dom, _, dow = cron.split(" ")
    # Temporal's calendar specs always AND the day fields; robfig ORs them unless either
    # has the star bit.
    day_or = backend == "kubernetes" and not (has_star(dom) or has_star(dow))
    local_start = after.astimezone(zone).replace(tzinfo=None)
    wall_clock = _wall_clock(cron, day_or, local_start - _repeated_before(local_start, zone))
    pending: list[datetime] = []
    seen: set[datetime] = set()
    while True:
        try:
            naive: datetime = wall_clock.get_next(datetime)
        except CroniterBadDateError:
            break
        offset = naive.replace(tzinfo=zone, fold=0).utcoffset()
        if offset is not None and offset == naive.replace(tzinfo=zone, fold=1).utcoffset():
            # Neither repeated nor skipped (nearly every time, and every time in UTC): one
            # instant, which exists.
            instants = [(naive - offset).replace(tzinfo=UTC)]
            existing = instants
        else:
            instants = [naive.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1)]
            existing = [i for i in instants if i.astimezone(zone).replace(tzinfo=None) == naive]
        for instant in existing:
            if instant > after and instant not in seen:
                seen.add(instant)
                heapq.heappush(pending, instant)
        # No later wall-clock time can map to an instant before the earlier reading of
        # this one, so everything up to it is final and in order.
        settled = min(instants)
        while pending and pending[0] <= settled:
            slot = heapq.heappop(pending)
            seen.discard(slot)
            yield slot
    while pending:
        yield heapq.heappop(pending)


def _wall_clock(cron: str, day_or: bool, start: datetime) -> croniter:
    """A croniter reading wall-clock times after `start`: a copy of the expression parsed
    once (parsing costs more than the few slots a pass reads), so each reader keeps its
    own position."""
    reader = copy.copy(_parsed(cron, day_or))
    reader.set_current(start, force=True)
    return reader


@functools.lru_cache(maxsize=4096)
def _parsed(cron: str, day_or: bool) -> croniter:
    return croniter(cron, datetime(2000, 1, 1), day_or=day_or)


@dataclass
class _SlotRun:
    """Consecutive slots strictly after `origin`, read on demand from `source`, as far as
    anyone has asked."""

    origin: datetime
    source: Iterator[datetime]
    slots: list[datetime] = field(default_factory=list)

    def read(self, after: datetime) -> Iterator[datetime]:
        """The slots strictly after `after` (not before `origin`). Appending keeps every
        reader's index valid, so readers of one run may interleave."""
        index = bisect_right(self.slots, after)
        while True:
            if index == len(self.slots):
                slot = next(self.source, None)
                if slot is None:
                    return
                self.slots.append(slot)
            yield self.slots[index]
            index += 1


# The passes of every object with the same schedule ask for the same slots (a thousand
# minute schedules read the same minute each minute): each is read from croniter once per
# process. Bounded: SHARED_SCHEDULES schedules (least recently used go), each keeping at
# most SHARED_SLOTS slots before it starts again from where it is asked.
SHARED_SCHEDULES = 1024
SHARED_SLOTS = 256
_shared: OrderedDict[tuple[str, str, Backend], _SlotRun] = OrderedDict()


def shared_cron_slots(
    cron: str, zone: ZoneInfo, after: datetime, *, backend: Backend
) -> Iterator[datetime]:
    """cron_slots, from slots already read for any object of the same schedule. A full
    run is replaced, never cut, so a reader still holding it reads on undisturbed."""
    key = (cron, zone.key, backend)
    run = _shared.get(key)
    if run is None or not _serves(run, after):
        run = _SlotRun(after, cron_slots(cron, zone, after, backend=backend))
        _shared[key] = run
        while len(_shared) > SHARED_SCHEDULES:
            _shared.popitem(last=False)
    _shared.move_to_end(key)
    return run.read(after)


def _serves(run: _SlotRun, after: datetime) -> bool:
    """Whether the slots held already reach past `after` (reading on from their end could
    be a long way to a far `after`), on a list not yet full."""
    return bool(run.slots) and run.origin <= after < run.slots[-1] and len(run.slots) < SHARED_SLOTS


def _repeated_before(local: datetime, zone: ZoneInfo) -> timedelta:
    """How far back wall-clock times can still come after `local`: inside a repeated
    period, the earlier wall-clock times of it happen again (read with the later offset);
    anywhere else nothing earlier comes later, so slots are read from `local` itself."""
    first = local.replace(tzinfo=zone, fold=0).utcoffset()
    second = local.replace(tzinfo=zone, fold=1).utcoffset()
    if first is None or second is None or first <= second:
        return timedelta(0)  # not repeated (a gap has the larger offset second)
    return first - second


def interval_slots(interval: IntervalSpec, after: datetime) -> Iterator[datetime]:
    """Slots of `every` shifted by `offset`, anchored at the Unix epoch like Temporal."""
    every = parse_duration(interval.every).total_seconds()
    offset = parse_duration(interval.offset).total_seconds() if interval.offset else 0.0
    base = after.timestamp() - offset
    index = int(base // every) + 1
    while True:
        yield datetime.fromtimestamp(index * every + offset, tz=UTC)
        index += 1


@dataclass(frozen=True)
class Timetable:
    """A validated schedule: yields slots with the semantics of one backend. The cron
    slots come from the runs shared by every object of the schedule (shared_cron_slots),
    so the several questions of a pass (the judge from the watermark, the slot after
    each, the next runs) and the passes of other objects read each slot once."""

    backend: Backend
    zone: ZoneInfo
    cron: str | None
    interval: IntervalSpec | None
    start: datetime | None = None
    end: datetime | None = None

    def slots(self, after: datetime) -> Iterator[datetime]:
        if self.start is not None and after < self.start:
            after = self.start - timedelta(microseconds=1)
        if self.cron is not None:
            source = shared_cron_slots(self.cron, self.zone, after, backend=self.backend)
        else:
            assert self.interval is not None
            source = interval_slots(self.interval, after)
        for slot in source:
            if self.end is not None and slot > self.end:
                return
            yield slot

    def next_runs(self, now: datetime, count: int = 3) -> list[datetime]:
        runs: list[datetime] = []
        for slot in self.slots(now):
            runs.append(slot)
            if len(runs) == count:
                break
        return runs

    def slots_between(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """Slots in (after, until], at most `limit` of them (the earliest)."""
        found: list[datetime] = []
        for slot in self.slots(after):
            if slot > until or len(found) == limit:
                break
            found.append(slot)
        return found


def timetable(spec: ScheduledJobSpec) -> Timetable:
    """Validate the schedule part of a spec; ScheduleError says what is wrong."""
    zone = time_zone(spec.time_zone)
    cron = (
        _validated_cron(spec.schedule, spec.time_zone, spec.backend)
        if spec.schedule is not None
        else None
    )
    if cron is None and spec.interval is not None:
        parse_duration(spec.interval.every)
    return Timetable(
        backend=spec.backend,
        zone=zone,
        cron=cron,
        interval=spec.interval,
        start=spec.start_time,
        end=spec.end_time,
    )


# Every pass validates its object's schedule, and thousands of objects share a few hundred
# schedules: validating one (croniter's parser, and a first slot read) costs more than the
# rest of a quiet pass. A refusal raises, so only valid schedules are kept.
@functools.lru_cache(maxsize=4096)
def _validated_cron(schedule: str, zone_name: str, backend: Backend) -> str:
    cron = normalize_cron(schedule, backend)
    zone = time_zone(zone_name)
    first = cron_slots(cron, zone, datetime(2000, 1, 1, tzinfo=UTC), backend=backend)
    if next(first, None) is None:
        raise ScheduleError(
            reasons.INVALID_SCHEDULE,
            f"spec.schedule {schedule!r} never fires (no such date, e.g. February 30)",
        )
    return cron
