"""What a Temporal schedule's runs did, and the run-now and backfill requests made of it:
the temporal backend's reads of executions and its schedule patches, beside the schedule
itself (backend.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from temporalio.client import ScheduleDescription

from sundial.api.models import RequestStatus, ScheduledJob, ScheduledJobStatus
from sundial.backends.temporal.client import (
    Connection,
    ListedRun,
    Temporal,
)
from sundial.backends.temporal.digests import NOT_SEEN_ENDED
from sundial.planning import requests as rq
from sundial.planning.runs import (
    ObservedRun,
    counted_floor,
    is_finished,
    unseen_actions,
    workflow_run,
)

# Executions looked up per pass (one describe each, two for a failed one): a backlog of
# ended runs is worked off over passes, within the request budget.
MAX_RUN_LOOKUPS = 10
# Executions listed per pass when more actions were taken than describe's recent actions
# hold (a backfill, a burst): the schedule's own listing, one request per page.
MAX_LISTED_RUNS = 200


async def observe_all_runs(
    temporal: Temporal, sj: ScheduledJob, connection: Connection, description: ScheduleDescription
) -> tuple[list[ObservedRun], int, int]:
    """observe_runs, and the runs of actions that fell off describe's recent actions since
    the last pass (info.num_actions moved by more than they hold): those come from the
    schedule's own execution listing, every one still running or ended after countedSince
    (whichever its start: an earlier run can end later). Returns the action count now seen
    (status.seenActions), which stays where it was while a listed run is still going, so
    the next pass lists again until it has ended; and the runs of actions taken since that
    Sundial cannot see (status.unseenRuns): executions Temporal no longer has (retention),
    and those beyond one pass's listing. The I/O is here; what it means is decided by the
    pure functions below it (listing_needed, sort_listed, listed_run, unseen_after)."""
    observed = await observe_runs(temporal, sj, connection, description)
    info = description.info
    seen = sj.status.seen_actions or 0
    if not listing_needed(sj.status.seen_actions, info.num_actions, len(info.recent_actions)):
        return observed, info.num_actions, 0
    floor = counted_floor(sj.status)
    listed = await temporal.list_runs(connection, description.id, floor, MAX_LISTED_RUNS)
    to_record, going = sort_listed(listed, settled_ids(sj.status, observed))
    for run in to_record:
        found = await temporal.look_up_run(connection, run.workflow_id) if (
            run.status == "FAILED") else None  # fmt: skip
        failure = (found.failure_type, found.failure_message) if found is not None else None
        observed.append(listed_run(run, sj.status.requests, failure))
    if going:
        return observed, seen, 0
    recent = description.raw_description.info.recent_actions
    shown = {run.workflow_id for run in listed}
    shown |= {action.start_workflow_result.workflow_id for action in recent}
    kept = pending = None
    if unseen_actions(sj.status.seen_actions, info.num_actions, len(shown)):
        kept = await temporal.count_runs(connection, description.id)
    if len(listed) >= MAX_LISTED_RUNS:
        pending = await temporal.count_runs(connection, description.id, floor)
    unseen = unseen_after(sj.status.seen_actions, info.num_actions, len(shown), len(listed),
                          kept=kept, pending=pending)  # fmt: skip
    return observed, info.num_actions, unseen


def listing_needed(seen: int | None, taken: int, recent: int) -> bool:
    """More actions were taken since status.seenActions than describe's recent actions
    hold: the rest must come from the schedule's execution listing."""
    return taken - (seen or 0) > recent


def settled_ids(status: ScheduledJobStatus, observed: list[ObservedRun]) -> set[str]:
    """The executions already counted (in status) or observed in this pass."""
    settled = {r.workflow_id for r in status.recent_runs if r.workflow_id and is_finished(r)}
    settled |= {run.name for run in status.counted_runs}
    settled |= {run.workflow_id for run in observed if run.workflow_id}
    return settled


def sort_listed(listed: list[ListedRun], settled: set[str]) -> tuple[list[ListedRun], bool]:
    """Of one listing: the ended runs not yet counted (once each), and whether a run not yet
    counted is still going (then the next pass lists again, and no gap is judged)."""
    to_record: list[ListedRun] = []
    going = False
    seen = set(settled)
    for run in listed:
        if run.workflow_id in seen:
            continue
        seen.add(run.workflow_id)
        if run.status in ("RUNNING", "CONTINUED_AS_NEW"):
            going = True  # listed again, ended, by a later pass
        else:
            to_record.append(run)
    return to_record, going


def listed_run(
    run: ListedRun, requests: list[RequestStatus], failure: tuple[str | None, str | None] | None
) -> ObservedRun:
    """A listed execution as a run: its backfill request (by its slot and start), and a
    failed one's failure as its look-up found it."""
    failure_type, failure_message = failure or (None, None)
    requested = rq.backfill_of(requests, run.scheduled_time, run.start_time or run.scheduled_time)
    return replace(workflow_run(
        run.workflow_id, run.scheduled_time, status=run.status, run_id=run.run_id,
        start_time=run.start_time, close_time=run.close_time,
        failure_type=failure_type, failure_message=failure_message,
    ), requested=requested)  # fmt: skip


def unseen_after(
    seen: int | None, taken: int, shown: int, listed: int, *, kept: int | None,
    pending: int | None,
) -> int:  # fmt: skip
    """The runs of the actions since `seen` that Sundial cannot see, after a listing that
    found `listed` executions (`shown` with describe's recent actions). Fewer found than
    actions taken: Temporal's own count of the executions it keeps (`kept`) says how many
    are gone for good. A listing cut at MAX_LISTED_RUNS: the rest (`pending`, Temporal's
    count since countedSince) would be old news by the next pass (countedSince moves past
    them), so they are stated, not dropped."""
    unseen = unseen_actions(seen, taken, shown)
    if unseen and kept is not None:
        unseen = unseen_actions(seen, taken, max(kept, shown))
    if listed >= MAX_LISTED_RUNS and pending is not None:
        unseen = max(unseen, pending - listed)
    return unseen


async def observe_runs(
    temporal: Temporal, sj: ScheduledJob, connection: Connection, description: ScheduleDescription
) -> list[ObservedRun]:
    """The runs of the schedule's recent actions that are not settled in status yet.
    Going ones come from describe() itself; each one that ended is looked up once
    (then it is settled), within MAX_RUN_LOOKUPS per pass, so the cost is about one
    request per run, not per pass."""
    info = description.raw_description.info
    running = {execution.workflow_id for execution in info.running_workflows}
    listed = {r.workflow_id: r for r in sj.status.recent_runs if r.workflow_id}
    observed: list[ObservedRun] = []
    requested: dict[str, str | None] = {}
    to_look_up: list[tuple[str, datetime, datetime | None]] = []
    for action in info.recent_actions:
        workflow_id = action.start_workflow_result.workflow_id
        before = listed.pop(workflow_id, None)
        if not workflow_id or (before is not None and is_finished(before)):
            continue
        scheduled = action.schedule_time.ToDatetime(tzinfo=UTC)
        started: datetime | None = action.actual_time.ToDatetime(tzinfo=UTC)
        status = action.start_workflow_status
        # The status is eventually consistent, absent on older servers, and left RUNNING
        # for good when the run ends as it starts, or under Allow (Temporal does not
        # follow those runs): only one among the schedule's running workflows is
        # known to be going; any other is looked up.
        requested[workflow_id] = rq.backfill_of(sj.status.requests, scheduled, started or scheduled)
        if status in NOT_SEEN_ENDED and workflow_id in running:
            observed.append(workflow_run(
                workflow_id, scheduled, status="RUNNING", start_time=started,
                run_id=action.start_workflow_result.run_id,
            ))  # fmt: skip
        else:
            to_look_up.append((workflow_id, scheduled, started))
    # Listed as going but no longer among the recent actions (more runs since).
    to_look_up += [(wid, r.scheduled_time, r.start_time) for wid, r in listed.items()
                   if not is_finished(r)]  # fmt: skip
    requested.update({wid: r.requested for wid, r in listed.items()})
    for workflow_id, scheduled, started in to_look_up[:MAX_RUN_LOOKUPS]:
        found = await temporal.look_up_run(connection, workflow_id)
        if found is None:
            observed.append(workflow_run(workflow_id, scheduled, status=None,
                                         start_time=started))  # fmt: skip
            continue
        observed.append(workflow_run(
            workflow_id, scheduled, status=found.status, run_id=found.run_id,
            start_time=found.start_time or started, close_time=found.close_time,
            failure_type=found.failure_type, failure_message=found.failure_message,
        ))  # fmt: skip
    return [replace(run, requested=requested.get(run.workflow_id or "")) for run in observed]
