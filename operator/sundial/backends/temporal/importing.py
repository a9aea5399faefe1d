"""A Temporal schedule as the ScheduledJob that renders it (`kubectl sundial import
schedule`): the spec (one cron or one interval, its zone, jitter, start and end), the
overlap policy, the catch-up window, the pause and its note, and the workflow action.

Temporal stores a cron string as structured calendars, so the cron is rebuilt from them,
and the import is checked the way that matters: the ScheduledJob's timetable must give the
same next action times as the schedule itself does. What a ScheduledJob cannot express is
refused with what would be lost: several specs, calendars with seconds or years,
exclusions, a limited number of actions, pause on failure, search attributes, an action
that is not a workflow.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import (
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleDescription,
    ScheduleRange,
)

from sundial.api.models import ScheduledJobSpec
from sundial.backends.temporal.schedule import OVERLAP
from sundial.planning.importing import Imported, NotImportable, scheduledjob_manifest
from sundial.planning.schedule import ScheduleError, timetable
from sundial.planning.temporal_schedule import DEFAULT_CATCHUP_WINDOW, SPEC_HASH_MEMO_KEY

# minute, hour, day of month, month, day of week: each field's whole range.
_FIELDS = (("minute", 0, 59, "0"), ("hour", 0, 23, "0"), ("day_of_month", 1, 31, "*"),
           ("month", 1, 12, "*"), ("day_of_week", 0, 6, "*"))  # fmt: skip
_POLICY = {overlap: policy for policy, overlap in OVERLAP.items()}
# How many next action times must agree.
_CHECKED_TIMES = 5


def scheduledjob_from_schedule(
    description: ScheduleDescription, schedule_id: str, *, name: str, namespace: str,
    connection: dict[str, str] | None, adopt: bool, own_id: str,
) -> Imported:  # fmt: skip
    """`own_id` is the schedule id Sundial gives the ScheduledJob: a workflow id equal to it
    is Sundial's default, any other is stated."""
    schedule = description.schedule
    spec, policy, state, action = schedule.spec, schedule.policy, schedule.state, schedule.action
    problems: list[str] = []
    notes: list[str] = []
    sj_spec: dict[str, Any] = {"backend": "temporal"}

    specs = len(spec.calendars) + len(spec.intervals) + len(spec.cron_expressions)
    if specs != 1:
        problems.append(f"it has {specs} specs (calendars, intervals, crons); a ScheduledJob "
                        "has one schedule or one interval: the others would be lost")  # fmt: skip
    elif spec.calendars:
        try:
            sj_spec["schedule"] = cron_of_calendar(spec.calendars[0])
        except ValueError as error:
            problems.append(str(error))
    elif spec.intervals:
        interval = spec.intervals[0]
        sj_spec["interval"] = {"every": _go_duration(interval.every)}
        if interval.offset:
            sj_spec["interval"]["offset"] = _go_duration(interval.offset)
    else:
        sj_spec["schedule"] = spec.cron_expressions[0]
    if spec.skip:
        problems.append(f"it has {len(spec.skip)} exclusion calendars (skip): they would be lost")
    sj_spec["timeZone"] = spec.time_zone_name or "UTC"
    if not spec.time_zone_name:
        notes.append("spec.timeZone: UTC, Temporal's default for a schedule with none")
    if spec.jitter:
        sj_spec["jitter"] = _go_duration(spec.jitter)
    if spec.start_at:
        sj_spec["startTime"] = spec.start_at.isoformat()
    if spec.end_at:
        sj_spec["endTime"] = spec.end_at.isoformat()

    sj_spec["concurrencyPolicy"] = _POLICY[policy.overlap]
    window = policy.catchup_window or DEFAULT_CATCHUP_WINDOW
    if window != DEFAULT_CATCHUP_WINDOW:
        if window < timedelta(seconds=10):
            problems.append(f"its catch-up window is {window}; Temporal's minimum, and a "
                            "ScheduledJob's, is 10 s")  # fmt: skip
        sj_spec["startingDeadlineSeconds"] = int(window.total_seconds())
    if policy.pause_on_failure:
        problems.append("it pauses on failure (pause_on_failure): a ScheduledJob has no such "
                        "policy yet, it would be lost")  # fmt: skip
    if state.limited_actions:
        problems.append(f"it is limited to {state.remaining_actions} more actions: the limit "
                        "would be lost")  # fmt: skip
    sj_spec["suspend"] = bool(state.paused)
    if state.paused and state.note:
        sj_spec["suspendNote"] = state.note[:256]

    if not isinstance(action, ScheduleActionStartWorkflow):
        problems.append(f"its action is {type(action).__name__}, not a workflow start")
    else:
        workflow, lost = _workflow(action, own_id)
        sj_spec["workflow"] = workflow
        problems += lost
    if connection is not None:
        sj_spec["temporalConnectionRef"] = connection
    if problems:
        raise NotImportable(schedule_id, problems)

    manifest = scheduledjob_manifest(name, namespace, sj_spec,
                                     adopting=schedule_id if adopt else None)  # fmt: skip
    _check_times(manifest, description)
    return Imported(manifest, tuple(notes), shorthand=False)


def cron_of_calendar(calendar: ScheduleCalendarSpec) -> str:
    """The 5-field cron of a calendar Temporal made from one (or one a cron can say)."""
    if any(each.start != 0 or each.end > 0 for each in calendar.second):
        raise ValueError("its calendar fires at seconds past the minute: a cron cannot say that")
    if calendar.year:
        raise ValueError("its calendar names years: a cron cannot say that")
    fields = [_field(getattr(calendar, attribute), low, high, default)
              for attribute, low, high, default in _FIELDS]  # fmt: skip
    return " ".join(fields)


def _field(ranges: Sequence[ScheduleRange], low: int, high: int, default: str) -> str:
    """One cron field; no ranges is Temporal's default for the field (0 for the minute
    and the hour, every value for the rest)."""
    parts = []
    for each in ranges:
        end = each.end if each.end >= each.start else each.start
        step = each.step or 1
        if (each.start, end) == (low, high) or (low == 0 and high == 6 and (each.start, end) == (
            0, 7
        )):  # fmt: skip
            text = "*"
        elif each.start == end:
            text = str(each.start)
        else:
            text = f"{each.start}-{end}"
        parts.append(text if step == 1 else f"{text}/{step}")
    return ",".join(parts) or default


def _workflow(action: ScheduleActionStartWorkflow, own_id: str) -> tuple[dict[str, Any], list[str]]:
    lost: list[str] = []
    workflow: dict[str, Any] = {"type": action.workflow, "taskQueue": action.task_queue}
    if action.id and action.id != own_id:
        workflow["id"] = action.id
    if action.args:
        try:
            workflow["args"] = [json.loads(payload.data) for payload in action.args]
        except (ValueError, AttributeError):
            lost.append("its workflow arguments are not JSON: they would be lost")
    timeouts = (
        ("executionTimeout", action.execution_timeout),
        ("runTimeout", action.run_timeout),
        ("taskTimeout", action.task_timeout),
    )
    for field, value in timeouts:
        if value:
            workflow[field] = _go_duration(value)
    if action.retry_policy is not None:
        policy = action.retry_policy
        workflow["retryPolicy"] = {
            key: value for key, value in {
                "initialInterval": _go_duration(policy.initial_interval),
                "backoffCoefficient": policy.backoff_coefficient,
                "maximumInterval": _go_duration(policy.maximum_interval)
                if policy.maximum_interval else None,
                "maximumAttempts": policy.maximum_attempts or None,
                "nonRetryableErrorTypes": list(policy.non_retryable_error_types or []) or None,
            }.items() if value is not None
        }  # fmt: skip
    memo = {key: json.loads(payload.data) for key, payload in (action.memo or {}).items()
            if key != SPEC_HASH_MEMO_KEY and hasattr(payload, "data")}  # fmt: skip
    if memo:
        workflow["memo"] = memo
    if action.typed_search_attributes and len(action.typed_search_attributes) > 0:
        lost.append("its workflows get search attributes: a ScheduledJob cannot set them, "
                    "they would be lost")  # fmt: skip
    return workflow, lost


def _check_times(manifest: dict[str, Any], description: ScheduleDescription) -> None:
    """The ScheduledJob's timetable gives the schedule's own next action times."""
    name = manifest["metadata"]["name"]
    try:
        table = timetable(ScheduledJobSpec.model_validate(manifest["spec"]))
    except (ScheduleError, ValueError) as error:
        raise NotImportable(name, [str(error)]) from None
    expected = list(description.info.next_action_times)[:_CHECKED_TIMES]
    if not expected or manifest["spec"].get("jitter"):
        return  # nothing to compare (no next action, or each moved by jitter)
    after = min(expected) - timedelta(seconds=1)
    mine = table.next_runs(after, count=len(expected))
    if mine != sorted(expected):
        raise NotImportable(name, [
            "the ScheduledJob's times would differ from the schedule's: "
            f"{[t.isoformat() for t in sorted(expected)]} there, "
            f"{[t.isoformat() for t in mine]} here"
        ])  # fmt: skip


def _go_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds and seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
