"""Connections as resources an administrator controls (issue 14: items 1, 15, 20, 21),
against the real apiserver and the real Temporal dev server (and its TLS front)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, ScheduleDescription
from temporalio.service import RPCError, RPCStatusCode

from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    eventually,
    ready,
    ready_condition,
    temporal_connection,
)
from temporal_workflows import TASK_QUEUE

pytestmark = pytest.mark.cluster

SECOND_NAMESPACE = "sundial-second"


def scheduledjob(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("backend", "temporal")
    spec.setdefault("interval", {"every": "1h"})
    spec.setdefault("workflow", {"type": "SundialTick", "taskQueue": TASK_QUEUE, "args": [name]})
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def describe_in(
    temporal: TemporalSide, temporal_namespace: str, schedule_id: str
) -> ScheduleDescription | None:
    async def call() -> ScheduleDescription | None:
        client = temporal.client
        if temporal_namespace != client.namespace:
            client = await Client.connect(temporal.address, namespace=temporal_namespace)
        try:
            return await client.get_schedule_handle(schedule_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    return temporal.run(call)


@pytest.fixture(scope="module")
def second_temporal_namespace(temporal: TemporalSide) -> str:
    async def register() -> None:
        try:
            await temporal.client.workflow_service.register_namespace(
                RegisterNamespaceRequest(
                    namespace=SECOND_NAMESPACE,
                    workflow_execution_retention_period=Duration(seconds=86400),
                )
            )
        except RPCError as error:
            if error.status != RPCStatusCode.ALREADY_EXISTS:
                raise

    temporal.run(register)

    async def visible() -> bool:
        try:
            await Client.connect(temporal.address, namespace=SECOND_NAMESPACE)
            return True
        except RuntimeError:
            return False

    eventually(lambda: temporal.run(visible), what=f"Temporal namespace {SECOND_NAMESPACE}")
    return SECOND_NAMESPACE


def test_a_cluster_connection_serves_only_the_namespaces_it_admits(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    name = f"only-{namespace}"[:63]
    others_only = {"matchLabels": {"kubernetes.io/metadata.name": "someone-else"}}
    kubectl.apply(
        temporal_connection(name, address=temporal.address, namespaceSelector=others_only)
    )
    try:
        ref = {"kind": "ClusterTemporalConnection", "name": name}
        kubectl.apply(scheduledjob("borrower", namespace, temporalConnectionRef=ref))
        condition = eventually(
            lambda: (
                (c := ready_condition(kubectl, "borrower", namespace)).get("reason")
                == "ConnectionNotAllowed"
                and c
            ),
            what="ConnectionNotAllowed",
        )
        assert condition["status"] == "False"
        assert f"does not admit namespace {namespace}" in condition["message"]
        # Nothing was sent: no schedule exists for it.
        assert describe_in(temporal, "default", f"sundial/{namespace}/borrower") is None
        assert kubectl.events(namespace, reason="ConnectionNotAllowed", type="Warning")

        admitted = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        kubectl.apply(
            temporal_connection(name, address=temporal.address, namespaceSelector=admitted)
        )
        eventually(lambda: ready(kubectl, "borrower", namespace), what="admitted: Ready")
        assert describe_in(temporal, "default", f"sundial/{namespace}/borrower") is not None
    finally:
        kubectl.run("delete", "scheduledjob", "borrower", "-n", namespace, "--wait=true")
        kubectl.run("delete", "clustertemporalconnection", name, check=False)


def test_changing_the_connection_moves_the_schedule_and_leaves_none_behind(
    kubectl: Kubectl,
    operator: OperatorProcess,
    temporal: TemporalSide,
    namespace: str,
    second_temporal_namespace: str,
) -> None:
    """Item 1: the schedule made over the old connection (another Temporal namespace) is
    deleted over that connection before the new one is made; the finalizer leaves none."""
    kubectl.apply(
        temporal_connection(
            "second", namespace, address=temporal.address, namespace=second_temporal_namespace
        )
    )
    identity = f"sundial/{namespace}/mover"
    kubectl.apply(scheduledjob("mover", namespace))
    eventually(lambda: ready(kubectl, "mover", namespace), what="Ready on the default")
    assert describe_in(temporal, "default", identity) is not None

    ref = {"kind": "TemporalConnection", "name": "second"}
    kubectl.apply(scheduledjob("mover", namespace, temporalConnectionRef=ref))
    moved = eventually(
        lambda: (
            (sj := ready(kubectl, "mover", namespace))
            and sj["status"]["backendRef"].get("namespace") == second_temporal_namespace
            and sj
        ),
        what="Ready over the second connection",
    )
    assert moved["status"]["backendRef"]["connection"] == ref
    assert describe_in(temporal, second_temporal_namespace, identity) is not None
    assert describe_in(temporal, "default", identity) is None, "the old schedule still fires"
    assert kubectl.events(namespace, reason="ScheduleMoved")

    kubectl.run("delete", "scheduledjob", "mover", "-n", namespace, "--timeout=60s")
    assert describe_in(temporal, second_temporal_namespace, identity) is None
    assert describe_in(temporal, "default", identity) is None


@pytest.fixture
def blackhole() -> Iterator[str]:
    """An address that accepts TCP and never answers: every connect waits for its timeout,
    the worst kind of unreachable Temporal."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(512)
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def test_an_unreachable_temporal_slows_only_the_objects_that_use_it(
    kubectl: Kubectl,
    operator: OperatorProcess,
    temporal: TemporalSide,
    namespace: str,
    blackhole: str,
) -> None:
    """Item 20: 24 objects on a Temporal that never answers (10 s per connect) do not hold
    the operator's workers: objects on a healthy Temporal and on Kubernetes keep going."""
    kubectl.apply(temporal_connection("blackhole", namespace, address=blackhole))
    ref = {"kind": "TemporalConnection", "name": "blackhole"}
    stuck = [f"stuck-{i}" for i in range(24)]
    kubectl.apply(
        "\n---\n".join(
            yaml.safe_dump(scheduledjob(name, namespace, temporalConnectionRef=ref))
            for name in stuck
        )
    )
    # Let the stuck ones take the workers first, as they would in a real outage.
    eventually(
        lambda: ready_condition(kubectl, stuck[0], namespace).get("reason") == "BackendUnavailable",
        what="the first stuck object reported",
    )
    began = time.monotonic()
    healthy = [f"healthy-{i}" for i in range(3)]
    for name in healthy:
        kubectl.apply(scheduledjob(name, namespace))
    kubectl.apply(
        {
            "apiVersion": "sundial.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": "native", "namespace": namespace},
            "spec": {"schedule": "0 3 * * *", "job": {"image": "registry.example/app:1"}},
        }
    )
    # Without isolation, each of the 24 holds a worker for the 10 s connect timeout in
    # turn: the healthy ones wait for minutes. With it, they are Ready in a pass or two.
    for name in [*healthy, "native"]:
        eventually(lambda n=name: ready(kubectl, n, namespace), timeout=45, what=f"{name} Ready")
    print(f"healthy objects Ready {time.monotonic() - began:.1f}s after creation")
    eventually(
        lambda: ready_condition(kubectl, stuck[-1], namespace).get("status") == "Unknown",
        what="the stuck ones say Unknown: Sundial cannot tell",
    )
    operator.assert_alive()
