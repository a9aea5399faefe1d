"""Missed and skipped runs on the kubernetes backend, caused by real faults on the real
stack: the controller manager and the operator are stopped and started.

One timeline serves every case, so the waits run concurrently: about eight minutes of
minute-aligned slots instead of eight minutes per case.

    M1            every job runs once on the real node (busybox `exit 0`; `stuck` sleeps)
    M2            the controller is down from M2-5s to M2+25s: every job runs late
    M3            all run; `dropped` and `deadline` are created before it
    M4 M5 M6      the controller and the operator are down; the operator comes back at
                  M6+20s, the controller at M6+40s and starts `dropped`'s M6 slot
    M7            checked at M7+20s
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    eventually,
    faulted_operator,
    in_shard,
    kubernetes_scheduledjob,
    no_retry_job,
    owned_jobs,
    parse_time,
    ready,
    sample,
    scrape,
    sj_status,
)

pytestmark = pytest.mark.cluster

NAMESPACE = "missed-runs-k8s"
STUCK = "stuck"


def scheduledjob(name: str, image: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("schedule", "* * * * *")
    # Every job exits at once, but `stuck`'s, which outlives the whole timeline.
    command = ["sleep", "3600"] if name == STUCK else ["sh", "-c", "exit 0"]
    spec.setdefault("job", {"image": image, "command": command, "ttlSecondsAfterFinished": 3600})
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def wait_until(moment: datetime) -> None:
    delay = (moment - datetime.now(UTC)).total_seconds()
    if delay > 0:
        time.sleep(delay)


def next_minute(after: datetime) -> datetime:
    return after.replace(second=0, microsecond=0) + timedelta(minutes=1)


def status(kubectl: Kubectl, name: str) -> dict[str, Any]:
    sj = kubectl.get("scheduledjob", name, NAMESPACE)
    assert sj is not None, name
    result: dict[str, Any] = sj.get("status", {})
    return result


def misses(kubectl: Kubectl, name: str) -> list[tuple[str, str]]:
    return [(r["scheduledTime"], r["reason"]) for r in status(kubectl, name).get(
        "recentMissedRuns", [])]  # fmt: skip


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.mark.timeout(900)  # one eight-minute timeline of real slots
def test_faults_on_the_kubernetes_backend_are_counted_once_with_their_reason(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess
) -> None:
    busybox = stack.images["busybox"]

    def sj(name: str, **spec: Any) -> dict[str, Any]:
        return scheduledjob(name, busybox, **spec)

    kubectl.run("create", "namespace", NAMESPACE)
    now = datetime.now(UTC)
    m1 = next_minute(now if now.second < 40 else now + timedelta(minutes=1))
    m2, m3, m4, m5, m6, m7 = (m1 + timedelta(minutes=i) for i in range(1, 7))

    kubectl.apply(sj("healthy"))
    kubectl.apply(sj("late", startingDeadlineSeconds=60))
    kubectl.apply(sj(STUCK, concurrencyPolicy="Forbid"))
    kubectl.apply(sj("paused", suspend=True))

    # M2: the controller is down across the slot; it starts it late, within deadlines.
    wait_until(m2 - timedelta(seconds=5))
    stack.stop_controller_manager()
    wait_until(m2 + timedelta(seconds=25))
    stack.start_controller_manager()
    wait_until(m2 + timedelta(seconds=30))
    kubectl.apply(sj("dropped"))
    kubectl.apply(sj("deadline", startingDeadlineSeconds=15))

    # By M3+20s everything before M3 is certain: healthy and late missed nothing.
    wait_until(m3 + timedelta(seconds=20))
    for name in ("healthy", "late"):
        current = status(kubectl, name)
        assert current.get("missedRuns", 0) == 0, (name, current)
        assert current.get("skippedRuns", 0) == 0, (name, current)
        assert current["lastScheduleTime"] == iso(m3), (name, current)
        conditions = {c["type"]: c for c in current["conditions"]}
        assert conditions["RunsMissed"]["status"] == "False", (name, conditions)
    stuck = eventually(lambda: status(kubectl, STUCK).get("skippedRuns"), timeout=30,
                       what="stuck: a slot skipped while its Job runs")  # fmt: skip
    assert stuck >= 1
    assert (iso(m2), "OverlapSkipped") in misses(kubectl, STUCK)

    # M4-M6: the controller and the operator are down.
    wait_until(m3 + timedelta(seconds=25))
    operator.stop()
    stack.stop_controller_manager()
    try:
        wait_until(m6 + timedelta(seconds=20))
        operator.start()
        # The operator judges what passed while it was away.
        eventually(
            lambda: (iso(m5), "ControllerDown") in misses(kubectl, "dropped"),
            timeout=60,
            what="dropped: M4 and M5 found after the operator's restart",
        )
        eventually(
            lambda: (iso(m6), "DeadlineExceeded") in misses(kubectl, "deadline"),
            timeout=60,
            what="deadline: M4-M6 found after the operator's restart",
        )
    finally:
        wait_until(m6 + timedelta(seconds=40))
        stack.start_controller_manager()

    # The controller starts only `dropped`'s most recent slot, M6; M7 runs on time.
    wait_until(m7 + timedelta(seconds=20))
    dropped = status(kubectl, "dropped")
    assert dropped["missedRuns"] == 2, dropped
    assert misses(kubectl, "dropped") == [(iso(m4), "ControllerDown"),
                                          (iso(m5), "ControllerDown")]  # fmt: skip
    assert dropped["lastMissedTime"] == iso(m5)
    conditions = {c["type"]: c for c in dropped["conditions"]}
    assert conditions["RunsMissed"]["status"] == "False", "M7 ran on time"
    assert conditions["Ready"]["status"] == "True", "a miss does not make it unready"

    deadline = status(kubectl, "deadline")
    assert deadline["missedRuns"] == 3, deadline
    assert misses(kubectl, "deadline") == [(iso(m), "DeadlineExceeded") for m in (m4, m5, m6)]

    paused = status(kubectl, "paused")
    assert paused.get("missedRuns", 0) == 0, paused
    assert paused.get("skippedRuns", 0) == 0, paused

    stuck_status = status(kubectl, STUCK)
    assert stuck_status.get("missedRuns", 0) == 0, stuck_status
    assert stuck_status["skippedRuns"] >= 4, stuck_status

    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in kubectl.events(NAMESPACE)}
    assert ("dropped", "RunMissed") in reasons
    assert (STUCK, "RunSkipped") in reasons

    metrics = scrape(operator.metrics_url)
    labels = {"namespace": NAMESPACE, "backend": "kubernetes"}
    assert metrics[sample("sundial_missed_runs_total", name="dropped", reason="ControllerDown",
                          **labels)] == 2  # fmt: skip
    assert metrics[sample("sundial_missed_runs_total", name="deadline",
                          reason="DeadlineExceeded", **labels)] == 3  # fmt: skip
    next_run = metrics[sample("sundial_next_run_timestamp_seconds", name="dropped", **labels)]
    assert next_run > datetime.now(UTC).timestamp()
    assert metrics[sample("sundial_reconciles_total", result="ok")] > 0


# ---- an outage the operator did not watch (issue 25, defect 16) ---------------------------


def controllers_reading(down: datetime, up: datetime, slots: list[datetime],
                        deadline: float | None) -> dict[datetime, str]:  # fmt: skip
    """Which slots the CronJob controller dropped, by its own rules (scheduling-semantics.md),
    read from the outage alone: back at `up` it starts only the most recent slot it missed,
    if within startingDeadlineSeconds; each earlier one is dropped, DeadlineExceeded if its
    deadline ran out before the next slot, else ControllerDown."""
    missed = [slot for slot in slots if down < slot <= up]
    limit = timedelta(seconds=deadline) if deadline is not None else None
    if missed and (limit is None or up <= missed[-1] + limit):
        missed = missed[:-1]
    return {
        slot: "DeadlineExceeded"
        if limit is not None and slot + limit < slots[slots.index(slot) + 1]
        else "ControllerDown"
        for slot in missed
    }


@pytest.mark.timeout(420)  # about four minutes of real slots
def test_an_outage_the_operator_did_not_watch_is_missed_not_unknown(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str
) -> None:
    """The controller manager is killed across two slots (M1, M2) and the operator during
    the outage; the controller comes back first and starts only M2, then the operator.
    M1, which no Job was ever made for, is reported missed with the controller's reason,
    as the apiserver's Jobs and the controller's Events show, not Unknown; M0 and M2 ran
    and are not reported. (Before, M1 was RunUnverified: no count, no RunsMissed, no alert.)"""
    shard = "unwatched-outage"
    operator = faulted_operator(stack, "unwatched-outage", shard, user="sundial-unwatched")
    jobs = {"dropped": None, "deadline": 50}  # name: startingDeadlineSeconds
    now = datetime.now(UTC)
    m0 = next_minute(now if now.second < 30 else now + timedelta(minutes=1))
    m1, m2, m3 = (m0 + timedelta(minutes=i) for i in (1, 2, 3))
    operator.start()
    killed = False
    try:
        for name, deadline in jobs.items():
            # Allow: a Job the controller starts while the last one runs (or, with no node,
            # stays pending) is never skipped. Five Jobs kept: with a node they succeed, and
            # the default history (1) would delete M0's, the ground truth checked at the end.
            extra: dict[str, Any] = {"concurrencyPolicy": "Allow", "successfulRunsHistoryLimit": 5}
            if deadline is not None:
                extra["startingDeadlineSeconds"] = deadline
            job = no_retry_job(stack.images.get("busybox", "busybox"), "exit 0")
            kubectl.apply(in_shard(kubernetes_scheduledjob(name, namespace, job, **extra), shard))
        for name in jobs:
            eventually(lambda name=name: ready(kubectl, name, namespace), timeout=30,
                       what=f"{name} Ready before M0")  # fmt: skip

        wait_until(m1 - timedelta(seconds=10))
        stack.faults.kill("kube-controller-manager")
        down, killed = datetime.now(UTC), True
        wait_until(m1 + timedelta(seconds=20))
        operator.signal(signal.SIGKILL)  # before M1 is certain (M2 + 10 s)
        wait_until(m2 + timedelta(seconds=5))
        stack.faults.restart("kube-controller-manager")
        up, killed = datetime.now(UTC), False

        def slots_run(name: str) -> set[datetime]:
            return {
                parse_time(job["metadata"]["annotations"][
                    "batch.kubernetes.io/cronjob-scheduled-timestamp"])
                for job in owned_jobs(kubectl, namespace, name)
            }  # fmt: skip

        # The controller starts M2 late, within both deadlines; then the operator is back.
        for name in jobs:
            eventually(lambda name=name: m2 in slots_run(name), timeout=40,
                       what=f"{name}: the controller starts M2 on its return")  # fmt: skip
        operator.start()
        restarted = datetime.now(UTC)

        expected = {name: controllers_reading(down, up, [m0, m1, m2, m3], deadline)
                    for name, deadline in jobs.items()}  # fmt: skip
        assert expected == {"dropped": {m1: "ControllerDown"},
                            "deadline": {m1: "DeadlineExceeded"}}  # fmt: skip
        for name in jobs:
            eventually(
                lambda name=name: (iso(m1), expected[name][m1]) in misses_in(kubectl, name,
                                                                             namespace),
                timeout=60, what=f"{name}: M1 reported {expected[name][m1]} after the restart",
            )  # fmt: skip
        took = (datetime.now(UTC) - restarted).total_seconds()

        # Ground truth: the Jobs on the apiserver and the controller's own Events.
        for name in jobs:
            ran = slots_run(name)
            assert ran >= {m0, m2}, (name, sorted(ran))
            assert m1 not in ran, (name, sorted(ran))
            created = {e["message"] for e in kubectl.events(namespace, involvedObject_name=name)
                       if e["involvedObject"]["kind"] == "CronJob"
                       and e["reason"] == "SuccessfulCreate"}  # fmt: skip
            assert f"Created job {name}-{int(m1.timestamp()) // 60}" not in created, created
            current = sj_status(kubectl, name, namespace)
            reported = misses_in(kubectl, name, namespace)
            assert reported == [(iso(m1), expected[name][m1])], (name, current)
            assert current["missedRuns"] == 1, (name, current)
            assert current["lastMissedTime"] == iso(m1), (name, current)
            assert all(time not in {iso(m0), iso(m2)} for time, _ in reported), reported
        reasons = {(e["involvedObject"]["name"], e["reason"])
                   for e in kubectl.events(namespace)
                   if e["involvedObject"]["kind"] == "ScheduledJob"}  # fmt: skip
        assert {("dropped", "RunMissed"), ("deadline", "RunMissed")} <= reasons, reasons
        assert not {reason for _, reason in reasons if reason == "RunUnverified"}, reasons
        metrics = scrape(operator.metrics_url)
        labels = {"namespace": namespace, "backend": "kubernetes"}
        for name in jobs:
            assert metrics[sample("sundial_missed_runs_total", name=name,
                                  reason=expected[name][m1], **labels)] == 1  # fmt: skip
        print(
            f"M1 reported {took:.1f}s after the operator's restart "
            f"(controller down {down:%H:%M:%S}-{up:%H:%M:%S})"
        )
    finally:
        if killed:
            stack.faults.restart("kube-controller-manager")
        operator.stop()


def misses_in(kubectl: Kubectl, name: str, namespace: str) -> list[tuple[str, str]]:
    return [(r["scheduledTime"], r["reason"])
            for r in sj_status(kubectl, name, namespace).get("recentMissedRuns", [])]  # fmt: skip
