"""The local stack is the real thing: real controllers act on what the API stores, and
Temporal keeps its state across a restart.

The CronJob is created by a module-scoped autouse fixture, so its first minute ticks by
while the quicker tests run; its test comes last and waits only for what is left.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleSpec,
)

from localstack import LocalStack

T = TypeVar("T")

# The CronJob controller acts at the next minute boundary, i.e. within ~60 s; the rest
# is headroom for a loaded two-core machine.
CRON_DEADLINE = 150.0
GC_DEADLINE = 120.0
NAMESPACE_DEADLINE = 90.0


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def api(stack: LocalStack) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(stack.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def cron_namespace(api: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = unique("stack-test")
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@dataclass(frozen=True)
class TickingCronJob:
    namespace: str
    name: str
    uid: str
    created: float  # time.monotonic()


@pytest.fixture(scope="module", autouse=True)
def cronjob(api: client.ApiClient, cron_namespace: str) -> Iterator[TickingCronJob]:
    batch = client.BatchV1Api(api)
    name = unique("every-minute")
    body = {
        "metadata": {"name": name},
        "spec": {
            "schedule": "* * * * *",
            # The Pods never run (no kubelet), so the Job never finishes; one is enough.
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "main", "image": "registry.invalid/never-pulled:0"}
                            ],
                        }
                    }
                }
            },
        },
    }
    created = batch.create_namespaced_cron_job(cron_namespace, body)
    yield TickingCronJob(cron_namespace, name, created.metadata.uid, time.monotonic())
    try:
        batch.delete_namespaced_cron_job(name, cron_namespace, propagation_policy="Background")
    except ApiException as error:
        if error.status != 404:
            raise


def namespace_gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def create_doomed_namespace(core: client.CoreV1Api) -> str:
    """A namespace with content, so that deleting it takes the namespace controller."""
    name = unique("doomed")
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "data"}, "data": {"k": "v"}})
    core.delete_namespace(name)
    return name


@pytest.mark.cluster
def test_kubectl_reaches_a_real_apiserver(stack: LocalStack) -> None:
    kubectl = [str(stack.kubectl), f"--kubeconfig={stack.kubeconfig}"]
    names = subprocess.run(
        [*kubectl, "get", "namespaces", "-o", "name"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert {"namespace/default", "namespace/kube-system"} <= set(names)

    version = json.loads(
        subprocess.run(
            [*kubectl, "version", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    # v0.0.0-master would mean the build lost its version stamp.
    assert version["serverVersion"]["gitVersion"].startswith("v1.")


@pytest.mark.cluster
def test_namespace_controller_deletes_namespaces(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    name = create_doomed_namespace(core)
    wait_for(f"namespace {name} to go", lambda: namespace_gone(core, name), NAMESPACE_DEADLINE)


@pytest.mark.cluster
def test_namespace_waits_for_the_controller_manager(
    stack: LocalStack, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    stack.stop_controller_manager()
    try:
        name = create_doomed_namespace(core)
        time.sleep(5)
        # Without the namespace controller nothing empties and removes it.
        assert core.read_namespace(name).status.phase == "Terminating"
    finally:
        stack.start_controller_manager()
    wait_for(f"namespace {name} to go", lambda: namespace_gone(core, name), NAMESPACE_DEADLINE)


async def create_schedule(address: str, schedule_id: str) -> ScheduleDescription:
    temporal = await Client.connect(address)
    handle = await temporal.create_schedule(
        schedule_id,
        Schedule(
            action=ScheduleActionStartWorkflow(
                "StackTestWorkflow", id=f"{schedule_id}-run", task_queue="stack-test"
            ),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))]),
        ),
    )
    return await handle.describe()


async def describe_schedule(address: str, schedule_id: str) -> ScheduleDescription:
    temporal = await Client.connect(address)
    return await temporal.get_schedule_handle(schedule_id).describe()


async def delete_schedule(address: str, schedule_id: str) -> None:
    temporal = await Client.connect(address)
    await temporal.get_schedule_handle(schedule_id).delete()


def port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) == 0


@pytest.mark.cluster
def test_temporal_schedule_survives_a_restart(stack: LocalStack) -> None:
    address = stack.temporal_address
    schedule_id = unique("stack-test")
    before = asyncio.run(create_schedule(address, schedule_id))
    assert before.info.next_action_times
    assert before.info.next_action_times[0] > datetime.now(UTC)

    stack.stop_temporal()
    assert not port_open(address)
    stack.start_temporal()

    after = asyncio.run(describe_schedule(address, schedule_id))
    assert after.id == schedule_id
    assert after.schedule.spec.intervals == [ScheduleIntervalSpec(every=timedelta(hours=1))]
    action = after.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.workflow == "StackTestWorkflow"
    assert after.info.next_action_times
    asyncio.run(delete_schedule(address, schedule_id))


def owned_by(obj: Any, uid: str) -> bool:
    return any(ref.uid == uid for ref in obj.metadata.owner_references or [])


@pytest.mark.cluster
def test_cronjob_controller_makes_jobs_and_pods_and_gc_removes_them(
    api: client.ApiClient, cronjob: TickingCronJob
) -> None:
    batch = client.BatchV1Api(api)
    core = client.CoreV1Api(api)
    ns = cronjob.namespace

    def jobs() -> list[Any]:
        items = batch.list_namespaced_job(ns).items
        return [job for job in items if owned_by(job, cronjob.uid)]

    def pods_of(job_uids: set[str]) -> list[Any]:
        items = core.list_namespaced_pod(ns).items
        return [pod for pod in items if any(owned_by(pod, uid) for uid in job_uids)]

    remaining = CRON_DEADLINE - (time.monotonic() - cronjob.created)
    job = wait_for("the CronJob controller to create a Job", jobs, remaining)[0]
    print(f"Job {job.metadata.name} after {time.monotonic() - cronjob.created:.0f}s")
    # Set by the CronJob controller only, from the schedule time it acted on.
    assert "batch.kubernetes.io/cronjob-scheduled-timestamp" in job.metadata.annotations

    pods = wait_for("the Job controller to create a Pod", lambda: pods_of({job.metadata.uid}), 60)
    pod = pods[0]
    assert pod.metadata.labels["batch.kubernetes.io/job-name"] == job.metadata.name

    job_uids = {job.metadata.uid for job in jobs()}
    batch.delete_namespaced_cron_job(cronjob.name, ns, propagation_policy="Background")
    wait_for("the garbage collector to delete the Jobs", lambda: not jobs(), GC_DEADLINE)
    wait_for("the garbage collector to delete the Pods", lambda: not pods_of(job_uids), GC_DEADLINE)
