"""The temporal backend's Schedule in the SDK's types, rendered from planning's plain
definition (planning/temporal_schedule.py), and the SDK's description read back into the
plain view status is built from."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import RetryPolicy

from sundial.api.models import ConcurrencyPolicy, ScheduledJob, TemporalCounters, WorkflowSpec
from sundial.planning.missed import (
    Judgement,
    TemporalEvidence,
    judge_temporal,
    start_accounting,
    timetable_hash,
)
from sundial.planning.schedule import Timetable, jitter, parse_duration
from sundial.planning.status import ScheduleView
from sundial.planning.temporal_schedule import (
    SPEC_HASH_MEMO_KEY,
    SWITCH_NOTE,
    catchup_window,
    definition_hash,
    desired_definition,
    suspend_note,
)

OVERLAP: dict[ConcurrencyPolicy, ScheduleOverlapPolicy] = {
    "Allow": ScheduleOverlapPolicy.ALLOW_ALL,
    "Forbid": ScheduleOverlapPolicy.SKIP,
    "Replace": ScheduleOverlapPolicy.TERMINATE_OTHER,
    "BufferOne": ScheduleOverlapPolicy.BUFFER_ONE,
    "BufferAll": ScheduleOverlapPolicy.BUFFER_ALL,
    "CancelOther": ScheduleOverlapPolicy.CANCEL_OTHER,
}


def run_now_overlap(policy: ConcurrencyPolicy) -> ScheduleOverlapPolicy:
    """The overlap policy of a run now's trigger: beside a running run under Allow, else
    after it (BUFFER_ALL: never dropped, as a second buffered start is under BUFFER_ONE)."""
    if policy == "Allow":
        return ScheduleOverlapPolicy.ALLOW_ALL
    return ScheduleOverlapPolicy.BUFFER_ALL


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


def temporal_schedule(sj: ScheduledJob, prefix: str) -> tuple[str, Schedule, str]:
    """(schedule id, the Schedule, its spec hash)."""
    definition = desired_definition(sj, prefix)
    spec_hash = definition_hash(definition)
    spec = sj.spec
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
    catchup = catchup_window(spec)
    schedule = Schedule(
        action=_action(sj, definition, spec_hash),
        spec=schedule_spec,
        policy=SchedulePolicy(overlap=OVERLAP[spec.concurrency_policy], catchup_window=catchup),
        state=ScheduleState(paused=spec.suspend, note=suspend_note(spec) if spec.suspend else None),
    )
    return definition["id"], schedule, spec_hash


def _action(
    sj: ScheduledJob, definition: dict[str, Any], spec_hash: str
) -> ScheduleActionStartWorkflow:
    """The workflow each action starts: the user's own (spec.workflow), or Sundial's RunJob
    with a reference to the object (spec.job: planning/temporal_schedule.desired_definition).
    Each run carries the version of the spec that started it in its memo."""
    workflow = sj.spec.workflow
    if workflow is None:
        job = definition["job"]
        timeout = job["executionTimeoutSeconds"]
        return ScheduleActionStartWorkflow(
            job["workflowType"],
            args=[job["input"]],
            id=definition["id"],
            task_queue=job["taskQueue"],
            execution_timeout=timedelta(seconds=timeout) if timeout is not None else None,
            memo={SPEC_HASH_MEMO_KEY: spec_hash},
        )
    return ScheduleActionStartWorkflow(
        workflow.type,
        args=list(workflow.args or []),
        id=workflow.id or definition["id"],
        task_queue=workflow.task_queue,
        execution_timeout=_duration(workflow.execution_timeout),
        run_timeout=_duration(workflow.run_timeout),
        task_timeout=_duration(workflow.task_timeout),
        retry_policy=_retry_policy(workflow),
        memo={**(workflow.memo or {}), SPEC_HASH_MEMO_KEY: spec_hash},
    )


def schedule_view(description: ScheduleDescription) -> ScheduleView:
    """What status needs of describe(): the pause and its note, the actions' times."""
    info, state = description.info, description.schedule.state
    return ScheduleView(
        paused=state.paused,
        note=state.note,
        held_for_switch=state.paused and state.note == SWITCH_NOTE,
        scheduled=[action.scheduled_at for action in info.recent_actions],
        running=len(info.running_actions),
        next_action_times=list(info.next_action_times),
    )


def judge(
    sj: ScheduledJob, table: Timetable, description: ScheduleDescription, now: datetime
) -> Judgement:
    """The schedule's slots since the watermark judged by what describe() shows: its
    counters of missed and skipped actions, its recent actions, its pause."""
    info = description.info
    counters = TemporalCounters(
        missed_catchup_window=info.num_actions_missed_catchup_window,
        overlap_skipped=info.num_actions_skipped_overlap,
        buffer_dropped=description.raw_description.info.buffer_dropped,
    )
    accounting = start_accounting(
        sj.status.run_accounting, timetable_hash(sj.spec), now, since=info.created_at,
        keep_counters=sj.status.backend == "temporal",
    )  # fmt: skip
    if accounting.temporal_counters is None:
        # A fresh start: what the counters held before is not this schedule's news.
        accounting = accounting.model_copy(update={"temporal_counters": counters})
    evidence = TemporalEvidence(
        counters=counters,
        recent_scheduled=[a.scheduled_at for a in info.recent_actions],
        recent_started=[a.started_at for a in info.recent_actions],
        paused=description.schedule.state.paused,
        jitter=jitter(sj.spec),
    )
    judgement = judge_temporal(table, accounting, evidence, now)
    return judgement.caught_up(sj.spec, "temporal", table, now)
