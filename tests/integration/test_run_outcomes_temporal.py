"""Every run's outcome on the temporal backend, from the workflow executions the schedule
started (issue 10), with the tests' own worker: a workflow that fails, one that runs past
maxRunDuration, one that succeeds; a failing streak and its recovery; and the same
manifest flipped from kubernetes to temporal keeping its monitoring fields."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import (
    ScheduleBackfill,
    ScheduleOverlapPolicy,
    WorkflowExecution,
    WorkflowExecutionDescription,
)

from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    conditions_of,
    eventually,
    parse_time,
    sample,
    scrape,
    sj_status,
)
from support import temporal_scheduledjob as scheduledjob
from temporal_workflows import TASK_QUEUE

pytestmark = pytest.mark.cluster


def execution(temporal: TemporalSide, workflow_id: str) -> WorkflowExecutionDescription:
    return temporal.run(lambda: temporal.client.get_workflow_handle(workflow_id).describe())


def ended_runs(kubectl: Kubectl, name: str, namespace: str, result: str) -> list[dict[str, Any]]:
    return [r for r in sj_status(kubectl, name, namespace).get("recentRuns", [])
            if r["result"] == result and "completionTime" in r]  # fmt: skip


@pytest.mark.timeout(600)
def test_outcomes_durations_and_thresholds_from_workflow_executions(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    temporal.ensure_worker()
    fail = {"type": "SundialFail", "taskQueue": TASK_QUEUE}
    streak = {"failureThreshold": 2, "recoveryThreshold": 2}
    kubectl.apply(scheduledjob("ok", namespace, interval={"every": "3s"}))
    kubectl.apply(scheduledjob("fails", namespace, interval={"every": "3s"}, workflow=fail,
                               monitoring=streak))  # fmt: skip
    kubectl.apply(scheduledjob(
        "too-long", namespace, interval={"every": "1m"},
        workflow={"type": "SundialSleep", "taskQueue": TASK_QUEUE, "args": [12]},
        monitoring={"maxRunDuration": "3s"},
    ))  # fmt: skip
    # The same manifest on kubernetes first (a yearly CronJob, nothing runs), then flipped
    # to its workflow.
    flipped: dict[str, Any] = {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": "flipped", "namespace": namespace},
        "spec": {"backend": "kubernetes", "schedule": "0 0 1 1 *", "job": {"image": "busybox"},
                 "workflow": {"type": "SundialFail", "taskQueue": TASK_QUEUE},
                 "monitoring": {"failureThreshold": 1}},
    }  # fmt: skip
    kubectl.apply(flipped)
    eventually(lambda: sj_status(kubectl, "flipped", namespace).get("backend") == "kubernetes",
               what="flipped on kubernetes")  # fmt: skip
    flipped["spec"]["backend"] = "temporal"
    flipped["spec"]["schedule"] = "* * * * *"
    del flipped["spec"]["job"]  # on temporal, its workflow: exactly one of the two
    kubectl.apply(flipped)

    # A success: durations are the execution's own start and close times.
    ok = eventually(lambda: ended_runs(kubectl, "ok", namespace, "Succeeded"), what="ok ran")[0]
    described = execution(temporal, ok["workflowId"])
    assert described.start_time is not None
    assert described.close_time is not None
    assert parse_time(ok["startTime"]) == described.start_time
    assert parse_time(ok["completionTime"]) == described.close_time
    expected = (described.close_time - described.start_time).total_seconds()
    assert abs(ok["durationSeconds"] - expected) < 0.002, (ok, expected)
    assert ok["runId"] == described.run_id
    assert 0 <= ok["startDelaySeconds"] < 10, ok
    current = sj_status(kubectl, "ok", namespace)
    assert current["lastResult"] in ("Succeeded", "Running")
    assert conditions_of(current)["RunsFailing"]["status"] == "False"

    # Failures: the workflow's failure type and message; two in a row cross the threshold.
    def failing() -> dict[str, Any] | None:
        current = sj_status(kubectl, "fails", namespace)
        condition = conditions_of(current).get("RunsFailing", {})
        return current if condition.get("status") == "True" else None

    current = eventually(failing, what="fails RunsFailing")
    assert current["consecutiveFailures"] >= 2, current
    run = ended_runs(kubectl, "fails", namespace, "Failed")[0]
    assert (run["reason"], run["message"]) == ("PaymentDeclined", "card expired"), run
    assert "PaymentDeclined" in conditions_of(current)["RunsFailing"]["message"]
    # The fix: from now on it succeeds; RunsFailing turns False only after two successes.
    fixed = scheduledjob("fails", namespace, interval={"every": "3s"}, monitoring=streak)
    kubectl.apply(fixed)

    def recovered() -> dict[str, Any] | None:
        current = sj_status(kubectl, "fails", namespace)
        return current if conditions_of(current)["RunsFailing"]["status"] == "False" else None

    current = eventually(recovered, what="fails recovered")
    condition = conditions_of(current)["RunsFailing"]
    assert condition["reason"] == "Recovered", condition
    ends = sorted(parse_time(r["completionTime"]) for r in current["recentRuns"]
                  if r["result"] == "Succeeded")  # fmt: skip
    assert len(ends) >= 2, current["recentRuns"]
    # Not before the second success after the failures had ended.
    last_failure = parse_time(current["lastFailedTime"])
    after_failure = [end for end in ends if end > last_failure]
    assert len(after_failure) >= 2, (current["recentRuns"], last_failure)
    recovered_at = parse_time(condition["lastTransitionTime"])
    assert recovered_at >= after_failure[1].replace(microsecond=0), (condition, after_failure)

    # Too long: TimedOut while the workflow runs, and after it ended, with its duration.
    def overrunning() -> tuple[datetime, dict[str, Any]] | None:
        read_at = datetime.now(UTC)
        current = sj_status(kubectl, "too-long", namespace)
        runs = current.get("recentRuns", [])
        return (read_at, current) if runs and runs[0]["result"] == "TimedOut" else None

    read_at, current = eventually(overrunning, timeout=120, what="too-long TimedOut while running")
    going = current["recentRuns"][0]
    if "completionTime" not in going:
        # Temporal still ran it when that status was read (it may end just after).
        closed = execution(temporal, going["workflowId"]).close_time
        assert closed is None or closed > read_at, (closed, read_at)
        too_long = conditions_of(current)["RunTooLong"]
        assert too_long["reason"] == "RunningTooLong", too_long
    done = eventually(lambda: ended_runs(kubectl, "too-long", namespace, "TimedOut"),
                      timeout=60, what="too-long ended")[0]  # fmt: skip
    described = execution(temporal, done["workflowId"])
    assert described.close_time is not None
    assert described.start_time is not None
    assert abs(done["durationSeconds"] - (described.close_time - described.start_time)
               .total_seconds()) < 0.002  # fmt: skip
    assert done["durationSeconds"] >= 12
    too_long = conditions_of(sj_status(kubectl, "too-long", namespace))["RunTooLong"]
    assert (too_long["status"], too_long["reason"]) == ("True", "LastRunTooLong"), too_long

    # Flipped: the monitoring fields now judge the temporal runs.
    def flipped_failing() -> dict[str, Any] | None:
        current = sj_status(kubectl, "flipped", namespace)
        condition = conditions_of(current).get("RunsFailing", {})
        ok = current.get("backend") == "temporal" and condition.get("status") == "True"
        return current if ok else None

    current = eventually(flipped_failing, timeout=150, what="flipped: temporal runs judged")
    assert current["recentRuns"][0]["workflowId"], current["recentRuns"]

    # Signals: runs by result, and the streak gauge.
    metrics = scrape(operator.metrics_url)
    labels = {"namespace": namespace, "backend": "temporal"}
    assert metrics[sample("sundial_runs_total", name="fails", result="Failed", **labels)] >= 2
    assert metrics[sample("sundial_runs_total", name="fails", result="Succeeded", **labels)] >= 2
    assert metrics[sample("sundial_last_run_duration_seconds", name="too-long", **labels)] > 0
    assert metrics[sample("sundial_run_duration_seconds_count", **labels)] >= 1  # per namespace
    assert metrics[sample("sundial_condition", name="too-long", condition="RunTooLong",
                          **labels)] == 1  # fmt: skip
    assert datetime.now(UTC) - parse_time(current["recentRuns"][0]["scheduledTime"]) < timedelta(
        minutes=3
    )


@pytest.mark.timeout(300)
def test_a_run_temporal_never_follows_is_looked_up_and_its_end_recorded(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """Under Allow, Temporal leaves the action's status RUNNING for good (it does not
    follow those runs): the run is looked up, and its end reaches recentRuns."""
    temporal.ensure_worker()
    kubectl.apply(scheduledjob(
        "allowed", namespace, interval={"every": "1h"}, concurrencyPolicy="Allow",
        workflow={"type": "SundialSleep", "taskQueue": TASK_QUEUE, "args": [2]},
    ))  # fmt: skip
    eventually(lambda: sj_status(kubectl, "allowed", namespace).get("conditions"), what="status")
    handle = temporal.client.get_schedule_handle(f"sundial/{namespace}/allowed")
    temporal.run(handle.trigger)
    eventually(
        lambda: ended_runs(kubectl, "allowed", namespace, "Succeeded"),
        timeout=90,
        what="the run's end in recentRuns",
    )


@pytest.mark.timeout(600)
def test_every_run_of_a_backfill_is_counted_as_temporals_listing_shows(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """A backfill of 15 slots under Allow: the schedule's describe shows only its 10 most
    recent actions, yet every execution Temporal lists for the schedule is counted once
    (runs_total, consecutiveSuccesses), no more, no fewer (issue 25, item 11)."""
    temporal.ensure_worker()
    kubectl.apply(scheduledjob("filled", namespace, schedule="0 * * * *",
                               concurrencyPolicy="Allow"))  # fmt: skip
    eventually(lambda: sj_status(kubectl, "filled", namespace).get("conditions"), what="status")
    schedule_id = f"sundial/{namespace}/filled"
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    backfill = ScheduleBackfill(
        start_at=now - timedelta(hours=15, minutes=30),
        end_at=now - timedelta(minutes=30),
        overlap=ScheduleOverlapPolicy.ALLOW_ALL,
    )
    temporal.run(lambda: temporal.client.get_schedule_handle(schedule_id).backfill(backfill))

    async def closed() -> list[WorkflowExecution]:
        query = f"TemporalScheduledById = '{schedule_id}' AND ExecutionStatus != 'Running'"
        return [execution async for execution in temporal.client.list_workflows(query)]

    # Ground truth: Temporal's own listing of the schedule's executions, all 15 ended.
    def all_closed() -> list[WorkflowExecution] | None:
        runs = temporal.run(closed)
        return runs if len(runs) == 15 else None

    listed = eventually(all_closed, timeout=120, what="Temporal lists the 15 ended executions")
    assert {run.status.name if run.status else None for run in listed} == {"COMPLETED"}
    labels = {"namespace": namespace, "backend": "temporal"}

    def counted() -> tuple[float, int | None]:
        metrics = scrape(operator.metrics_url)
        total = metrics.get(sample("sundial_runs_total", name="filled", result="Succeeded",
                                   **labels), 0.0)  # fmt: skip
        return total, sj_status(kubectl, "filled", namespace).get("consecutiveSuccesses")

    def all_counted() -> bool:
        value = counted()
        assert value == (15.0, 15), f"(runs_total, consecutiveSuccesses) = {value}"
        return True

    eventually(all_counted, timeout=180, what="the 15 runs Temporal lists counted")
    time.sleep(10)  # a few more passes: nothing counted twice
    assert counted() == (15.0, 15)
