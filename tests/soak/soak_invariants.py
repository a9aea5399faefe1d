"""The soak's promises, as checks over what was observed from ground truth (the apiserver's
objects, Temporal's own executions): pure functions of the observations, so a violation
names the object and the slot, and the same observations always give the same verdict."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

# An object as the soak knows it for ever: its namespace and name (a deleted and re-created
# object is the same object for "one run per slot": its slots are the same slots).
ObjectRef = tuple[str, str]


@dataclass(frozen=True)
class Run:
    """One run someone started for an object: a Job or a workflow execution."""

    obj: ObjectRef
    slot: datetime  # the scheduled time it ran for
    what: str  # "job/<name>" or "workflow/<id>/<run id>"
    request: str | None = None  # the run-now or backfill it was made for, if any


@dataclass
class Observations:
    runs: dict[str, Run] = field(default_factory=dict)  # by `what`: seen once however often
    # (object, slot, reason) of every miss a status reported, with a reason that counts.
    reported_misses: set[tuple[ObjectRef, datetime, str]] = field(default_factory=set)
    # Samples (time, object, what was wrong) where both backends or neither ran an object.
    both_active: list[tuple[float, ObjectRef]] = field(default_factory=list)
    neither_while_ready: list[tuple[float, ObjectRef]] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)
    stuck_namespaces: list[str] = field(default_factory=list)
    not_recovered: list[str] = field(default_factory=list)


def duplicate_runs(runs: Iterable[Run]) -> list[str]:
    """Invariant 1: no (object, slot) and no (request, slot) has two runs."""
    scheduled = Counter((run.obj, run.slot) for run in runs if run.request is None)
    requested = Counter((run.obj, run.request, run.slot) for run in runs if run.request)
    found = [f"{obj[0]}/{obj[1]} slot {slot.isoformat()}: {count} runs"
             for (obj, slot), count in scheduled.items() if count > 1]  # fmt: skip
    found += [f"{obj[0]}/{obj[1]} request {request} slot {slot.isoformat()}: {count} runs"
              for (obj, request, slot), count in requested.items() if count > 1]  # fmt: skip
    return sorted(found)


def persistent(samples: list[tuple[float, ObjectRef]], seconds: float) -> list[str]:
    """Invariant 2, as sampled: an object seen in the same wrong state for `seconds` or more
    in a row (one sample is a race between two reads, not a state)."""
    by_object: dict[ObjectRef, list[float]] = defaultdict(list)
    for moment, obj in samples:
        by_object[obj].append(moment)
    found = []
    for obj, moments in sorted(by_object.items()):
        moments.sort()
        start = previous = moments[0]
        for moment in moments[1:]:
            if moment - previous > 2.5:  # a gap: the wrong state ended between samples
                start = moment
            previous = moment
            if moment - start >= seconds:
                found.append(f"{obj[0]}/{obj[1]} from {start:.0f} to {moment:.0f}")
                break
    return found


def false_misses(observed: Observations) -> list[str]:
    """Invariant 3: no slot reported missed for which a run was started."""
    ran = {(run.obj, run.slot) for run in observed.runs.values() if run.request is None}
    return sorted(
        f"{obj[0]}/{obj[1]} slot {slot.isoformat()} reported {reason} but it ran"
        for obj, slot, reason in observed.reported_misses
        if (obj, slot) in ran
    )


def verdict(observed: Observations, persist_seconds: float) -> dict[str, list[str]]:
    """Each invariant's violations, by name (empty lists: the promises held)."""
    return {
        "1 one run per slot and request": duplicate_runs(observed.runs.values()),
        "2a never both backends active": persistent(observed.both_active, persist_seconds),
        "2b never neither while Ready": persistent(observed.neither_while_ready, persist_seconds),
        "3 no miss reported for a slot that ran": false_misses(observed),
        "4 nothing left after deletion": sorted(observed.left_behind + observed.stuck_namespaces),
        "5 recovered within 60 s of the last fault": sorted(observed.not_recovered),
    }
