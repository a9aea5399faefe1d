"""Missed and skipped runs on the temporal backend, with real faults: the Temporal server is
stopped past the catch-up window, and a workflow outlasts its interval.

Three more jobs, one per spec.catchUp policy, each with one slot inside the outage that
is more than 15 s late when Temporal is back (issue 30): None does not run it, Latest and
All run it once, late, by Sundial's backfill; judged by Temporal's own listing of the
workflows each schedule started, not by Sundial's status."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import ScheduleInfo

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    eventually,
    sample,
    schedule_executions,
    scrape,
)
from temporal_workflows import TASK_QUEUE

pytestmark = pytest.mark.cluster


def scheduledjob(name: str, namespace: str, workflow: str, args: list[Any],
                 **spec: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backend": "temporal",
            "interval": {"every": "2s"},
            "workflow": {"type": workflow, "taskQueue": TASK_QUEUE, "args": args},
            **spec,
        },
    }


def status(kubectl: Kubectl, name: str, namespace: str) -> dict[str, Any]:
    sj = kubectl.get("scheduledjob", name, namespace)
    assert sj is not None
    result: dict[str, Any] = sj.get("status", {})
    return result


def describe_info(temporal: TemporalSide, namespace: str, name: str) -> ScheduleInfo:
    async def call() -> ScheduleInfo:
        handle = temporal.client.get_schedule_handle(f"sundial/{namespace}/{name}")
        return (await handle.describe()).info

    return temporal.run(call)


def reasons(kubectl: Kubectl, name: str, namespace: str) -> set[str]:
    return {r["reason"] for r in status(kubectl, name, namespace).get("recentMissedRuns", [])}


def test_temporal_misses_and_skips_are_counted_and_healthy_jobs_are_not(
    kubectl: Kubectl,
    operator: OperatorProcess,
    temporal: TemporalSide,
    stack: LocalStack,
    namespace: str,
) -> None:
    temporal.ensure_worker()
    # The catch-up jobs' slot (one every three minutes) falls at a moment chosen now: the outage is
    # started 12 s before it.
    late_slot = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=50)
    # Their next slot is far off: Latest never runs a slot older than one that ran, and
    # Sundial may look a minute or more after Temporal is back (its breaker and its retry
    # back off over the outage), so a next slot within that minute would make Latest's
    # answer "none" on a slow machine.
    every = int(CATCH_UP_EVERY.total_seconds())
    for policy in CATCH_UP:
        kubectl.apply(scheduledjob(
            f"catchup-{policy.lower()}", namespace, "SundialTick", ["late"],
            interval={"every": f"{every}s", "offset": f"{int(late_slot.timestamp()) % every}s"},
            catchUp={"policy": policy},
        ))  # fmt: skip
    kubectl.apply(scheduledjob("healthy", namespace, "SundialTick", ["ok"]))
    kubectl.apply(scheduledjob("overlap", namespace, "SundialSleep", [7],
                               concurrencyPolicy="Forbid"))  # fmt: skip
    kubectl.apply(scheduledjob("catchup", namespace, "SundialTick", ["late"],
                               startingDeadlineSeconds=10))  # fmt: skip

    # A run that outlasts its interval: SKIP drops the slots that fall while it runs.
    eventually(
        lambda: status(kubectl, "overlap", namespace).get("skippedRuns", 0) >= 2,
        timeout=60,
        what="overlap: slots skipped while the workflow sleeps",
    )
    assert reasons(kubectl, "overlap", namespace) == {"OverlapSkipped"}
    assert status(kubectl, "overlap", namespace).get("missedRuns", 0) == 0

    healthy = eventually(
        lambda: (s := status(kubectl, "healthy", namespace)).get("lastScheduleTime") and s,
        what="healthy runs",
    )
    assert healthy.get("missedRuns", 0) == 0, healthy
    assert healthy.get("skippedRuns", 0) == 0, healthy
    conditions = {c["type"]: c for c in healthy["conditions"]}
    assert conditions["RunsMissed"]["status"] == "False"

    for policy in CATCH_UP:
        eventually(lambda p=policy: status(kubectl, f"catchup-{p.lower()}", namespace).get(
            "backendRef"), what=f"catchup-{policy.lower()} in step")  # fmt: skip
    if datetime.now(UTC) > late_slot - timedelta(seconds=12):
        late_slot += CATCH_UP_EVERY  # a slow start: the next one
    time.sleep(max((late_slot - timedelta(seconds=12) - datetime.now(UTC)).total_seconds(), 0))

    # Temporal down for longer than the 10 s catch-up window, and across the catch-up
    # jobs' slot, which is more than catchUp's 15 s late when it is back.
    outage_began = datetime.now(UTC)
    stack.stop_temporal()
    try:
        time.sleep(35)
    finally:
        stack.start_temporal()
    outage_ended = datetime.now(UTC)
    temporal.ensure_worker()
    catchup = eventually(
        lambda: (s := status(kubectl, "catchup", namespace)).get("missedRuns", 0) >= 1 and s,
        timeout=90,
        what="catchup: CatchupWindowExceeded after the outage",
    )
    assert "CatchupWindowExceeded" in reasons(kubectl, "catchup", namespace)
    conditions = {c["type"]: c for c in catchup["conditions"]}
    # Set by the miss; with a 2 s interval the next on-time run may already have cleared
    # it, and RanOnTime is only ever reached from True.
    runs_missed = conditions["RunsMissed"]
    assert (runs_missed["status"], runs_missed["reason"]) in (
        ("True", "CatchupWindowExceeded"),
        ("False", "RanOnTime"),
    ), runs_missed
    assert conditions["Ready"]["status"] == "True"
    events = kubectl.events(namespace, involvedObject_name="catchup", reason="RunMissed")
    assert any("CatchupWindowExceeded" in e["message"] for e in events)

    # The slot times named are the schedule's own (every 2 s from the epoch); the ones missed
    # for the catch-up window lie in the outage. The first run after the restart can wait for
    # the worker (its poll backs off while the server is down), and Temporal then skips the
    # next slot for overlap (catchup keeps the default Forbid): a true skip, after the outage.
    for run in status(kubectl, "catchup", namespace)["recentMissedRuns"]:
        slot = datetime.fromisoformat(run["scheduledTime"])
        assert slot.timestamp() % 2 == 0, run
        assert run["reason"] in ("CatchupWindowExceeded", "OverlapSkipped"), run
        if run["reason"] == "CatchupWindowExceeded":
            assert outage_began - timedelta(seconds=30) <= slot <= outage_ended, run

    # Sundial's totals are Temporal's own counters, and so is /metrics. The overlap one is
    # suspended first, so that its counter stops moving.
    kubectl.apply(scheduledjob("overlap", namespace, "SundialSleep", [7],
                               concurrencyPolicy="Forbid", suspend=True))  # fmt: skip
    labels = {"namespace": namespace, "backend": "temporal"}

    def totals_are_temporals() -> bool:
        catchup_info = describe_info(temporal, namespace, "catchup")
        overlap_info = describe_info(temporal, namespace, "overlap")
        missed = catchup_info.num_actions_missed_catchup_window
        skipped = overlap_info.num_actions_skipped_overlap
        assert status(kubectl, "catchup", namespace)["missedRuns"] == missed
        assert status(kubectl, "overlap", namespace)["skippedRuns"] == skipped
        metrics = scrape(operator.metrics_url)
        assert metrics[sample("sundial_missed_runs_total", name="catchup",
                              reason="CatchupWindowExceeded", **labels)] == missed  # fmt: skip
        assert metrics[sample("sundial_skipped_runs_total", name="overlap",
                              reason="OverlapSkipped", **labels)] == skipped  # fmt: skip
        return True

    eventually(totals_are_temporals, timeout=60, what="status and /metrics equal Temporal's counts")
    caught_up_as_the_policies_say(kubectl, temporal, namespace, late_slot)


CATCH_UP = ("None", "Latest", "All")
CATCH_UP_EVERY = timedelta(minutes=3)


def caught_up_as_the_policies_say(
    kubectl: Kubectl, temporal: TemporalSide, namespace: str, slot: datetime
) -> None:
    """The outage's slot: by Temporal's listing, not run under None (missed, with Temporal's
    reason), run once under Latest and All (late, by a backfill Sundial asked for)."""
    stamp = slot.isoformat().replace("+00:00", "Z")
    for policy in CATCH_UP:
        name = f"catchup-{policy.lower()}"
        schedule_id = status(kubectl, name, namespace)["backendRef"]["scheduleId"]
        if policy == "None":
            current = eventually(
                lambda n=name: (s := status(kubectl, n, namespace)).get("missedRuns") and s,
                timeout=90, what=f"{name}: the slot missed",
            )  # fmt: skip
            assert [(r["scheduledTime"], r["reason"]) for r in current["recentMissedRuns"]] == [
                (stamp, "CatchupWindowExceeded")
            ], current
            assert not [
                e for e in schedule_executions(temporal, schedule_id) if e.id.endswith(stamp)
            ]
            continue
        runs = eventually(
            lambda s=schedule_id: [
                e for e in schedule_executions(temporal, s) if e.id.endswith(stamp)
            ],
            timeout=150, what=f"{name}: the slot run late",
        )  # fmt: skip
        assert len(runs) == 1, [(e.id, e.run_id) for e in runs]
        assert runs[0].start_time > slot + timedelta(seconds=15), runs[0].start_time
        current = status(kubectl, name, namespace)
        assert not current.get("missedRuns"), (
            current.get("recentMissedRuns"),
            current.get("requests"),
            current.get("recentRuns"),
        )
        catch_ups = [r for r in current.get("requests", []) if r["kind"] == "CatchUp"]
        assert [(r["start"], r["end"], r["outcome"]) for r in catch_ups] == [
            (stamp, stamp, "Done")
        ], catch_ups
