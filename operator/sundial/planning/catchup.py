"""spec.catchUp: which missed slots run late, the same on both backends. Pure; `now` is
passed in. docs/backends.md has the table for users.

The two backends disagree about what runs after an outage: the CronJob controller starts
only the latest unmet slot within startingDeadlineSeconds (suspended slots count as
unmet), Temporal's scheduler starts the oldest slot within its catch-up window and skips
the rest under SKIP (paused time is not counted at all). So each backend is told to run
late only what it does the same way as the policy, and Sundial runs the rest through its
own request path (status.requests, kind CatchUp), which runs each slot once:

| policy | kubernetes                                 | temporal                         |
|--------|--------------------------------------------|----------------------------------|
| None   | startingDeadlineSeconds: 15                | catch-up window 15 s             |
| Latest | startingDeadlineSeconds: window (native)   | window 15 s; Sundial: the latest |
| All    | deadline: window (the controller runs the  | window 15 s; Sundial: all, one   |
|        | latest); Sundial: the earlier ones         | at a time (BufferAll)            |

A slot Sundial catches up is not counted missed: it runs late, under a CatchUp request
(its run says so). The rest of an outage's slots stay missed with their reasons. After a
maintenance window (spec.suspendUntil) the same policy decides which of the window's
slots run: `after_window`, at the pass that ends the window.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sundial.api.models import (
    Backend,
    MissedRun,
    PauseStatus,
    RequestStatus,
    ScheduledJobSpec,
)
from sundial.planning.schedule import Timetable, iso, parse_duration

# A slot not started within this of its time is the catch-up policy's, on both backends.
# Both start a slot within a second or two when they are up; the CronJob controller may
# miss a deadline under 10 s, and Temporal's catch-up window is at least 10 s.
GRACE = timedelta(seconds=15)
DEFAULT_WINDOW_TEXT = "1h"
DEFAULT_WINDOW = parse_duration(DEFAULT_WINDOW_TEXT)
# Runs one catch-up asks for, at most (the newest kept): as a backfill's cap.
MAX_CATCH_UP_RUNS = 100
# Misses a backend will not make up by itself. Unknown (Sundial cannot tell whether it
# ran), overlap skips and buffer drops (the overlap policy at work) never run late.
CATCHABLE = frozenset({"ControllerDown", "TooManyMissed", "DeadlineExceeded",
                       "CatchupWindowExceeded"})  # fmt: skip
ID_PREFIX = "catchup-"


def window(spec: ScheduledJobSpec) -> timedelta:
    """How late a slot may still run under the policy (GRACE for None)."""
    policy = spec.catch_up
    if policy is None or policy.policy == "None":
        return GRACE
    return parse_duration(policy.window) if policy.window else DEFAULT_WINDOW


def kubernetes_deadline(spec: ScheduledJobSpec) -> int | None:
    """The CronJob's startingDeadlineSeconds: the controller runs the latest unmet slot
    within it, which is Latest (and All's latest) by itself."""
    if spec.catch_up is None:
        return spec.starting_deadline_seconds
    return int(window(spec).total_seconds())


def temporal_window(spec: ScheduledJobSpec) -> timedelta | None:
    """The schedule's catch-up window, or None for the legacy mapping: Temporal would run
    the oldest slot of an outage, which no policy asks for, so Sundial runs the late ones."""
    if spec.catch_up is None:
        return None
    return GRACE


def from_misses(
    spec: ScheduledJobSpec,
    backend: Backend,
    table: Timetable,
    new_runs: list[MissedRun],
    latest_ran: datetime | None,
    now: datetime,
) -> tuple[list[MissedRun], list[RequestStatus]]:
    """The runs judged missed this pass, less those the policy runs late, and the CatchUp
    requests that run them. `latest_ran`: the newest slot that ran (Latest never runs a
    slot older than one that ran)."""
    policy = spec.catch_up.policy if spec.catch_up is not None else "None"
    if policy == "None" or (policy == "Latest" and backend == "kubernetes"):
        return new_runs, []
    oldest = now - window(spec)
    candidates = sorted(
        (r.scheduled_time for r in new_runs
         if r.reason in CATCHABLE and not r.approximate and r.scheduled_time >= oldest),
    )  # fmt: skip
    if policy == "Latest":
        candidates = candidates[-1:]
        if candidates and latest_ran is not None and latest_ran > candidates[0]:
            candidates = []
    chosen = set(candidates[-MAX_CATCH_UP_RUNS:])
    if not chosen:
        return new_runs, []
    kept = [r for r in new_runs if r.scheduled_time not in chosen or r.reason not in CATCHABLE]
    return kept, _requests(table, sorted(chosen), policy, "missed", now)


def after_window(
    spec: ScheduledJobSpec,
    backend: Backend,
    table: Timetable,
    ended: PauseStatus,
    now: datetime,
) -> list[RequestStatus]:
    """The CatchUp requests for the slots a maintenance window held, at the pass that ends
    it. On kubernetes the controller starts the window's latest slot by itself (suspended
    slots count as unmet, within the deadline); on temporal paused time runs nothing."""
    policy = spec.catch_up.policy if spec.catch_up is not None else "None"
    if policy == "None" or ended.reason != "MaintenanceWindow" or ended.since is None:
        return []
    end = min(ended.until or now, now)
    held = table.slots_between(ended.since, end, MAX_CATCH_UP_RUNS * 100)
    held = [slot for slot in held if slot >= now - window(spec)]
    if backend == "kubernetes":
        held = held[:-1]  # the controller's
        if policy == "Latest":
            return []
    elif policy == "Latest":
        held = held[-1:]
    return _requests(table, held[-MAX_CATCH_UP_RUNS:], policy, "held by the maintenance "
                     "window", now)  # fmt: skip


def _requests(
    table: Timetable, slots: list[datetime], policy: str, why: str, now: datetime
) -> list[RequestStatus]:
    """One request per unbroken run of slots (by the timetable): a request's runs are the
    slots of its range, so a slot that ran between two missed ones stays out of it."""
    groups: list[list[datetime]] = []
    for slot in slots:
        if groups and next(table.slots(groups[-1][-1]), None) == slot:
            groups[-1].append(slot)
        else:
            groups.append([slot])
    return [
        RequestStatus(
            kind="CatchUp",
            id=request_id(group[0]),
            outcome="InProgress",
            received_time=now,
            start=group[0],
            end=group[-1],
            runs_requested=len(group),
            message=f"catchUp {policy}: {len(group)} slot(s) {why}, from {iso(group[0])}, "
            "to run late",
        )
        for group in groups
    ]


def request_id(first: datetime) -> str:
    """Named by its first slot: a pass that decides again (its status write failed) names
    the same request, which runs once."""
    return ID_PREFIX + first.strftime("%Y%m%dt%H%M%Sz").lower()
