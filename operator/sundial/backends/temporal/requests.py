"""Run-now and backfill requests made of a Temporal schedule: a trigger, or a backfill of
the range, each with a request id Temporal dedups by, so a pass that acted and died before
writing status acts again harmlessly. One hook per request kind (REQUEST_HOOKS)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from temporalio.client import ScheduleDescription

from sundial.api.models import ConcurrencyPolicy, RequestKind, RequestStatus, ScheduledJob
from sundial.backends.temporal.client import Connection, Temporal
from sundial.backends.temporal.schedule import OVERLAP, run_now_overlap
from sundial.errors import SpecProblem, TemporalRejected
from sundial.planning import requests as rq
from sundial.planning.schedule import Timetable
from sundial.planning.temporal_schedule import RUN_NOW_WAITS


async def handle_requests(
    temporal: Temporal,
    sj: ScheduledJob,
    connection: Connection,
    identity: str,
    description: ScheduleDescription,
    table: Timetable,
    now: datetime,
) -> list[RequestStatus]:
    """Run-now (trigger) and backfill requests not yet settled. A run now never ends a
    running run, as on kubernetes: under Forbid, Replace and CancelOther it waits while
    one is going (the schedule's own policy would skip it, or terminate or cancel the
    running one), and its trigger never cancels or terminates (`run_now_overlap`); a
    backfill runs every slot of its range, one at a time unless the policy is Allow."""
    entries, to_act = rq.open_requests(sj.metadata.annotations, sj.status.requests, table, now)
    policy = sj.spec.concurrency_policy
    for open_request in to_act:
        request, entry, slots = open_request.request, open_request.entry, open_request.slots
        request_id = rq.temporal_request_id(sj.metadata.uid, request)
        # Runs the kubernetes backend started for this request before a switch of backend
        # (status.requests keeps how many) are not started again: a request is acted on
        # once, whichever backend runs its slots. Only the rest are Temporal's.
        remaining = slots[entry.runs_started :]
        if not remaining:
            entries.append(entry.model_copy(update={
                "outcome": "Done", "runs_requested": len(slots), "runs_started": len(slots),
                "message": f"all {len(slots)} run(s) were started before the switch of backend",
            }))  # fmt: skip
            continue
        before = (
            f" (the first {entry.runs_started} started before the switch of backend)"
            if entry.runs_started
            else ""
        )
        target = ScheduleTarget(temporal, connection, identity, description, request_id, policy)
        try:
            acted = await REQUEST_HOOKS[request.kind](target, open_request, remaining, before)
        except TemporalRejected as error:
            raise SpecProblem(error.reason, str(error)) from None
        if isinstance(acted, RequestStatus):
            entries.append(acted)  # not yet: waiting, as its message says
            continue
        message = acted
        entries.append(entry.model_copy(update={
            "outcome": "Done", "message": message, "runs_requested": len(slots),
            "runs_started": len(slots),
        }))  # fmt: skip
    return entries


@dataclass(frozen=True)
class ScheduleTarget:
    """The schedule a request acts on, and how (its Temporal request id, dedup'd by the
    server; the object's concurrency policy)."""

    temporal: Temporal
    connection: Connection
    identity: str
    description: ScheduleDescription
    request_id: str
    policy: ConcurrencyPolicy


async def _run_now(
    target: ScheduleTarget, open_request: rq.OpenRequest, remaining: list[datetime], before: str
) -> str | RequestStatus:
    """One trigger, never ending a running run: under Forbid, Replace and CancelOther it
    waits while one is going (returns the entry saying so)."""
    if target.policy in RUN_NOW_WAITS and target.description.info.running_actions:
        return open_request.entry.model_copy(update={
            "message": "waiting for the running workflow to end "
                       f"(concurrencyPolicy {target.policy})", "runs_requested": 1,
        })  # fmt: skip
    await target.temporal.trigger(
        target.connection, target.identity, run_now_overlap(target.policy), target.request_id
    )
    return "triggered one run"


async def _backfill(
    target: ScheduleTarget, open_request: rq.OpenRequest, remaining: list[datetime], before: str
) -> str | RequestStatus:
    """The remaining slots handed to Temporal's backfill, one at a time unless Allow."""
    request, entry = open_request.request, open_request.entry
    if request.start is None or request.end is None:
        raise ValueError("a backfill request has a start and an end")  # parse_backfill's
    overlap = OVERLAP["Allow" if target.policy == "Allow" else "BufferAll"]
    # Temporal's backfill range takes its start in, as backfill_slots does.
    start = remaining[0] if entry.runs_started else request.start
    await target.temporal.backfill(
        target.connection, target.identity, start, request.end, overlap, target.request_id
    )
    return f"handed {len(remaining)} slot(s) to Temporal's backfill{before}" + (
        "" if target.policy == "Allow" else ", run one at a time"
    )


async def _catch_up(
    target: ScheduleTarget, open_request: rq.OpenRequest, remaining: list[datetime], before: str
) -> str | RequestStatus:
    """The slots Sundial chose to run late (planning/catchup.py) handed to Temporal's
    backfill, one at a time unless Allow. The range starts a second before the first slot
    still to run, so the slot is in it whether Temporal counts the start in or not (no
    other slot of a minute-granular schedule is in that second)."""
    overlap = OVERLAP["Allow" if target.policy == "Allow" else "BufferAll"]
    start = remaining[0] - timedelta(seconds=1)
    await target.temporal.backfill(
        target.connection, target.identity, start, remaining[-1], overlap, target.request_id
    )
    return f"handed {len(remaining)} late slot(s) to Temporal's backfill{before}" + (
        "" if target.policy == "Allow" else ", run one at a time"
    )


# This backend's hook per request kind (planning/requests.REQUEST_KINDS): the message of
# what was done, or the entry of a request that must wait.
REQUEST_HOOKS: Final[
    Mapping[
        RequestKind,
        Callable[
            [ScheduleTarget, rq.OpenRequest, list[datetime], str], Awaitable[str | RequestStatus]
        ],
    ]
] = {"RunNow": _run_now, "Backfill": _backfill, "CatchUp": _catch_up}
