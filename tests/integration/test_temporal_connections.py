"""Connections as resources an administrator controls (issue 14: items 1, 15, 20, 21),
against the real apiserver and the real Temporal dev server (and its TLS front)."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest
import yaml
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, ScheduleDescription
from temporalio.service import RPCError, RPCStatusCode

from localstack import LocalStack
from localstack.relay import Relay
from shared_timeline import Servers
from support import (
    Background,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    consistently,
    eventually,
    free_port,
    ready,
    ready_condition,
    temporal_connection,
    temporal_scheduledjob,
)
from temporal_workflows import TASK_QUEUE

pytestmark = pytest.mark.cluster

SECOND_NAMESPACE = "sundial-second"


def scheduledjob(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A temporal-backed ScheduledJob that runs hourly: these tests are about connections."""
    spec.setdefault("interval", {"every": "1h"})
    return temporal_scheduledjob(name, namespace, **spec)


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


def registered_second_namespace(temporal: TemporalSide) -> str:
    """SECOND_NAMESPACE, registered on the dev server (once; again is a no-op)."""

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


@pytest.fixture(scope="module")
def second_temporal_namespace(temporal: TemporalSide) -> str:
    return registered_second_namespace(temporal)


# The bound each test had alone (pytest's timeout): each step has its own deadline within.
SCENARIO_SECONDS = 600


@contextmanager
def on_the_timeline(servers: Servers) -> Iterator[dict[str, Callable[[str], None]]]:
    """The three longest tests' scenarios, by test name, for the shared timeline
    (tests/shared_timeline.py): each waits on connection refreshes and Temporal's listings,
    on objects and connections of its own namespace, so their waits overlap the others'."""
    kubectl, operator, temporal = servers.kubectl, servers.operator, servers.temporal
    yield {
        "test_a_move_the_new_connection_refuses_leaves_the_old_schedule_running": partial(
            a_refused_move, kubectl, operator, temporal, registered_second_namespace(temporal)
        ),
        "test_connections_with_real_credentials_and_a_rotated_key": partial(
            real_credentials, kubectl, operator, temporal, servers.stack
        ),
        "test_a_revoked_connection_pauses_the_schedule_until_it_is_admitted_again": partial(
            a_revoked_connection, kubectl, operator, temporal
        ),
    }


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_a_move_the_new_connection_refuses_leaves_the_old_schedule_running(
    scenario: Background,
) -> None:
    scenario.join(SCENARIO_SECONDS)


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_connections_with_real_credentials_and_a_rotated_key(scenario: Background) -> None:
    scenario.join(SCENARIO_SECONDS)


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_a_revoked_connection_pauses_the_schedule_until_it_is_admitted_again(
    scenario: Background,
) -> None:
    scenario.join(SCENARIO_SECONDS)


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
    """Item 1: the schedule moves from the old connection (another Temporal namespace) to
    the new one: made there paused, the old one deleted over its own connection, the new
    one unpaused; the finalizer leaves none."""
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


def a_refused_move(
    kubectl: Kubectl,
    operator: OperatorProcess,
    temporal: TemporalSide,
    second_temporal_namespace: str,
    namespace: str,
) -> None:
    """Issue 25.1: the new place must accept the schedule before the old one goes. An
    address that refuses connections, then a Temporal namespace that does not exist: the
    old schedule keeps running, Ready says why; once the connection is fixed, the move
    completes and exactly one schedule is left."""
    identity = f"sundial/{namespace}/mover"
    kubectl.apply(scheduledjob("mover", namespace))
    eventually(lambda: ready(kubectl, "mover", namespace), what="Ready on the default")

    def old_runs() -> bool:
        old = describe_in(temporal, "default", identity)
        assert old is not None, "the old schedule was deleted before the new place accepted"
        assert not old.schedule.state.paused, f"the old schedule is paused: {old.schedule.state}"
        return True

    closed = f"127.0.0.1:{free_port()}"  # nothing listens there: connections are refused
    kubectl.apply(temporal_connection("refusing", namespace, address=closed))
    kubectl.apply(scheduledjob("mover", namespace,
                               temporalConnectionRef={"kind": "TemporalConnection",
                                                      "name": "refusing"}))  # fmt: skip
    condition = eventually(
        lambda: (c := _reason(kubectl, "mover", namespace, "BackendUnavailable"))
        and closed in c["message"] and c,
        what="Ready names the unreachable address",
    )  # fmt: skip
    assert condition["status"] == "Unknown"
    consistently(old_runs, duration=15)

    kubectl.apply(temporal_connection("nowhere", namespace, address=temporal.address,
                                      namespace="sundial-no-such-namespace"))  # fmt: skip
    nowhere = {"kind": "TemporalConnection", "name": "nowhere"}
    kubectl.apply(scheduledjob("mover", namespace, temporalConnectionRef=nowhere))
    condition = eventually(
        lambda: (c := ready_condition(kubectl, "mover", namespace)).get("status") == "False"
        and "sundial-no-such-namespace" in c["message"] and c,
        what="Ready names the missing Temporal namespace",
    )  # fmt: skip
    assert condition["reason"] == "TemporalRejected", condition
    consistently(old_runs, duration=15)

    # The connection is fixed: the move completes, and one schedule is left, running.
    kubectl.apply(temporal_connection("nowhere", namespace, address=temporal.address,
                                      namespace=second_temporal_namespace))  # fmt: skip
    # Fixing a connection wakes nothing: the refused move is looked at again within 30 s.
    eventually(
        lambda: (sj := ready(kubectl, "mover", namespace))
        and sj["status"]["backendRef"].get("namespace") == second_temporal_namespace,
        timeout=90, what="Ready over the fixed connection",
    )  # fmt: skip
    moved = describe_in(temporal, second_temporal_namespace, identity)
    assert moved is not None
    assert not moved.schedule.state.paused
    assert describe_in(temporal, "default", identity) is None, "the old schedule still fires"
    eventually(
        lambda: listed_ids(temporal, "default", identity) == []
        and listed_ids(temporal, second_temporal_namespace, identity) == [identity],
        what="exactly one schedule in Temporal's listings",
    )  # fmt: skip
    assert kubectl.events(namespace, reason="ScheduleMoved")
    kubectl.run("delete", "scheduledjob", "mover", "-n", namespace, "--timeout=60s")
    assert describe_in(temporal, second_temporal_namespace, identity) is None


def test_a_schedule_whose_status_write_was_refused_is_not_left_behind_by_a_move(
    kubectl: Kubectl,
    operator: OperatorProcess,
    temporal: TemporalSide,
    namespace: str,
    second_temporal_namespace: str,
    stack: LocalStack,
) -> None:
    """Found by the soak: a schedule is made, the status write that would record where is
    refused (403), and the connection changes meanwhile. The schedule at the old place
    must still be found and deleted by the move, and by the deletion after it: judged by
    Temporal's own listings, never by Sundial's status."""
    kubectl.apply(
        temporal_connection(
            "second", namespace, address=temporal.address, namespace=second_temporal_namespace
        )
    )
    name, identity = "unrecorded", f"sundial/{namespace}/unrecorded"
    second = {"kind": "TemporalConnection", "name": "second"}
    # Every status write that would record a schedule's place (backendRef) is refused.
    with stack.faults.deny(
        "unrecorded-status", resources=["scheduledjobs/status"], api_groups=["sundial.dev"],
        operations=["UPDATE"], resource_names=[name], namespace=namespace,
        allow_if="!has(object.status) || !has(object.status.backendRef)",
    ):  # fmt: skip
        kubectl.apply(scheduledjob(name, namespace))
        eventually(
            lambda: describe_in(temporal, "default", identity) is not None,
            what="the schedule made on the default connection, its status write refused",
        )
        status = (kubectl.get("scheduledjob", name, namespace) or {}).get("status") or {}
        assert "backendRef" not in status, "the refusal did not hold"
        kubectl.apply(scheduledjob(name, namespace, temporalConnectionRef=second))
        eventually(
            lambda: describe_in(temporal, second_temporal_namespace, identity) is not None,
            what="the schedule made over the second connection",
        )
    moved = eventually(
        lambda: (sj := ready(kubectl, name, namespace))
        and sj["status"]["backendRef"].get("namespace") == second_temporal_namespace
        and sj,
        what="Ready over the second connection once status writes are let through",
    )  # fmt: skip
    assert "pendingBackendRef" not in moved["status"], "a recorded place was never settled"
    eventually(
        lambda: listed_ids(temporal, "default", identity) == []
        and listed_ids(temporal, second_temporal_namespace, identity) == [identity],
        what="exactly one schedule in Temporal's listings, at the new place",
    )  # fmt: skip
    kubectl.run("delete", "scheduledjob", name, "-n", namespace, "--timeout=60s")
    assert describe_in(temporal, second_temporal_namespace, identity) is None
    assert describe_in(temporal, "default", identity) is None


def listed_ids(temporal: TemporalSide, temporal_namespace: str, schedule_id: str) -> list[str]:
    """The ids Temporal's listing of a namespace shows for `schedule_id` (eventually
    consistent: asserted with `eventually`)."""

    async def call() -> list[str]:
        client = temporal.client
        if temporal_namespace != client.namespace:
            client = await Client.connect(temporal.address, namespace=temporal_namespace)
        return [s.id async for s in await client.list_schedules() if s.id == schedule_id]

    return temporal.run(call)


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


def test_a_broken_connection_does_not_stop_another_on_the_same_address(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """Issue 25.3: one connection speaks TLS to the plaintext dev server and fails at every
    connect; another, plain, to the same address is not held up by it: its objects
    become Ready and stay Ready, never once reported unavailable, while the broken
    connection's keep failing."""
    kubectl.apply(temporal_connection("tls-to-plain", namespace, address=temporal.address,
                                      tls={}))  # fmt: skip
    kubectl.apply(temporal_connection("plain", namespace, address=temporal.address))
    broken_ref = {"kind": "TemporalConnection", "name": "tls-to-plain"}
    broken = [f"broken-{i}" for i in range(8)]
    kubectl.apply("\n---\n".join(
        yaml.safe_dump(scheduledjob(name, namespace, temporalConnectionRef=broken_ref))
        for name in broken
    ))  # fmt: skip
    eventually(
        lambda: _reason(kubectl, broken[0], namespace, "BackendUnavailable"),
        what="the broken connection fails",
    )
    fine_ref = {"kind": "TemporalConnection", "name": "plain"}
    fine = [f"fine-{i}" for i in range(3)]
    began = time.monotonic()
    for name in fine:
        kubectl.apply(scheduledjob(name, namespace, temporalConnectionRef=fine_ref))
    for name in fine:
        eventually(lambda n=name: ready(kubectl, n, namespace), timeout=45, what=f"{name} Ready")
    print(f"objects on the working connection Ready {time.monotonic() - began:.1f}s after "
          "creation")  # fmt: skip
    # Every 5 s (the resync here) each is described again, while the broken connection's
    # objects keep failing: none of those passes may find its Temporal "unreachable".
    consistently(lambda: all(ready(kubectl, n, namespace) for n in fine), duration=30)
    for name in fine:
        unavailable = kubectl.events(namespace, involvedObject_name=name,
                                     reason="BackendUnavailable")  # fmt: skip
        assert unavailable == [], [e["message"] for e in unavailable]
    for name in broken:
        condition = ready_condition(kubectl, name, namespace)
        assert condition.get("reason") == "BackendUnavailable", (name, condition)
    operator.assert_alive()


def _secret(name: str, namespace: str, data: dict[str, bytes | str]) -> dict[str, Any]:
    encoded = {
        key: base64.b64encode(value if isinstance(value, bytes) else value.encode()).decode()
        for key, value in data.items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": encoded,
    }


def _reason(kubectl: Kubectl, name: str, namespace: str, reason: str) -> dict[str, Any] | None:
    condition = ready_condition(kubectl, name, namespace)
    return condition if condition.get("reason") == reason else None


def real_credentials(
    kubectl: Kubectl,
    operator: OperatorProcess,
    temporal: TemporalSide,
    stack: LocalStack,
    namespace: str,
) -> None:
    """Item 21 (and 14: rotated credentials): mutual TLS and an API key through a real TLS
    front; a certificate of another CA and a wrong key are refused with a precise reason;
    a Secret rotated to the right key is used without a restart; no credential leaks."""
    front = stack.temporal_tls
    wrong_key = "not-" + front.api_key
    manifests = [
        _secret("mtls", namespace, {"tls.crt": front.client_cert_pem,
                                    "tls.key": front.client_key_pem, "ca.crt": front.ca_pem}),
        _secret("intruder", namespace, {"tls.crt": front.wrong_client_cert_pem,
                                        "tls.key": front.wrong_client_key_pem,
                                        "ca.crt": front.ca_pem}),
        _secret("ca", namespace, {"ca.crt": front.ca_pem}),
        _secret("api-key", namespace, {"apiKey": front.api_key}),
        _secret("rotating", namespace, {"apiKey": wrong_key}),
        temporal_connection("mtls", namespace, address=front.mtls_address,
                            tls={"secretRef": {"name": "mtls"}}),
        temporal_connection("intruder", namespace, address=front.mtls_address,
                            tls={"secretRef": {"name": "intruder"}}),
        temporal_connection("api-key", namespace, address=front.api_key_address,
                            tls={"secretRef": {"name": "ca"}},
                            apiKeySecretRef={"name": "api-key"}),
        temporal_connection("rotating", namespace, address=front.api_key_address,
                            tls={"secretRef": {"name": "ca"}},
                            apiKeySecretRef={"name": "rotating"}),
    ]  # fmt: skip
    kubectl.apply("\n---\n".join(yaml.safe_dump(m) for m in manifests))
    names = ["mtls", "intruder", "api-key", "rotating"]
    for name in names:
        ref = {"kind": "TemporalConnection", "name": name}
        kubectl.apply(scheduledjob(f"via-{name}", namespace, temporalConnectionRef=ref))

    for name in ("mtls", "api-key"):
        eventually(lambda n=name: ready(kubectl, f"via-{n}", namespace), what=f"via-{name}")
        assert describe_in(temporal, "default", f"sundial/{namespace}/via-{name}") is not None
    for name in ("intruder", "rotating"):
        condition = eventually(
            lambda n=name: _reason(kubectl, f"via-{n}", namespace, "Unauthenticated"),
            what=f"via-{name}: Unauthenticated",
        )
        assert condition["status"] == "False"
        assert describe_in(temporal, "default", f"sundial/{namespace}/via-{name}") is None

    # The Secret rotates (as a mounted or synced Secret does): no restart, the new key is used.
    pid = operator.proc.pid if operator.proc else None
    kubectl.apply(_secret("rotating", namespace, {"apiKey": front.api_key}))
    eventually(lambda: ready(kubectl, "via-rotating", namespace), what="rotated key in use")
    assert operator.proc is not None
    assert operator.proc.pid == pid

    # No credential in status, Events or the operator's log (which is at DEBUG level).
    everything = "\n".join(
        [
            kubectl.run("get", "scheduledjobs", "-n", namespace, "-o", "json").stdout,
            kubectl.run("get", "events", "-n", namespace, "-o", "json").stdout,
            operator.log_text(),
        ]
    )
    secrets_used = [front.api_key, wrong_key, *_pem_body_lines(front.client_key_pem),
                    *_pem_body_lines(front.wrong_client_key_pem)]  # fmt: skip
    for secret in secrets_used:
        assert secret not in everything


def _pem_body_lines(pem: bytes) -> list[str]:
    return [line for line in pem.decode().splitlines() if line and not line.startswith("-----")]


def test_deleting_a_namespace_of_temporal_objects_finishes(
    kubectl: Kubectl,
    operator: OperatorProcess,
    temporal: TemporalSide,
    stack: LocalStack,
    namespace: str,
) -> None:
    """Item 15: the namespace's deletion removes the connection's Secret and the
    connection itself at once; the finalizers still delete every schedule, and the
    namespace goes."""
    front = stack.temporal_tls
    count = 50
    manifests = [
        _secret("ca", namespace, {"ca.crt": front.ca_pem}),
        _secret("api-key", namespace, {"apiKey": front.api_key}),
        temporal_connection("team", namespace, address=front.api_key_address,
                            tls={"secretRef": {"name": "ca"}},
                            apiKeySecretRef={"name": "api-key"}),
    ]  # fmt: skip
    ref = {"kind": "TemporalConnection", "name": "team"}
    manifests += [
        scheduledjob(f"job-{i}", namespace, temporalConnectionRef=ref) for i in range(count)
    ]
    kubectl.apply("\n---\n".join(yaml.safe_dump(m) for m in manifests))
    ids = [f"sundial/{namespace}/job-{i}" for i in range(count)]

    def all_ready() -> bool:
        listed = json.loads(kubectl.run("get", "scheduledjobs", "-n", namespace,
                                        "-o", "json").stdout)["items"]  # fmt: skip
        return len(listed) == count and all(
            any(c["type"] == "Ready" and c["status"] == "True"
                for c in (sj.get("status") or {}).get("conditions", []))
            for sj in listed
        )  # fmt: skip

    eventually(all_ready, timeout=180, what=f"{count} temporal-backed objects Ready")
    assert all(describe_in(temporal, "default", i) is not None for i in ids)

    began = time.monotonic()
    kubectl.run("delete", "namespace", namespace, "--wait=false")
    eventually(
        lambda: kubectl.run("get", "namespace", namespace, check=False).returncode != 0,
        timeout=180,
        what="the namespace is gone",
    )
    print(f"namespace with {count} temporal-backed objects deleted in "
          f"{time.monotonic() - began:.1f}s")  # fmt: skip
    left = [i for i in ids if describe_in(temporal, "default", i) is not None]
    assert left == [], f"{len(left)} schedules outlived their namespace"


def test_the_escape_hatch_lets_a_deletion_finish_when_temporal_is_gone_for_good(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """Item 15: the Temporal a schedule was made at is gone; the deletion waits
    (BackendUnavailable) and finishes once `sundial.dev/abandon-schedule=true` says so,
    with a Warning Event naming the schedule left behind."""
    relay = Relay(temporal.address)
    kubectl.apply(temporal_connection("doomed", namespace, address=relay.address))
    ref = {"kind": "TemporalConnection", "name": "doomed"}
    kubectl.apply(scheduledjob("orphan", namespace, temporalConnectionRef=ref))
    eventually(lambda: ready(kubectl, "orphan", namespace), what="Ready")
    identity = f"sundial/{namespace}/orphan"
    assert describe_in(temporal, "default", identity) is not None

    relay.down()  # gone for good: every connection, new ones too, reset
    kubectl.run("delete", "scheduledjob", "orphan", "-n", namespace, "--wait=false")
    eventually(
        lambda: _reason(kubectl, "orphan", namespace, "BackendUnavailable"),
        what="the deletion waits for Temporal",
    )
    assert kubectl.get("scheduledjob", "orphan", namespace) is not None

    kubectl.run("annotate", "scheduledjob", "orphan", "-n", namespace,
                "sundial.dev/abandon-schedule=true")  # fmt: skip
    eventually(
        lambda: kubectl.get("scheduledjob", "orphan", namespace) is None,
        what="deleted once abandoning is allowed",
    )
    events = kubectl.events(namespace, reason="ScheduleAbandoned", type="Warning")
    assert any(identity in e["message"] for e in events), events
    # Sundial gave up on it: it is still there, for a person to delete.
    assert describe_in(temporal, "default", identity) is not None

    async def delete() -> None:
        await temporal.client.get_schedule_handle(identity).delete()

    temporal.run(delete)


def _actions(temporal: TemporalSide, schedule_id: str) -> tuple[bool, int]:
    """Temporal's own word on a schedule: paused or not, and the actions it has taken."""
    described = describe_in(temporal, "default", schedule_id)
    assert described is not None, f"schedule {schedule_id} is gone"
    return described.schedule.state.paused, described.info.num_actions


def _executions(temporal: TemporalSide, schedule_id: str) -> int:
    """The workflow executions Temporal's visibility lists as started by the schedule."""

    async def call() -> int:
        query = f'TemporalScheduledById = "{schedule_id}"'
        return len([w async for w in temporal.client.list_workflows(query)])

    return temporal.run(call)


def a_revoked_connection(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """Issue 25.6: a connection taken away from an object (its namespace no longer admitted
    by a ClusterTemporalConnection's namespaceSelector, its TemporalConnection deleted, its
    task queue no longer allowed) stops the schedule made over it: Sundial pauses it through
    the connection as last read, and says so in Ready; no workflow starts while it is
    revoked (Temporal's describe and its listing of executions); once the connection admits
    the object again, the schedule resumes. Deleting an object meanwhile still deletes its
    schedule."""
    label = "sundial-test.dev/admitted"
    kubectl.run("label", "namespace", namespace, f"{label}=yes")
    by_label = f"by-label-{namespace}"[:63]
    by_queue = f"by-queue-{namespace}"[:63]
    own_namespace = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    cluster_connections = [
        temporal_connection(by_label, address=temporal.address,
                            namespaceSelector={"matchLabels": {label: "yes"}}),
        temporal_connection(by_queue, address=temporal.address,
                            namespaceSelector=own_namespace, allowedTaskQueues=[TASK_QUEUE]),
    ]  # fmt: skip
    own = temporal_connection("own", namespace, address=temporal.address)
    objects = {
        "unlabelled": {"kind": "ClusterTemporalConnection", "name": by_label},
        "narrowed": {"kind": "ClusterTemporalConnection", "name": by_queue},
        "dropped": {"kind": "TemporalConnection", "name": "own"},
        "deleted": {"kind": "TemporalConnection", "name": "own"},
    }
    ids = {name: f"sundial/{namespace}/{name}" for name in objects}
    try:
        kubectl.apply("\n---\n".join(yaml.safe_dump(m) for m in [*cluster_connections, own]))
        for name, ref in objects.items():
            # A run every 2 s: a schedule that keeps firing shows within seconds.
            kubectl.apply(temporal_scheduledjob(name, namespace, temporalConnectionRef=ref))
        for name in objects:
            eventually(lambda n=name: ready(kubectl, n, namespace), what=f"{name} Ready")
            eventually(lambda n=name: _actions(temporal, ids[n])[1] >= 2,
                       what=f"{name}'s schedule fires")  # fmt: skip

        # Not a revocation: a spec change the connection refuses (a task queue it does not
        # allow) leaves the running schedule, which it does allow, running.
        narrowed = objects["narrowed"]
        kubectl.apply(temporal_scheduledjob(
            "narrowed", namespace, temporalConnectionRef=narrowed,
            workflow={"type": "SundialTick", "taskQueue": "someone-elses"}))  # fmt: skip
        eventually(
            lambda: _reason(kubectl, "narrowed", namespace, "ConnectionNotAllowed"),
            what="the refused task queue reported",
        )  # fmt: skip
        before = _actions(temporal, ids["narrowed"])[1]
        eventually(lambda: (a := _actions(temporal, ids["narrowed"]))[1] > before + 2 and not a[0],
                   what="the running schedule keeps firing")  # fmt: skip
        kubectl.apply(temporal_scheduledjob("narrowed", namespace, temporalConnectionRef=narrowed))
        eventually(lambda: ready(kubectl, "narrowed", namespace), what="narrowed Ready again")

        # Revoked, each in its own way.
        began = time.monotonic()
        kubectl.run("label", "namespace", namespace, f"{label}-")
        kubectl.apply(temporal_connection(by_queue, address=temporal.address,
                                          namespaceSelector=own_namespace,
                                          allowedTaskQueues=["someone-elses"]))  # fmt: skip
        kubectl.run("delete", "temporalconnection", "own", "-n", namespace)
        reasons = {"unlabelled": "ConnectionNotAllowed", "narrowed": "ConnectionNotAllowed",
                   "dropped": "ConnectionNotFound", "deleted": "ConnectionNotFound"}  # fmt: skip
        for name in objects:
            eventually(lambda n=name: _actions(temporal, ids[n])[0], timeout=60,
                       what=f"{name}'s schedule paused in Temporal")  # fmt: skip
        print(f"all four paused {time.monotonic() - began:.1f}s after the revocations")
        for name, reason in reasons.items():
            condition = eventually(
                lambda n=name, r=reason: (c := _reason(kubectl, n, namespace, r))
                and "paused" in c["message"] and c,
                what=f"{name}: Ready says {reason} and that the schedule is paused",
            )  # fmt: skip
            assert condition["status"] == "False", condition
            status = (kubectl.get("scheduledjob", name, namespace) or {}).get("status", {})
            assert not status.get("nextRunTimes"), status.get("nextRunTimes")

        # Deleting an object whose connection is gone still deletes its schedule.
        kubectl.run("delete", "scheduledjob", "deleted", "-n", namespace, "--timeout=60s")
        assert describe_in(temporal, "default", ids["deleted"]) is None, "outlived its object"
        del objects["deleted"]

        # Nothing starts while revoked: Temporal's count of actions stands still, and so
        # does its listing of the executions (once it shows those started before).
        taken = {name: _actions(temporal, ids[name])[1] for name in objects}
        for name in objects:
            eventually(lambda n=name: _executions(temporal, ids[n]) == taken[n],
                       what=f"{name}: the listing shows the executions started before")  # fmt: skip
        consistently(
            lambda: all(_actions(temporal, ids[n]) == (True, taken[n]) for n in objects),
            duration=20,
        )
        for name in objects:
            assert _executions(temporal, ids[name]) == taken[name], name

        # Admitted again: the schedules resume.
        began = time.monotonic()
        kubectl.run("label", "namespace", namespace, f"{label}=yes")
        kubectl.apply("\n---\n".join(yaml.safe_dump(m) for m in [*cluster_connections, own]))
        for name in objects:
            eventually(lambda n=name: ready(kubectl, n, namespace), timeout=90,
                       what=f"{name} Ready again")  # fmt: skip
            eventually(
                lambda n=name: (a := _actions(temporal, ids[n]))[0] is False and a[1] > taken[n],
                what=f"{name}'s schedule fires again",
            )  # fmt: skip
        print(f"resumed {time.monotonic() - began:.1f}s after the connections came back")
        operator.assert_alive()
    finally:
        for name in objects:
            kubectl.run("delete", "scheduledjob", name, "-n", namespace, "--timeout=60s",
                        check=False)  # fmt: skip
        for manifest in cluster_connections:
            kubectl.run("delete", "clustertemporalconnection", manifest["metadata"]["name"],
                        check=False)  # fmt: skip
