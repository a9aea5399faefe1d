"""Spread schedules: Jenkins's `H` in a cron's minute or hour field, made concrete per
object. Pure. docs/policies.md#spread-schedules-h-in-the-cron has the rules for users.

Hundreds of jobs written `0 * * * *` all start in the same second. Written `H * * * *`,
each runs at a minute of its own, chosen by a hash of its namespace and name: the same
minute on every pass, after every restart, on both backends (the CronJob and the Temporal
schedule are both given the concrete expression, so their next runs are the same times).
The missed-run judge and nextRunTimes read the concrete expression too: reconcile.py hands
every step the ScheduledJob as `resolved` makes it.

Forms, in the minute (0-59) and hour (0-23) fields:
    H          any value of the field
    H(a-b)     a value from a to b
    H/n        every n, from a start below n          (minute H/15 -> 7-59/15)
    H(a-b)/n   every n within a..b, from a start in a..a+n-1
"""

from __future__ import annotations

import hashlib
import re

from sundial.api import reasons
from sundial.api.models import ScheduledJob
from sundial.planning.schedule import ScheduleError

# The fields H may stand in, by position, with their ranges.
FIELDS = {0: ("minute", 0, 59), 1: ("hour", 0, 23)}
_HASHED = re.compile(r"^H(?:\((\d+)-(\d+)\))?(?:/(\d+))?$")


def _is_spread(part: str) -> bool:
    """An H form, not a name such as THU: H alone, or followed by ( or /."""
    return part == "H" or part.startswith(("H(", "H/"))


def has_spread(schedule: str | None) -> bool:
    return schedule is not None and any(
        _is_spread(part) for field in schedule.split() for part in field.split(",")
    )


def seed(namespace: str, name: str) -> bytes:
    """What an object's spread is chosen by: stable for as long as the object is itself."""
    return hashlib.sha256(f"{namespace}/{name}".encode()).digest()


def resolve(schedule: str, digest: bytes) -> str:
    """The schedule with each `H` form replaced by this object's concrete value."""
    fields = schedule.split()
    if len(fields) != 5:
        return schedule  # not a 5-field expression: schedule.py says what is wrong
    out = []
    for position, text in enumerate(fields):
        if not any(_is_spread(part) for part in text.split(",")):
            out.append(text)
            continue
        if position not in FIELDS:
            raise ScheduleError(
                reasons.INVALID_SCHEDULE,
                f"spec.schedule {schedule!r}: H (a spread value) is supported in the minute "
                "and hour fields only",
            )
        name, low, high = FIELDS[position]
        value = int.from_bytes(digest[position * 4 : position * 4 + 4], "big")
        out.append(",".join(_one(schedule, name, low, high, part, value)
                            for part in text.split(",")))  # fmt: skip
    return " ".join(out)


def _one(schedule: str, name: str, low: int, high: int, text: str, value: int) -> str:
    if not _is_spread(text):
        return text
    match = _HASHED.match(text)
    if match is None:
        raise ScheduleError(
            reasons.INVALID_SCHEDULE,
            f"spec.schedule {schedule!r}: the {name} field {text!r} is not a spread form; "
            "write H, H(a-b), H/n or H(a-b)/n",
        )
    start, end, step = match.groups()
    first, last = (int(start), int(end)) if start is not None else (low, high)
    if not low <= first <= last <= high:
        raise ScheduleError(
            reasons.INVALID_SCHEDULE,
            f"spec.schedule {schedule!r}: the {name} field's range {first}-{last} must lie "
            f"within {low}-{high}",
        )
    if step is None:
        return str(first + value % (last - first + 1))
    every = int(step)
    if not 1 <= every <= last - first + 1:
        raise ScheduleError(
            reasons.INVALID_SCHEDULE,
            f"spec.schedule {schedule!r}: the {name} field's step /{every} must be 1 to "
            f"{last - first + 1}",
        )
    return f"{first + value % every}-{last}/{every}"


def resolved(sj: ScheduledJob) -> ScheduledJob:
    """The ScheduledJob with its spread made concrete (itself when it has none)."""
    schedule = sj.spec.schedule
    if schedule is None or not has_spread(schedule):
        return sj
    concrete = resolve(schedule, seed(sj.metadata.namespace, sj.metadata.name))
    return sj.model_copy(update={"spec": sj.spec.model_copy(update={"schedule": concrete})})
