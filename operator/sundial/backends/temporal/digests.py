"""What Sundial compares of a schedule without reading it whole: the fingerprint of its
definition as the server holds it (drift), and the digest of what its ScheduledJob
reports, equal whether taken from a listing entry or from describe() (the listing that
stands in for a watch wakes an object only when its digest moved)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import WorkflowExecutionStatus
from temporalio.api.schedule.v1 import message_pb2 as schedule_pb
from temporalio.client import ScheduleDescription

# Statuses of a schedule's action whose run has not been seen to end.
NOT_SEEN_ENDED = (
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED,
    WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING,
)


def schedule_fingerprint(description: ScheduleDescription) -> str:
    """A hash of the schedule as the server holds it (spec, action, policies), without its
    pause state: the server rewrites cron strings, so this is compared with the same
    hash taken right after Sundial's own last write, never with the desired spec."""
    schedule = type(description.raw_description.schedule)()
    schedule.CopyFrom(description.raw_description.schedule)
    schedule.ClearField("state")
    return hashlib.sha256(schedule.SerializeToString(deterministic=True)).hexdigest()[:16]


@dataclass(frozen=True)
class Listed:
    """A listed schedule: `digest` changes when anything its ScheduledJob reports could
    (a run started or seen ended, a pause or note, the spec or workflow type), not with
    the future action times; `newest_action` is the nominal time of the latest action,
    `jitter` the spec's."""

    digest: int
    newest_action: datetime | None
    jitter: timedelta


def listed_schedule(info: schedule_pb.ScheduleListInfo) -> Listed:
    actions = info.recent_actions
    return Listed(
        digest=_digest(info.paused, info.notes, info.workflow_type.name, info.spec, actions),
        newest_action=actions[-1].schedule_time.ToDatetime(tzinfo=UTC) if actions else None,
        jitter=info.spec.jitter.ToTimedelta(),
    )


def description_digest(description: ScheduleDescription) -> int:
    """`Listed.digest` from what describe returned: the server builds the list entry from
    the same state (its spec less the time zone data, the tail of the recent actions), so
    a pass can say what it saw."""
    raw = description.raw_description
    spec = schedule_pb.ScheduleSpec()
    spec.CopyFrom(raw.schedule.spec)
    spec.ClearField("timezone_data")
    state = raw.schedule.state
    workflow_type = raw.schedule.action.start_workflow.workflow_type.name
    return _digest(state.paused, state.notes, workflow_type, spec, raw.info.recent_actions)


def _digest(
    paused: bool,
    notes: str,
    workflow_type: str,
    spec: schedule_pb.ScheduleSpec,
    actions: Sequence[schedule_pb.ScheduleActionResult],
) -> int:
    # The newest action (a run started), and the newest seen ended: both lists end the same.
    newest = actions[-1].SerializeToString(deterministic=True) if actions else None
    ended = [a for a in actions if a.start_workflow_status not in NOT_SEEN_ENDED]
    newest_ended = ended[-1].SerializeToString(deterministic=True) if ended else None
    spec_bytes = spec.SerializeToString(deterministic=True)
    return hash((paused, notes, workflow_type, spec_bytes, newest, newest_ended))
