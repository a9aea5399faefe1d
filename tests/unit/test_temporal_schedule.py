"""ScheduledJob -> Temporal Schedule mapping, field by field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import (
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
)

from sundial.api.models import ScheduledJob
from sundial.backends.temporal.schedule import OVERLAP, run_now_overlap, temporal_schedule
from sundial.planning.temporal_schedule import (
    DEFAULT_CATCHUP_WINDOW,
    RUN_NOW_WAITS,
    SPEC_HASH_MEMO_KEY,
    SUSPEND_NOTE,
    schedule_id,
)


def scheduledjob(**spec: Any) -> ScheduledJob:
    spec.setdefault("backend", "temporal")
    if "interval" not in spec:
        spec.setdefault("schedule", "*/5 * * * *")
    spec.setdefault("workflow", {"type": "Billing", "taskQueue": "billing"})
    return ScheduledJob.model_validate(
        {"metadata": {"name": "invoices", "namespace": "shop"}, "spec": spec}
    )


def test_schedule_id_is_prefix_namespace_name() -> None:
    identity, _, _ = temporal_schedule(scheduledjob(), "prod-eu/")
    assert identity == "prod-eu/shop/invoices" == schedule_id("prod-eu/", "shop", "invoices")


def test_cron_time_zone_and_defaults() -> None:
    _, schedule, spec_hash = temporal_schedule(scheduledjob(), "sundial/")
    assert list(schedule.spec.cron_expressions) == ["*/5 * * * *"]
    assert schedule.spec.time_zone_name == "UTC"
    assert schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
    assert schedule.policy.catchup_window == DEFAULT_CATCHUP_WINDOW
    assert schedule.state.paused is False
    action = schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert (action.workflow, action.task_queue, action.id) == (
        "Billing",
        "billing",
        "sundial/shop/invoices",
    )
    assert action.memo == {SPEC_HASH_MEMO_KEY: spec_hash}


@pytest.mark.parametrize(
    ("policy", "overlap"),
    [
        ("Allow", ScheduleOverlapPolicy.ALLOW_ALL),
        ("Forbid", ScheduleOverlapPolicy.SKIP),
        ("Replace", ScheduleOverlapPolicy.TERMINATE_OTHER),
        ("BufferOne", ScheduleOverlapPolicy.BUFFER_ONE),
        ("BufferAll", ScheduleOverlapPolicy.BUFFER_ALL),
        ("CancelOther", ScheduleOverlapPolicy.CANCEL_OTHER),
    ],
)
def test_concurrency_policy_maps_to_overlap(policy: str, overlap: ScheduleOverlapPolicy) -> None:
    _, schedule, _ = temporal_schedule(scheduledjob(concurrencyPolicy=policy), "p/")
    assert schedule.policy.overlap == overlap


@pytest.mark.parametrize("policy", sorted(OVERLAP))
def test_a_run_now_never_ends_a_running_run(policy: str) -> None:
    """Issue 25.4: the trigger never cancels or terminates; where the schedule's own
    policy would skip the run now or end the running run, the run now waits in Sundial."""
    ends = {ScheduleOverlapPolicy.CANCEL_OTHER, ScheduleOverlapPolicy.TERMINATE_OTHER}
    assert run_now_overlap(policy) not in ends  # type: ignore[arg-type]
    skips_or_ends = ends | {ScheduleOverlapPolicy.SKIP}
    assert (OVERLAP[policy] in skips_or_ends) == (policy in RUN_NOW_WAITS)  # type: ignore[index]


def test_every_temporal_field_is_mapped() -> None:
    _, schedule, _ = temporal_schedule(
        scheduledjob(
            interval={"every": "90s", "offset": "15s"},
            timeZone="Europe/Berlin",
            jitter="5s",
            startTime="2030-01-01T00:00:00Z",
            endTime="2031-01-01T00:00:00Z",
            startingDeadlineSeconds=45,
            suspend=True,
            workflow={
                "type": "Billing",
                "taskQueue": "billing",
                "id": "invoice-run",
                "args": [{"dryRun": True}, 3],
                "executionTimeout": "1h",
                "runTimeout": "30m",
                "taskTimeout": "10s",
                "retryPolicy": {"initialInterval": "2s", "backoffCoefficient": 3,
                                "maximumInterval": "1m", "maximumAttempts": 4,
                                "nonRetryableErrorTypes": ["Fatal"]},
                "memo": {"team": "billing"},
            },
        ),
        "p/",
    )  # fmt: skip
    spec = schedule.spec
    assert list(spec.intervals) == [
        ScheduleIntervalSpec(every=timedelta(seconds=90), offset=timedelta(seconds=15))
    ]
    assert not spec.cron_expressions
    assert spec.time_zone_name == "Europe/Berlin"
    assert spec.jitter == timedelta(seconds=5)
    assert spec.start_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert spec.end_at == datetime(2031, 1, 1, tzinfo=UTC)
    assert schedule.policy.catchup_window == timedelta(seconds=45)
    assert (schedule.state.paused, schedule.state.note) == (True, SUSPEND_NOTE)
    action = schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.id == "invoice-run"
    assert list(action.args) == [{"dryRun": True}, 3]
    assert action.execution_timeout == timedelta(hours=1)
    assert action.run_timeout == timedelta(minutes=30)
    assert action.task_timeout == timedelta(seconds=10)
    assert action.retry_policy is not None
    assert action.retry_policy.initial_interval == timedelta(seconds=2)
    assert action.retry_policy.backoff_coefficient == 3
    assert action.retry_policy.maximum_interval == timedelta(minutes=1)
    assert action.retry_policy.maximum_attempts == 4
    assert list(action.retry_policy.non_retryable_error_types or []) == ["Fatal"]
    assert action.memo is not None
    assert action.memo["team"] == "billing"


def test_spec_hash_follows_the_spec() -> None:
    _, _, first = temporal_schedule(scheduledjob(), "p/")
    _, _, same = temporal_schedule(scheduledjob(), "p/")
    _, _, suspended = temporal_schedule(scheduledjob(suspend=True), "p/")
    _, _, other_prefix = temporal_schedule(scheduledjob(), "q/")
    assert first == same
    assert len({first, suspended, other_prefix}) == 3
