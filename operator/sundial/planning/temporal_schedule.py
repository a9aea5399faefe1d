"""The temporal backend's desired state: a ScheduledJob as a Temporal Schedule. Pure."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import RetryPolicy

from sundial.api.models import (
    GROUP,
    ConcurrencyPolicy,
    ScheduledJob,
    ScheduledJobSpec,
    WorkflowSpec,
)
from sundial.planning.schedule import parse_duration

SPEC_HASH_MEMO_KEY = f"{GROUP}/spec-hash"
SCHEDULEDJOB_MEMO_KEY = f"{GROUP}/scheduledjob"
# The ScheduledJob's uid: a schedule is Sundial's for an object only if it says so.
SCHEDULEDJOB_UID_MEMO_KEY = f"{GROUP}/scheduledjob-uid"
# startingDeadlineSeconds unset means "no deadline" on a CronJob; Temporal always has a
# catch-up window, so Sundial sets the server's own default, one year, explicitly (some
# SDKs document 60 s, and an implicit default is a surprise waiting to happen).
DEFAULT_CATCHUP_WINDOW = timedelta(days=365)
SUSPEND_NOTE = "Paused by Sundial: the ScheduledJob has spec.suspend: true"
RESUME_NOTE = "Resumed by Sundial: the ScheduledJob has spec.suspend: false"
# A schedule created paused while its ScheduledJob switches from kubernetes: it proves that
# Temporal accepts it before the CronJob goes, and starts only once the CronJob is gone.
SWITCH_NOTE = "Paused by Sundial: switching from backend kubernetes"
# A schedule created paused at a new place (a changed connection or id prefix): it proves
# that the new place accepts it before the old one is deleted, and starts once it is.
MOVE_NOTE = "Paused by Sundial: moving from another connection"
# A schedule whose connection no longer admits its ScheduledJob (the namespace left a
# ClusterTemporalConnection's namespaceSelector, the TemporalConnection or its Secret was
# deleted, the task queue is no longer allowed): paused through the connection as last
# read, and unpaused once the connection admits the object again.
REVOKED_NOTE = "Paused by Sundial: the connection no longer admits this ScheduledJob"
READMITTED_NOTE = "Resumed by Sundial: the connection admits the ScheduledJob again"


def revoked_note(reason: str) -> str:
    return f"{REVOKED_NOTE} ({reason})"


def is_revoked_note(note: str | None) -> bool:
    return bool(note) and str(note).startswith(REVOKED_NOTE)


def suspend_note(spec: ScheduledJobSpec) -> str:
    """Sundial's pause note, with the person's spec.suspendNote after it."""
    return f"{SUSPEND_NOTE}: {spec.suspend_note}" if spec.suspend_note else SUSPEND_NOTE


def is_suspend_note(note: str | None) -> bool:
    """The pause is Sundial's own for spec.suspend (whatever note the person gave)."""
    return bool(note) and str(note).startswith(SUSPEND_NOTE)


OVERLAP: dict[ConcurrencyPolicy, ScheduleOverlapPolicy] = {
    "Allow": ScheduleOverlapPolicy.ALLOW_ALL,
    "Forbid": ScheduleOverlapPolicy.SKIP,
    "Replace": ScheduleOverlapPolicy.TERMINATE_OTHER,
    "BufferOne": ScheduleOverlapPolicy.BUFFER_ONE,
    "BufferAll": ScheduleOverlapPolicy.BUFFER_ALL,
    "CancelOther": ScheduleOverlapPolicy.CANCEL_OTHER,
}

# A run now never ends a run, on either backend: its trigger never cancels or terminates
# one (a run that started since Sundial looked is waited for). The policies whose own
# overlap would skip the run now or end the running one make it wait in Sundial while a
# run is going, as the kubernetes backend does (backends.temporal.runs.handle_requests).
RUN_NOW_WAITS: frozenset[ConcurrencyPolicy] = frozenset({"Forbid", "Replace", "CancelOther"})


def run_now_overlap(policy: ConcurrencyPolicy) -> ScheduleOverlapPolicy:
    """The overlap policy of a run now's trigger: beside a running run under Allow, else
    after it (BUFFER_ALL: never dropped, as a second buffered start is under BUFFER_ONE)."""
    if policy == "Allow":
        return ScheduleOverlapPolicy.ALLOW_ALL
    return ScheduleOverlapPolicy.BUFFER_ALL


def schedule_id(prefix: str, namespace: str, name: str) -> str:
    """`<prefix><namespace>/<name>`: Kubernetes names hold no '/', so the id is unique per
    namespace and name, and the prefix (default "sundial/") tells clusters apart when
    several share one Temporal namespace."""
    return f"{prefix}{namespace}/{name}"


def _duration(text: str | None) -> timedelta | None:
    return parse_duration(text) if text is not None else None


def _retry_policy(workflow: WorkflowSpec) -> RetryPolicy | None:
    policy = workflow.retry_policy
    if policy is None:
        return None
    return RetryPolicy(
        initial_interval=_duration(policy.initial_interval) or timedelta(seconds=1),
        backoff_coefficient=policy.backoff_coefficient or 2.0,
        maximum_interval=_duration(policy.maximum_interval),
        maximum_attempts=policy.maximum_attempts or 0,
        non_retryable_error_types=policy.non_retryable_error_types,
    )


def desired_definition(sj: ScheduledJob, prefix: str) -> dict[str, Any]:
    """Everything the Schedule is made of, as plain JSON: what the spec hash covers."""
    spec = sj.spec
    workflow = spec.workflow
    if workflow is None:
        raise ValueError("backend temporal needs spec.workflow")
    identity = schedule_id(prefix, sj.metadata.namespace, sj.metadata.name)
    return {
        "id": identity,
        "cron": " ".join(spec.schedule.split()) if spec.schedule else None,
        "interval": spec.interval.model_dump(exclude_none=True) if spec.interval else None,
        "timeZone": spec.time_zone,
        "jitter": spec.jitter,
        "startTime": spec.start_time.isoformat() if spec.start_time else None,
        "endTime": spec.end_time.isoformat() if spec.end_time else None,
        "overlap": spec.concurrency_policy,
        "catchupWindowSeconds": spec.starting_deadline_seconds,
        "suspend": spec.suspend,
        "workflow": workflow.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def definition_hash(definition: dict[str, Any]) -> str:
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def temporal_schedule(sj: ScheduledJob, prefix: str) -> tuple[str, Schedule, str]:
    """(schedule id, the Schedule, its spec hash)."""
    definition = desired_definition(sj, prefix)
    spec_hash = definition_hash(definition)
    spec = sj.spec
    workflow = spec.workflow
    assert workflow is not None
    if spec.interval is not None:
        schedule_spec = ScheduleSpec(
            intervals=[
                ScheduleIntervalSpec(
                    every=parse_duration(spec.interval.every),
                    offset=_duration(spec.interval.offset),
                )
            ]
        )
    else:
        assert spec.schedule is not None
        schedule_spec = ScheduleSpec(cron_expressions=[definition["cron"]])
    schedule_spec.time_zone_name = spec.time_zone
    schedule_spec.jitter = _duration(spec.jitter)
    schedule_spec.start_at = spec.start_time
    schedule_spec.end_at = spec.end_time
    catchup = (
        timedelta(seconds=spec.starting_deadline_seconds)
        if spec.starting_deadline_seconds is not None
        else DEFAULT_CATCHUP_WINDOW
    )
    action = ScheduleActionStartWorkflow(
        workflow.type,
        args=list(workflow.args or []),
        id=workflow.id or definition["id"],
        task_queue=workflow.task_queue,
        execution_timeout=_duration(workflow.execution_timeout),
        run_timeout=_duration(workflow.run_timeout),
        task_timeout=_duration(workflow.task_timeout),
        retry_policy=_retry_policy(workflow),
        # Each run carries the version of the spec that started it.
        memo={**(workflow.memo or {}), SPEC_HASH_MEMO_KEY: spec_hash},
    )
    schedule = Schedule(
        action=action,
        spec=schedule_spec,
        policy=SchedulePolicy(overlap=OVERLAP[spec.concurrency_policy], catchup_window=catchup),
        state=ScheduleState(paused=spec.suspend, note=suspend_note(spec) if spec.suspend else None),
    )
    return definition["id"], schedule, spec_hash
