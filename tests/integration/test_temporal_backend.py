"""The temporal backend end to end: real Temporal dev server, real Kubernetes, a real worker."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import (
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    consistently,
    eventually,
    ready,
    ready_condition,
    tamper_interval,
    temporal_connection,
)
from support import (
    temporal_scheduledjob as scheduledjob,
)
from temporal_workflows import TASK_QUEUE

pytestmark = pytest.mark.cluster

PREFIX = "sundial/"


def schedule_id(namespace: str, name: str) -> str:
    return f"{PREFIX}{namespace}/{name}"


def describe(temporal: TemporalSide, namespace: str, name: str) -> ScheduleDescription | None:
    async def call() -> ScheduleDescription | None:
        try:
            return await temporal.client.get_schedule_handle(
                schedule_id(namespace, name)
            ).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    return temporal.run(call)


def test_apply_creates_the_schedule_and_the_workflow_runs(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    temporal.ensure_worker()
    kubectl.apply(
        scheduledjob(
            "ticker",
            namespace,
            startingDeadlineSeconds=30,
            jitter="100ms",
            workflow={
                "type": "SundialTick",
                "taskQueue": TASK_QUEUE,
                "args": ["hello"],
                "executionTimeout": "1m",
                "retryPolicy": {"maximumAttempts": 2},
                "memo": {"team": "billing"},
            },
        )
    )
    sj = eventually(lambda: ready(kubectl, "ticker", namespace), what="Ready")
    assert sj["metadata"]["finalizers"] == ["sundial.dev/temporal-schedule"]
    status = sj["status"]
    assert status["backend"] == "temporal"
    assert status["backendRef"] == {
        "kind": "TemporalSchedule",
        "namespace": "default",
        "scheduleId": schedule_id(namespace, "ticker"),
        "address": temporal.address,
        "connection": {"kind": "ClusterTemporalConnection", "name": "default"},
    }

    description = describe(temporal, namespace, "ticker")
    assert description is not None
    schedule = description.schedule
    assert list(schedule.spec.intervals) == [ScheduleIntervalSpec(every=timedelta(seconds=2))]
    assert schedule.spec.time_zone_name == "UTC"
    assert schedule.spec.jitter == timedelta(milliseconds=100)
    assert schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
    assert schedule.policy.catchup_window == timedelta(seconds=30)
    action = schedule.action
    assert action.workflow == "SundialTick"  # type: ignore[attr-defined]
    assert action.task_queue == TASK_QUEUE  # type: ignore[attr-defined]
    assert action.execution_timeout == timedelta(minutes=1)  # type: ignore[attr-defined]
    assert action.retry_policy.maximum_attempts == 2  # type: ignore[attr-defined]

    # The workflow really runs, on schedule, by the test's own worker.
    def two_runs_finished() -> list[str]:
        info = describe(temporal, namespace, "ticker")
        assert info is not None
        ids = [a.action.workflow_id for a in info.info.recent_actions]  # type: ignore[attr-defined]
        assert len(ids) >= 2, ids
        results = [
            temporal.run(
                lambda i=i: temporal.client.get_workflow_handle(i).result(),  # type: ignore[misc]
                timeout=30,
            )
            for i in ids[:2]
        ]
        return results

    results = eventually(two_runs_finished, timeout=60, what="two scheduled runs finished")
    assert all(r.startswith("hello from ") for r in results)

    sj = eventually(
        lambda: (
            (s := kubectl.get("scheduledjob", "ticker", namespace))
            and s["status"].get("lastScheduleTime")
            and s
        ),
        what="lastScheduleTime",
    )
    assert len(sj["status"]["nextRunTimes"]) == 3


def test_update_suspend_and_resume_are_followed(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    manifest = scheduledjob("follow", namespace)
    kubectl.apply(manifest)
    eventually(lambda: ready(kubectl, "follow", namespace), what="Ready")

    updated = copy.deepcopy(manifest)
    updated["spec"].pop("interval")
    updated["spec"].update(
        schedule="*/10 * * * *", timeZone="Europe/Berlin", concurrencyPolicy="BufferAll"
    )
    kubectl.apply(updated)

    def followed() -> bool:
        description = describe(temporal, namespace, "follow")
        assert description is not None
        spec = description.schedule.spec
        assert spec.time_zone_name == "Europe/Berlin"
        assert not spec.intervals
        assert spec.calendars or spec.cron_expressions
        assert description.schedule.policy.overlap == ScheduleOverlapPolicy.BUFFER_ALL
        return True

    eventually(followed, what="schedule follows the update")
    sj = eventually(lambda: ready(kubectl, "follow", namespace), what="Ready after update")
    assert all(t.endswith(("0:00Z", "0:00+00:00")) for t in sj["status"]["nextRunTimes"])

    updated["spec"]["suspend"] = True
    kubectl.apply(updated)
    eventually(
        lambda: (
            (d := describe(temporal, namespace, "follow")) is not None
            and d.schedule.state.paused
            and "Sundial" in (d.schedule.state.note or "")
        ),
        what="paused",
    )
    eventually(
        lambda: (s := ready(kubectl, "follow", namespace)) and s["status"]["nextRunTimes"] == [],
        what="no next runs while suspended",
    )
    updated["spec"]["suspend"] = False
    kubectl.apply(updated)
    eventually(
        lambda: (
            (d := describe(temporal, namespace, "follow")) is not None
            and not d.schedule.state.paused
        ),
        what="unpaused",
    )


def test_out_of_band_update_and_delete_are_restored(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    kubectl.apply(scheduledjob("drift", namespace, interval={"every": "1m"}))
    eventually(lambda: ready(kubectl, "drift", namespace), what="Ready")
    handle = temporal.client.get_schedule_handle(schedule_id(namespace, "drift"))

    temporal.run(lambda: handle.update(tamper_interval))
    eventually(
        lambda: (
            (d := describe(temporal, namespace, "drift")) is not None
            and list(d.schedule.spec.intervals)
            == [ScheduleIntervalSpec(every=timedelta(minutes=1))]
        ),
        timeout=60,
        what="out-of-band update undone",
    )

    temporal.run(handle.delete)
    eventually(
        lambda: describe(temporal, namespace, "drift") is not None,
        timeout=60,
        what="deleted schedule recreated",
    )


def test_a_pause_by_hand_is_reported_not_undone(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    kubectl.apply(scheduledjob("paused", namespace, interval={"every": "1m"}))
    eventually(lambda: ready(kubectl, "paused", namespace), what="Ready")
    handle = temporal.client.get_schedule_handle(schedule_id(namespace, "paused"))
    temporal.run(lambda: handle.pause(note="paused by the on-call"))
    condition = eventually(
        lambda: (
            (c := ready_condition(kubectl, "paused", namespace)).get("reason") == "PausedInTemporal"
            and c
        ),
        what="pause reported",
    )
    assert "paused by the on-call" in condition["message"]
    consistently(
        lambda: (
            (d := describe(temporal, namespace, "paused")) is not None and d.schedule.state.paused
        ),
        duration=12,
    )
    # Issue 14.17: the advice in the message works. suspend true takes the pause over...
    kubectl.run("patch", "scheduledjob", "paused", "-n", namespace, "--type=merge",
                "-p", '{"spec": {"suspend": true}}')  # fmt: skip
    eventually(lambda: ready(kubectl, "paused", namespace), what="Ready while suspended")
    # ...and false lifts it.
    kubectl.run("patch", "scheduledjob", "paused", "-n", namespace, "--type=merge",
                "-p", '{"spec": {"suspend": false}}')  # fmt: skip
    eventually(
        lambda: (
            (d := describe(temporal, namespace, "paused")) is not None
            and not d.schedule.state.paused
        ),
        what="unpaused after suspend true -> false",
    )
    eventually(
        lambda: ready_condition(kubectl, "paused", namespace).get("reason") == "Reconciled",
        what="Ready Reconciled",
    )


def test_delete_removes_the_schedule_and_the_finalizer(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    kubectl.apply(scheduledjob("doomed", namespace, interval={"every": "1m"}))
    eventually(lambda: ready(kubectl, "doomed", namespace), what="Ready")
    kubectl.run("delete", "scheduledjob", "doomed", "-n", namespace, "--wait=false")
    eventually(
        lambda: kubectl.get("scheduledjob", "doomed", namespace) is None, what="ScheduledJob gone"
    )
    assert describe(temporal, namespace, "doomed") is None


FINALIZER = "sundial.dev/temporal-schedule"


def finalizers(kubectl: Kubectl, name: str, namespace: str) -> list[str]:
    sj = kubectl.get("scheduledjob", name, namespace)
    assert sj is not None, f"no ScheduledJob {namespace}/{name}"
    found: list[str] = sj["metadata"].get("finalizers", [])
    return found


def listed(temporal: TemporalSide, namespace: str, name: str) -> bool:
    """Whether Temporal's listing shows the schedule (eventually consistent)."""

    async def call() -> bool:
        wanted = schedule_id(namespace, name)
        return any([s.id async for s in await temporal.client.list_schedules() if s.id == wanted])

    return temporal.run(call)


def test_a_removed_finalizer_is_put_back_and_the_deletion_takes_the_schedule(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """Issue 25.2: someone removes the finalizer of an object whose schedule exists; the
    next pass puts it back, so deleting the object still deletes its schedule."""
    kubectl.apply(scheduledjob("kept", namespace, interval={"every": "1h"}))
    eventually(lambda: ready(kubectl, "kept", namespace), what="Ready")
    index = finalizers(kubectl, "kept", namespace).index(FINALIZER)
    path = f"/metadata/finalizers/{index}"
    kubectl.run("patch", "scheduledjob", "kept", "-n", namespace, "--type=json", "-p",
                json.dumps([{"op": "test", "path": path, "value": FINALIZER},
                            {"op": "remove", "path": path}]))  # fmt: skip
    eventually(
        lambda: FINALIZER in finalizers(kubectl, "kept", namespace), what="the finalizer is back"
    )
    assert describe(temporal, namespace, "kept") is not None
    eventually(lambda: listed(temporal, namespace, "kept"), what="listed before the deletion")

    kubectl.run("delete", "scheduledjob", "kept", "-n", namespace, "--timeout=60s")
    assert describe(temporal, namespace, "kept") is None, "the schedule outlived its object"
    eventually(lambda: not listed(temporal, namespace, "kept"), what="gone from the listing")


def test_temporal_outage_is_reported_and_recovered_without_restart(
    kubectl: Kubectl,
    operator: OperatorProcess,
    temporal: TemporalSide,
    stack: LocalStack,
    namespace: str,
) -> None:
    kubectl.apply(scheduledjob("steady", namespace, interval={"every": "1m"}))
    kubectl.apply(scheduledjob("leaving", namespace, interval={"every": "1m"}))
    eventually(lambda: ready(kubectl, "steady", namespace), what="Ready")
    eventually(lambda: ready(kubectl, "leaving", namespace), what="Ready")
    stack.stop_temporal()
    try:
        kubectl.run("delete", "scheduledjob", "leaving", "-n", namespace, "--wait=false")
        eventually(
            lambda: (
                ready_condition(kubectl, "steady", namespace).get("reason") == "BackendUnavailable"
            ),
            timeout=60,
            what="BackendUnavailable while Temporal is down",
        )
        eventually(
            lambda: (
                ready_condition(kubectl, "leaving", namespace).get("reason") == "BackendUnavailable"
            ),
            timeout=60,
            what="deletion waits for Temporal",
        )
        assert kubectl.get("scheduledjob", "leaving", namespace) is not None
    finally:
        stack.start_temporal()
    eventually(lambda: ready(kubectl, "steady", namespace), timeout=90, what="Ready again")
    eventually(
        lambda: kubectl.get("scheduledjob", "leaving", namespace) is None,
        timeout=90,
        what="deleted once Temporal is back",
    )
    assert describe(temporal, namespace, "leaving") is None
    operator.assert_alive()


JOB = {"image": "registry.example/app:1"}


def on_backend(manifest: dict[str, Any], backend: str) -> dict[str, Any]:
    """The manifest moved to `backend`: the test worker's workflow on temporal (exactly
    one of job and workflow there), the job on kubernetes (its workflow ignored)."""
    spec = {key: value for key, value in manifest["spec"].items() if key != "job"}
    spec["backend"] = backend
    if backend == "kubernetes":
        spec["job"] = JOB
    return {**manifest, "spec": spec}


def test_switching_backends_keeps_one_resource(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    manifest = scheduledjob(
        "switch", namespace, backend="kubernetes", schedule="*/5 * * * *",
        job={"image": "registry.example/app:1"},
    )  # fmt: skip
    manifest["spec"].pop("interval", None)
    kubectl.apply(manifest)
    eventually(lambda: ready(kubectl, "switch", namespace), what="Ready on kubernetes")

    def cronjob_active() -> bool:
        """A CronJob being deleted is inert."""
        cronjob = kubectl.get("cronjob", "switch", namespace)
        return cronjob is not None and "deletionTimestamp" not in cronjob["metadata"]

    def schedule_active() -> bool:
        """A schedule still paused for the switch is inert."""
        schedule = describe(temporal, namespace, "switch")
        return schedule is not None and not schedule.schedule.state.paused

    def resources(backend: str) -> tuple[bool, bool]:
        """(an active CronJob, an active Temporal schedule). The two reads are moments
        apart, so the new backend is read first: during a switch the old one only goes
        and the new one only comes, so "new active, then old still active" means both
        were active at the first read. The other order would count an old backend
        retired between the reads as active beside the new one."""
        if backend == "temporal":
            schedule = schedule_active()
            return cronjob_active(), schedule
        cronjob = cronjob_active()
        return cronjob, schedule_active()

    def switch_to(backend: str, expected: tuple[bool, bool]) -> None:
        kubectl.apply(on_backend(manifest, backend))
        for _ in range(200):
            cronjob, schedule = resources(backend)
            assert not (cronjob and schedule), "both backends active at once"
            if (cronjob, schedule) == expected and ready(kubectl, "switch", namespace):
                break
        else:
            raise AssertionError(f"switch to {backend} did not finish")
        status = kubectl.get("scheduledjob", "switch", namespace)["status"]  # type: ignore[index]
        assert status["backend"] == backend
        events = kubectl.events(namespace, involvedObject_name="switch", reason="BackendSwitched")
        assert any(f"switched to backend {backend}" in e["message"] for e in events)

    switch_to("temporal", (False, True))
    on_temporal = kubectl.get("scheduledjob", "switch", namespace)["status"]  # type: ignore[index]
    assert on_temporal["backendRef"]["scheduleId"] == schedule_id(namespace, "switch")
    switch_to("kubernetes", (True, False))
    sj = kubectl.get("scheduledjob", "switch", namespace)
    assert sj is not None
    # The server holds what was computed: a merge patch merges nested objects, so the
    # Temporal-only keys need removing explicitly.
    assert sj["status"]["backendRef"] == {"kind": "CronJob", "name": "switch",
                                          "namespace": namespace}  # fmt: skip
    assert "sundial.dev/temporal-schedule" not in sj["metadata"].get("finalizers", [])


def test_a_switch_the_new_backend_refuses_leaves_the_old_one_running(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """Issue 14.2: the CronJob goes only once Temporal has accepted the schedule."""
    manifest = scheduledjob(
        "refusal", namespace, backend="kubernetes", schedule="0 12 * * *",
        job={"image": "registry.example/app:1"},
    )  # fmt: skip
    manifest["spec"].pop("interval", None)
    kubectl.apply(manifest)
    eventually(lambda: ready(kubectl, "refusal", namespace), what="Ready on kubernetes")
    manifest = on_backend(manifest, "temporal")
    manifest["spec"]["schedule"] = "0 12 ? * *"  # robfig takes `?`; Temporal refuses it
    kubectl.apply(manifest)
    condition = eventually(
        lambda: (
            (c := ready_condition(kubectl, "refusal", namespace)).get("status") == "False" and c
        ),
        what="Ready=False",
    )
    conditions = {
        c["type"]: c
        for c in kubectl.get("scheduledjob", "refusal", namespace)["status"]["conditions"]  # type: ignore[index]
    }
    assert conditions["Switching"]["status"] == "True", conditions
    assert "kubernetes" in conditions["Switching"]["message"], conditions
    cronjob = kubectl.get("cronjob", "refusal", namespace)
    assert cronjob is not None, f"the CronJob must keep running ({condition})"
    assert "deletionTimestamp" not in cronjob["metadata"]
    assert describe(temporal, namespace, "refusal") is None

    manifest["spec"]["schedule"] = "0 12 * * *"
    kubectl.apply(manifest)
    eventually(
        lambda: (
            ready(kubectl, "refusal", namespace)
            and kubectl.get("cronjob", "refusal", namespace) is None
        ),
        what="switched once Temporal accepts",
    )
    switching = {
        c["type"]: c
        for c in kubectl.get("scheduledjob", "refusal", namespace)["status"]["conditions"]  # type: ignore[index]
    }["Switching"]
    assert (switching["status"], switching["reason"]) == ("False", "Switched")


def test_bad_temporal_input_is_reported_and_isolated(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    connections = {
        "no-secret": {"address": temporal.address, "apiKeySecretRef": {"name": "missing"}},
        "unreachable": {"address": "127.0.0.1:1"},
        "unknown-namespace": {"address": temporal.address, "namespace": "no-such-namespace"},
    }
    for name, spec in connections.items():
        kubectl.apply(temporal_connection(name, namespace, **spec))
    cases = {
        "no-secret": "SecretNotFound",
        "unreachable": "BackendUnavailable",
        "unknown-namespace": "TemporalRejected",
        "no-such-connection": "ConnectionNotFound",
    }
    for name in cases:
        ref = {"kind": "TemporalConnection", "name": name}
        kubectl.apply(
            scheduledjob(name, namespace, interval={"every": "1m"}, temporalConnectionRef=ref)
        )
    kubectl.apply(scheduledjob("neighbour", namespace, interval={"every": "1m"}))
    for name, reason in cases.items():
        condition = eventually(
            lambda n=name, r=reason: (
                (c := ready_condition(kubectl, n, namespace)).get("reason") == r and c
            ),
            timeout=60,
            what=f"{name}: {reason}",
        )
        # Unreachable: Sundial cannot tell whether the backend is in step.
        assert condition["status"] == ("Unknown" if reason == "BackendUnavailable" else "False")
    eventually(lambda: ready(kubectl, "neighbour", namespace), what="neighbour unaffected")
    assert kubectl.events(namespace, reason="SecretNotFound", type="Warning")
    operator.assert_alive()


def test_switching_away_and_back_at_once_leaves_a_cronjob(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """Issue 14.4: kubernetes -> temporal -> kubernetes faster than the watch delivers the
    CronJob's events; what Sundial applied is not remembered past its retire."""
    manifest = scheduledjob(
        "flip", namespace, backend="kubernetes", schedule="*/5 * * * *",
        job={"image": "registry.example/app:1"},
    )  # fmt: skip
    manifest["spec"].pop("interval", None)
    for backend in ("kubernetes", "temporal", "kubernetes"):
        kubectl.apply(on_backend(manifest, backend))

    def settled() -> bool:
        cronjob = kubectl.get("cronjob", "flip", namespace)
        sj = kubectl.get("scheduledjob", "flip", namespace) or {}
        status = sj.get("status") or {}
        return (
            cronjob is not None
            and "deletionTimestamp" not in cronjob["metadata"]
            and status.get("backend") == "kubernetes"
            and status.get("observedGeneration") == sj["metadata"]["generation"]
            and describe(temporal, namespace, "flip") is None
            and ready(kubectl, "flip", namespace) is not None
        )

    eventually(settled, what="a live CronJob, no schedule, Ready on kubernetes")
    consistently(lambda: kubectl.get("cronjob", "flip", namespace) is not None, duration=5)
    operator.assert_alive()
