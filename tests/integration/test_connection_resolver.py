"""ConnectionResolver against the real apiserver: the ClusterTemporalConnection and the
namespaces' labels it reads, what it keeps of them and for how long (issue 25.13), and the
admission it asks of a namespace's labels, read again after a refresh period. The clock is
passed in; the rules themselves: tests/unit/test_connections.py, test_connection_policy.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from localstack import LocalStack
from localstack.sundial_setup import CLUSTER_RESOURCE_NAMESPACE, DEFAULT_CONNECTION
from sundial.api.models import ScheduledJob
from sundial.backends.temporal.connections import ENTRY_IDLE_SECONDS, ConnectionResolver
from sundial.errors import SpecProblem
from sundial.kube import KubeClient, load_api_client
from support import Kubectl, fresh_namespace, temporal_connection

pytestmark = pytest.mark.cluster

REFRESH = 30.0


def scheduledjob(namespace: str, **spec: Any) -> ScheduledJob:
    return ScheduledJob.model_validate({
        "metadata": {"name": "nightly", "namespace": namespace, "uid": "u1"},
        "spec": {"schedule": "@daily", "backend": "temporal",
                 "workflow": {"type": "w", "taskQueue": "q"}, **spec},
    })  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def kube(stack: LocalStack, crd_installed: None) -> Iterator[KubeClient]:
    api_client = load_api_client(str(stack.kubeconfig))
    yield KubeClient(api_client)
    api_client.close()


def resolver(kube: KubeClient, clock: Clock) -> ConnectionResolver:
    return ConnectionResolver(
        kube, default_connection=DEFAULT_CONNECTION,
        cluster_resource_namespace=CLUSTER_RESOURCE_NAMESPACE, refresh_seconds=REFRESH,
        clock=clock,
    )  # fmt: skip


def test_connections_and_namespaces_no_object_asks_for_any_more_are_forgotten(
    kube: KubeClient, kubectl: Kubectl, namespace: str
) -> None:
    """Issue 25.13: an entry per (connection, namespace) and each namespace's labels were
    kept for ever, a deleted namespace's too."""
    clock = Clock()
    connections = resolver(kube, clock)

    async def scenario(gone: str) -> tuple[int, int, int, str]:
        for where in (gone, namespace):
            resolved = await connections.resolve(scheduledjob(where))
        both = connections.held()
        clock.now += ENTRY_IDLE_SECONDS / 2
        await connections.resolve(scheduledjob(namespace))
        clock.now += ENTRY_IDLE_SECONDS / 2 + 1
        await connections.resolve(scheduledjob(namespace))  # a resolve sweeps now and then
        after = connections.held()
        clock.now += ENTRY_IDLE_SECONDS + 1  # nobody asks any more: the entry goes too
        connections.sweep()
        return both, after, connections.held(), resolved.connection.address

    with fresh_namespace(kubectl, f"{namespace[:50]}-gone") as gone:
        both, after, at_last, address = asyncio.run(scenario(gone))
    default = kubectl.run("get", "clustertemporalconnection", DEFAULT_CONNECTION,
                          "-o", "jsonpath={.spec.address}").stdout  # fmt: skip
    assert address == default
    assert both == 3  # the cluster connection's entry, two namespaces' labels
    assert after == 2  # the "gone" namespace's labels went
    assert at_last == 0


def test_a_namespace_is_admitted_by_its_labels_as_read_again_after_a_refresh_period(
    kube: KubeClient, kubectl: Kubectl, namespace: str
) -> None:
    name = f"only-admitted-{namespace[-20:]}".rstrip("-")
    kubectl.apply(temporal_connection(
        name, address="temporal.example:7233", namespace="default",
        namespaceSelector={"matchLabels": {"sundial.dev/test-admitted": namespace[:63]}},
    ))  # fmt: skip
    clock = Clock()
    connections = resolver(kube, clock)
    sj = scheduledjob(namespace, temporalConnectionRef={
        "kind": "ClusterTemporalConnection", "name": name})  # fmt: skip

    async def resolve() -> str:
        try:
            resolved = await connections.resolve(sj)
        except SpecProblem as problem:
            return problem.reason
        return resolved.connection.address

    try:
        assert asyncio.run(resolve()) == "ConnectionNotAllowed"
        kubectl.run("label", "namespace", namespace, f"sundial.dev/test-admitted={namespace[:63]}")
        clock.now += REFRESH - 1
        assert asyncio.run(resolve()) == "ConnectionNotAllowed", "labels kept a refresh period"
        clock.now += 1
        assert asyncio.run(resolve()) == "temporal.example:7233"
    finally:
        kubectl.run("delete", "clustertemporalconnection", name, "--ignore-not-found")
