"""The soak's promises, as checks over what was observed from ground truth (the apiserver's
objects, Temporal's own executions): pure functions of the observations, so a violation
names the object and the slot, and the same observations always give the same verdict."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

# An object as the soak knows it for ever: its namespace and name (a deleted and re-created
# object is the same object for "one run per slot": its slots are the same slots).
ObjectRef = tuple[str, str]

# How long after a run-now request was written its run may still start: the operator acts on
# it on its next pass, which a fault (10 s at most) and the queue's backoff may delay.
RUN_NOW_DELAY = timedelta(seconds=90)


@dataclass(frozen=True)
class Run:
    """One run someone started for an object: a Job or a workflow execution."""

    obj: ObjectRef
    slot: datetime  # the scheduled time it ran for
    what: str  # "job/<name>" or "workflow/<id>/<run id>"
    request: str | None = None  # the run-now or backfill it was made for, if any
    started: datetime | None = None  # when it started (a workflow execution's start time)


@dataclass(frozen=True)
class Backfill:
    """A backfill the soak asked for (`sundial.dev/backfill: <id>;<start>;<end>`), as it
    wrote it: the request's label (`Backfill/<id>`), its range, and when it was written."""

    obj: ObjectRef
    label: str
    start: datetime
    end: datetime
    written: datetime


@dataclass(frozen=True)
class Sampled:
    """One object as one sample read it: the apiserver (the ScheduledJob, its CronJob, its
    namespace's labels) and Temporal (its schedules under every connection), within a second."""

    obj: ObjectRef
    backend: str  # spec.backend
    cron_active: bool  # its CronJob exists, not suspended, not being deleted
    schedules_running: int  # schedules under its id, over any connection, not paused
    ready: str | None  # Ready's status, when for the current generation; else None
    reason: str | None  # Ready's reason
    suspended: bool
    deleting: bool
    # How long its namespace has been refused by the connections (their namespaceSelector no
    # longer matching) with no fault in force, or None when admitted or a fault is on.
    revoked_quiet_for: float | None
    # Switched from kubernetes under Forbid while a Job the CronJob started has not
    # finished: its schedule is paused with the switch's note until a pass after that Job
    # ends (the documented hold, one run at a time across a switch; without a node, for
    # ever; the pass may wait for an apiserver fault to end: switch_held).
    held: bool = False
    # Its namespace is refused by the connections now, faults or not: the schedule is to
    # be paused, and Ready may say so only once a status write goes through (invariant 6
    # judges that after the quiet grace; until then a paused schedule under a stale
    # Ready=True is the revocation in progress, not "neither").
    revoked: bool = False


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
    # Samples where a revoked object's schedule still ran, or its Ready said nothing.
    revoked_running: list[tuple[float, ObjectRef]] = field(default_factory=list)
    # Writes to what Sundial neither made nor was asked to adopt (a CronJob, a schedule).
    foreign_touched: list[str] = field(default_factory=list)


def duplicate_runs(runs: Iterable[Run]) -> list[str]:
    """Invariant 1: no (object, slot) and no (request, slot) has two runs."""
    scheduled = Counter((run.obj, run.slot) for run in runs if run.request is None)
    requested = Counter((run.obj, run.request, run.slot) for run in runs if run.request)
    found = [f"{obj[0]}/{obj[1]} slot {slot.isoformat()}: {count} runs"
             for (obj, slot), count in scheduled.items() if count > 1]  # fmt: skip
    found += [f"{obj[0]}/{obj[1]} request {request} slot {slot.isoformat()}: {count} runs"
              for (obj, request, slot), count in requested.items() if count > 1]  # fmt: skip
    return sorted(found)


def attribute_backfills(runs: Iterable[Run], backfills: Iterable[Backfill]) -> list[Run]:
    """Temporal's executions say which schedule and slot they ran for, not which backfill
    (a backfilled slot is the same slot again). A workflow execution with no request that
    started after a backfill of its object was written, for a slot in that backfill's range,
    is that backfill's run (the soak asks only for ranges whose scheduled runs started minutes
    before, and never for two overlapping ranges of one object; the latest such backfill
    wins). Jobs carry their request in an annotation and are left as they are."""
    by_object: dict[ObjectRef, list[Backfill]] = defaultdict(list)
    for backfill in backfills:
        by_object[backfill.obj].append(backfill)
    attributed = []
    for run in runs:
        if run.request is None and run.started is not None and run.what.startswith("workflow/"):
            matching = [
                b for b in by_object.get(run.obj, [])
                if b.start <= run.slot <= b.end and run.started >= b.written
            ]  # fmt: skip
            if matching:
                run = replace(run, request=max(matching, key=lambda b: b.written).label)
        attributed.append(run)
    return attributed


def attribute_run_nows(
    runs: Iterable[Run],
    requests: Iterable[tuple[ObjectRef, str, datetime]],
    delay: timedelta = RUN_NOW_DELAY,
) -> tuple[list[Run], list[str]]:
    """Temporal's runs of a trigger (a run now) carry no request either, and Temporal names
    them by the second they were triggered in: two requests acted on within one second are
    one slot and one workflow id. A workflow execution with no request whose slot is not on
    a minute (the soak's schedules are all on minutes) is a trigger: each must be matched,
    in the order they started, to a run-now request of its object written before it
    started and not already run (by a Job carrying its label, or an earlier trigger).
    A trigger acted on at a whole second falls on a minute too (a request written during a
    fault, acted on when it ended): where a minute slot of an object has more than one run
    with no request, its workflow executions, latest started first, are matched likewise to
    the requests still unused, written before they started and at most `delay` before, until
    one run is left to the slot (two runs and no such request: still two runs, invariant 1).
    Returns the runs with triggers labelled by their request, and the triggers left over
    (a request acted on twice, or a run nobody asked for: invariant 1)."""
    runs = list(runs)
    by_jobs = {(run.obj, run.request) for run in runs if run.request}
    pending: dict[ObjectRef, list[tuple[datetime, str]]] = defaultdict(list)
    for obj, label, written in requests:
        if (obj, label) not in by_jobs:
            pending[obj].append((written, label))
    for waiting in pending.values():
        waiting.sort()
    triggers = sorted(
        (run for run in runs if run.request is None and run.what.startswith("workflow/")
         and run.started is not None and (run.slot.second or run.slot.microsecond)),
        key=lambda run: (run.started, run.what),
    )  # fmt: skip
    labelled: dict[str, Run] = {}
    problems = []
    for run in triggers:
        assert run.started is not None
        waiting = pending[run.obj]
        match = next((i for i, (written, _) in enumerate(waiting) if written <= run.started), None)
        if match is None:
            slot = run.slot.isoformat()
            problems.append(f"{run.obj[0]}/{run.obj[1]} run {run.what} (slot {slot}): "
                            "a run now with no request of its own")  # fmt: skip
            continue
        labelled[run.what] = replace(run, request=waiting.pop(match)[1])
    on_minutes: dict[tuple[ObjectRef, datetime], list[Run]] = defaultdict(list)
    for run in runs:
        if run.request is None and run.what not in labelled:
            on_minutes[(run.obj, run.slot)].append(run)
    for (obj, _), sharing in sorted(on_minutes.items()):
        candidates = sorted(
            (run for run in sharing if run.what.startswith("workflow/") and run.started),
            key=lambda run: (run.started, run.what), reverse=True,
        )  # fmt: skip
        left = len(sharing)
        for run in candidates:
            assert run.started is not None
            if left <= 1:
                break
            waiting = pending[obj]
            match = next((i for i, (written, _) in enumerate(waiting)
                          if written <= run.started <= written + delay), None)  # fmt: skip
            if match is not None:
                labelled[run.what] = replace(run, request=waiting.pop(match)[1])
                left -= 1
    return [labelled.get(run.what, run) for run in runs], problems


def switch_held(
    switch_note: bool,
    forbid: bool,
    job_ends: Iterable[datetime | None],
    apiserver_faults: Iterable[tuple[datetime, datetime | None]],
    now: datetime,
    persist_seconds: float,
) -> bool:
    """Whether an object switched from kubernetes under Forbid may still be held: its
    schedule paused with the switch's note (`switch_note`) while a Job of the object has
    not ended on the apiserver (`job_ends`: each Job's end, None while it runs), and until
    the operator's next pass after the Job ended released it. That pass needs
    `persist_seconds` with the apiserver answering: an apiserver fault (`apiserver_faults`:
    (start, end or None while in force)) that began before the release was due (the Job
    ended during it, or just before: the apiserver gives whole seconds) puts the release
    off until `persist_seconds` after the fault ended, and so on for a fault after it."""
    if not (switch_note and forbid):
        return False
    faults = sorted(apiserver_faults, key=lambda fault: fault[0])
    persist = timedelta(seconds=persist_seconds)
    for ended in job_ends:
        if ended is None:
            return True
        due = ended + persist
        for start, end in faults:
            if start > due:
                break
            if end is None:
                return True
            due = max(due, end + persist)
        if now < due:
            return True
    return False


def wrong_states(state: Sampled, grace: float) -> list[str]:
    """What is wrong with one object in one sample: "both" (a CronJob and a schedule, or two
    schedules, active: invariant 2a), "neither" (nothing active while Ready=True for its
    generation, not suspended, being deleted or held across a switch: 2b), "revoked" (its
    namespace refused by the connections for `grace` seconds without a fault, and its
    schedule still running or its Ready True: 6). A revoked object paused and Ready=False
    with a reason is none."""
    wrong = []
    if int(state.cron_active) + state.schedules_running >= 2:
        wrong.append("both")
    revoking = (
        state.backend == "temporal"
        and state.revoked
        and (state.revoked_quiet_for is None or state.revoked_quiet_for < grace)
    )
    if (not state.cron_active and state.schedules_running == 0 and state.ready == "True"
            and not state.suspended and not state.deleting and not state.held
            and not revoking):  # fmt: skip
        wrong.append("neither")
    if (state.backend == "temporal" and state.revoked_quiet_for is not None
            and state.revoked_quiet_for >= grace
            and (state.schedules_running > 0 or state.ready == "True")):  # fmt: skip
        wrong.append("revoked")
    return wrong


def not_recovered(
    obj: ObjectRef,
    generation: int | None,
    status: dict[str, object],
    backend: str,
    revoked: bool,
    schedules_running: int,
) -> str | None:
    """Invariant 5 for one object, once the faults are over: its generation observed and
    Ready True or False with a reason (not InternalError); an object whose namespace the
    connections refuse must have its schedule paused and its Ready not True (it says why)."""
    name = f"{obj[0]}/{obj[1]}"
    if status.get("observedGeneration") != generation:
        return f"{name}: generation not observed"
    conditions = status.get("conditions") or []
    assert isinstance(conditions, list)
    ready = {c["type"]: c for c in conditions}.get("Ready")
    if ready is None or (ready["status"] != "True"
                         and ready.get("reason") in (None, "", "InternalError")):  # fmt: skip
        return f"{name}: Ready {ready}"
    if revoked and backend == "temporal":
        if schedules_running:
            return f"{name}: its namespace is revoked but its schedule still runs"
        if ready["status"] == "True":
            return f"{name}: its namespace is revoked but Ready is True"
    return None


WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def foreign_writes(
    events: Iterable[dict[str, Any]], user: str, foreign: set[tuple[str, str]]
) -> list[str]:
    """Writes by `user` the apiserver accepted (not dry runs) to CronJobs that Sundial
    neither made nor was asked to adopt, from the audit log."""
    found = []
    for event in events:
        ref = event.get("objectRef") or {}
        who = event.get("user") or {}
        code = (event.get("responseStatus") or {}).get("code", 200)
        if (event.get("verb") in WRITES and who.get("username") == user
                and ref.get("resource") == "cronjobs" and not ref.get("subresource")
                and (ref.get("namespace"), ref.get("name")) in foreign and code < 300
                and "dryRun=" not in str(event.get("requestURI", ""))):  # fmt: skip
            found.append(f"{user} {event['verb']} cronjobs {ref['namespace']}/{ref['name']} "
                         f"({code})")  # fmt: skip
    return found


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


def mix_verdict(observed: Observations, persist_seconds: float) -> dict[str, list[str]]:
    """The invariants of the actions added to the mix (namespace labels, adoption)."""
    return {
        "6 a revoked connection's schedules paused, Ready says why": persistent(
            observed.revoked_running, persist_seconds
        ),
        "7 nothing foreign touched": sorted(observed.foreign_touched),
    }
