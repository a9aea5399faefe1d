"""The local stack is the real thing: real controllers act on what the API stores, a real
node runs Pods, and Temporal keeps its state across a restart.

The CronJob is created by a module-scoped autouse fixture, so its first minute ticks by
while the quicker tests run; its test comes late and waits only for what is left. The
node's crash test comes last: it takes the node away and brings it back.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
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

from localstack import LocalStack, host

HACK = Path(__file__).resolve().parents[2] / "hack"

T = TypeVar("T")

# The CronJob controller acts at the next minute boundary, i.e. within ~60 s; the rest
# is headroom for a loaded two-core machine.
CRON_DEADLINE = 150.0
GC_DEADLINE = 120.0
NAMESPACE_DEADLINE = 90.0
# A Pod takes about 3 s from create to Succeeded on an idle machine.
POD_DEADLINE = 90.0


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
    # Pods are admitted once the namespace has its ServiceAccount and the CA ConfigMap
    # their token volume mounts.
    wait_for("the default ServiceAccount", lambda: has(core.read_namespaced_service_account,
             "default", name), NAMESPACE_DEADLINE)  # fmt: skip
    wait_for("kube-root-ca.crt", lambda: has(core.read_namespaced_config_map,
             "kube-root-ca.crt", name), NAMESPACE_DEADLINE)  # fmt: skip
    yield name
    core.delete_namespace(name)


def has(read: Callable[[str, str], Any], name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


@dataclass(frozen=True)
class TickingCronJob:
    namespace: str
    name: str
    uid: str
    created: float  # time.monotonic()


@pytest.fixture(scope="module", autouse=True)
def cronjob(
    stack: LocalStack, api: client.ApiClient, cron_namespace: str
) -> Iterator[TickingCronJob]:
    batch = client.BatchV1Api(api)
    name = unique("every-minute")
    body = {
        "metadata": {"name": name},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [busybox(stack, "echo tick")],
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


# ---- the node ------------------------------------------------------------------------


def busybox(stack: LocalStack, script: str) -> dict[str, Any]:
    return {
        "name": "main",
        "image": stack.images["busybox"],
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    }


def create_pod(
    core: client.CoreV1Api, namespace: str, container: dict[str, Any], **spec: Any
) -> str:
    name = unique("pod")
    body = {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }
    core.create_namespaced_pod(namespace, body)
    return name


def wait_for_pod(core: client.CoreV1Api, namespace: str, name: str, timeout: float) -> Any:
    """The Pod once it has Succeeded or Failed."""

    def finished() -> Any:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    return wait_for(f"Pod {namespace}/{name} to finish", finished, timeout, interval=0.2)


@pytest.fixture(scope="module")
def pods(api: client.ApiClient, cron_namespace: str) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.mark.cluster
def test_the_node_is_ready(stack: LocalStack, pods: client.CoreV1Api) -> None:
    (node,) = pods.list_node().items
    conditions = {c.type: c.status for c in node.status.conditions}
    assert conditions["Ready"] == "True"
    # Nothing keeps Pods away: the node-lifecycle controller removed the not-ready taint.
    assert not node.spec.taints
    assert node.status.node_info.container_runtime_version.startswith("containerd://2.")
    assert node.status.node_info.kubelet_version.startswith("v1.")


@pytest.mark.cluster
def test_a_pod_runs_to_succeeded_and_its_log_is_readable(
    stack: LocalStack, pods: client.CoreV1Api, cron_namespace: str
) -> None:
    began = time.monotonic()
    name = create_pod(pods, cron_namespace, busybox(stack, "echo hi; exit 0"))
    pod = wait_for_pod(pods, cron_namespace, name, POD_DEADLINE)
    print(f"Pod create to {pod.status.phase}: {time.monotonic() - began:.1f}s")
    assert pod.status.phase == "Succeeded"
    # kubectl logs goes apiserver -> kubelet (client certificate, webhook authorization).
    logs = subprocess.run(
        [str(stack.kubectl), f"--kubeconfig={stack.kubeconfig}", "logs", "-n", cron_namespace,
         name], capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == "hi\n"


@pytest.mark.cluster
def test_a_pod_exiting_3_is_failed(
    stack: LocalStack, pods: client.CoreV1Api, cron_namespace: str
) -> None:
    name = create_pod(pods, cron_namespace, busybox(stack, "exit 3"))
    pod = wait_for_pod(pods, cron_namespace, name, POD_DEADLINE)
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


IN_CLUSTER_PROBE = r"""
import json, os, socket, ssl, sys, urllib.request

# The in-cluster configuration every Kubernetes client reads.
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
token = open(sa + "/token").read()
tls = ssl.create_default_context(cafile=sa + "/ca.crt")
review = urllib.request.Request(
    f"https://{host}:{port}/apis/authentication.k8s.io/v1/selfsubjectreviews",
    data=b'{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}',
    headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
)
with urllib.request.urlopen(review, context=tls, timeout=10) as response:
    print("apiserver:", json.load(response)["status"]["userInfo"]["username"])

# Temporal's frontend is gRPC: an HTTP/2 server answers the preface with SETTINGS.
address, temporal_port = os.environ["TEMPORAL_ADDRESS"].rsplit(":", 1)
with socket.create_connection((address, int(temporal_port)), timeout=10) as conn:
    conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    frame = conn.recv(9)
print("temporal: http2 frame type", frame[3])
"""


@pytest.mark.cluster
def test_a_pod_reaches_the_apiserver_and_temporal_through_in_cluster_config(
    stack: LocalStack, pods: client.CoreV1Api, cron_namespace: str
) -> None:
    container = {
        "name": "main",
        "image": stack.images["python-base"],
        "imagePullPolicy": "Never",
        "command": ["python3", "-c", IN_CLUSTER_PROBE],
        "env": [{"name": "TEMPORAL_ADDRESS", "value": stack.temporal_in_cluster_address}],
    }
    name = create_pod(pods, cron_namespace, container)
    pod = wait_for_pod(pods, cron_namespace, name, POD_DEADLINE)
    log = pods.read_namespaced_pod_log(name, cron_namespace)
    assert pod.status.phase == "Succeeded", log
    assert f"apiserver: system:serviceaccount:{cron_namespace}:default" in log
    assert "temporal: http2 frame type 4" in log


@pytest.mark.cluster
def test_a_second_stack_is_refused_a_node(stack: LocalStack, tmp_path: Path) -> None:
    other = {f"SUNDIAL_{name}_PORT": str(port) for name, port in (
        ("ETCD", stack.ports.etcd + 1000), ("APISERVER", stack.ports.apiserver + 1000),
        ("KCM", stack.ports.kcm + 1000), ("TEMPORAL", stack.ports.temporal + 1000))}  # fmt: skip
    began = time.monotonic()
    second = subprocess.run(
        [sys.executable, "-m", "localstack", "--state-dir", str(tmp_path), "up"],
        env={**os.environ, **other, "PYTHONPATH": str(HACK)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert second.returncode == 1, second.stderr
    assert "a node already runs on this machine" in second.stderr
    assert str(stack.state_dir) in second.stderr
    # Refused before any of its servers started.
    assert time.monotonic() - began < 30
    assert not list((tmp_path / "pids").glob("*.pid"))


@pytest.mark.cluster
def test_cronjob_jobs_run_on_the_node_and_gc_removes_them(
    stack: LocalStack, api: client.ApiClient, cronjob: TickingCronJob
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

    # The node runs it: from the slot to the Pod's Succeeded is what a user waits for.
    done = wait_for_pod(core, ns, pod.metadata.name, POD_DEADLINE)
    seen = datetime.now(UTC)
    assert done.status.phase == "Succeeded"
    slot = datetime.fromisoformat(
        job.metadata.annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"]
    )
    print(f"slot {slot:%H:%M:%S} to Pod Succeeded seen: {(seen - slot).total_seconds():.1f}s")
    wait_for(
        "the Job to complete",
        lambda: any(
            c.type == "Complete" and c.status == "True"
            for c in batch.read_namespaced_job(job.metadata.name, ns).status.conditions or []
        ),
        60,
    )
    logs = subprocess.run(
        [str(stack.kubectl), f"--kubeconfig={stack.kubeconfig}", "logs", "-n", ns,
         f"job/{job.metadata.name}"], capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert logs.stdout == "tick\n", logs.stderr

    job_uids = {job.metadata.uid for job in jobs()}
    batch.delete_namespaced_cron_job(cronjob.name, ns, propagation_policy="Background")
    wait_for("the garbage collector to delete the Jobs", lambda: not jobs(), GC_DEADLINE)
    wait_for("the garbage collector to delete the Pods", lambda: not pods_of(job_uids), GC_DEADLINE)


@pytest.mark.cluster
def test_a_crashed_node_is_cleaned_up_and_a_stopped_one_leaves_nothing(
    stack: LocalStack, pods: client.CoreV1Api, cron_namespace: str
) -> None:
    """Last: takes the node away (SIGKILL, as a crash), then cleans up and restarts it."""
    assert host.leftovers(), "a running node shows in leftovers()"
    name = create_pod(pods, cron_namespace, busybox(stack, "sleep 300"))
    wait_for("the sleeper to run", lambda: pods.read_namespaced_pod(
        name, cron_namespace).status.phase == "Running", POD_DEADLINE)  # fmt: skip
    before = stack.node.host_before
    assert before is not None

    stack.kill_node()
    left = host.leftovers(before)
    assert any(line.startswith("pod process") for line in left), left
    assert any(line.startswith("mount") for line in left), left

    stack.stop_node()  # the clean-up a next start runs first
    assert host.leftovers(before) == []
    assert host.read_sysctls() == before.sysctls

    pods.delete_namespaced_pod(name, cron_namespace, grace_period_seconds=0)
    stack.start_node()
    name = create_pod(pods, cron_namespace, busybox(stack, "echo back"))
    assert wait_for_pod(pods, cron_namespace, name, POD_DEADLINE).status.phase == "Succeeded"
