"""Deleting a namespace the operator watches, with the namespaced overlay's own rights
(issue 25, defect 5): the overlay's Role and RoleBinding in that namespace go with it, at
once, yet the finalizers must still come off, the schedules must still be deleted, and the
operator must go on serving the namespaces it still has, also after a restart."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from temporalio.client import ScheduleDescription
from temporalio.service import RPCError, RPCStatusCode

from localstack import LocalStack
from support import (
    OPERATOR_NAMESPACE,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    eventually,
    in_shard,
    namespaced_overlay_rbac,
    ready,
    service_account_kubeconfig,
    temporal_connection,
    temporal_scheduledjob,
    token_operator,
)

pytestmark = pytest.mark.cluster

ACCOUNT = "sundial-namespace-deletion"
SHARD = "namespace-deletion"
DOOMED, KEPT = "nd-doomed", "nd-kept"
# The overlay's example namespaces, and what this test puts in their place.
RENAMED = {"team-a": DOOMED, "team-b": KEPT}


@pytest.fixture(scope="module")
def namespaced_operator(
    kubectl: Kubectl,
    stack: LocalStack,
    crd_installed: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    for ns in (DOOMED, KEPT):
        kubectl.run("create", "namespace", ns)
    kubectl.run("create", "serviceaccount", ACCOUNT, "-n", OPERATOR_NAMESPACE)
    documents = namespaced_overlay_rbac(kubectl, suffix="nd", namespaces=RENAMED,
                                        account=ACCOUNT)  # fmt: skip
    kubectl.run("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in documents))
    config = service_account_kubeconfig(kubectl, stack.apiserver_url, stack.pki.ca_cert,
                                        tmp_path_factory.mktemp("nd") / "kubeconfig",
                                        account=ACCOUNT)  # fmt: skip
    process = token_operator(stack, config, "namespace-deletion", SHARD,
                             namespaces=f"{DOOMED},{KEPT}",
                             leader_election_lease="sundial-namespace-deletion",
                             connection_refresh_seconds="3", temporal_resync_seconds="5",
                             log_level="DEBUG")  # fmt: skip
    process.start()
    yield process
    process.stop()
    for doc in documents:
        if doc["kind"].startswith("Cluster"):
            kubectl.run("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found")
    kubectl.run("delete", "serviceaccount", ACCOUNT, "-n", OPERATOR_NAMESPACE)
    for ns in (DOOMED, KEPT):
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)


def describe(temporal: TemporalSide, schedule_id: str) -> ScheduleDescription | None:
    async def call() -> ScheduleDescription | None:
        try:
            return await temporal.client.get_schedule_handle(schedule_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    return temporal.run(call)


def served(kubectl: Kubectl, temporal: TemporalSide, name: str, timeout: float = 60) -> None:
    """A new temporal-backed object in the kept namespace is made and Ready."""
    kubectl.apply(in_shard(temporal_scheduledjob(name, KEPT, interval={"every": "1h"}), SHARD))
    eventually(lambda: ready(kubectl, name, KEPT), timeout=timeout, what=f"{name} Ready")
    assert describe(temporal, f"sundial/{KEPT}/{name}") is not None


def test_deleting_a_watched_namespace_finishes_and_takes_its_schedules_along(
    kubectl: Kubectl,
    temporal: TemporalSide,
    namespaced_operator: OperatorProcess,
) -> None:
    process = namespaced_operator
    hourly = {"interval": {"every": "1h"}}
    kubectl.apply(temporal_connection("own", DOOMED, address=temporal.address))
    doomed = {
        "on-default": in_shard(temporal_scheduledjob("on-default", DOOMED, **hourly), SHARD),
        "on-own": in_shard(temporal_scheduledjob(
            "on-own", DOOMED, temporalConnectionRef={"kind": "TemporalConnection", "name": "own"},
            **hourly), SHARD),
    }  # fmt: skip
    for manifest in doomed.values():
        kubectl.apply(manifest)
    for name in doomed:
        eventually(lambda n=name: ready(kubectl, n, DOOMED), what=f"{name} Ready")
        assert describe(temporal, f"sundial/{DOOMED}/{name}") is not None
    served(kubectl, temporal, "before")

    # The namespace goes, and the overlay's Role and RoleBinding in it with it.
    began = time.monotonic()
    kubectl.run("delete", "namespace", DOOMED, "--wait=false")
    eventually(
        lambda: kubectl.run("get", "namespace", DOOMED, check=False).returncode != 0,
        timeout=120,
        what=f"namespace {DOOMED} is gone",
    )
    print(f"namespace {DOOMED} deleted in {time.monotonic() - began:.1f}s")
    for name in doomed:
        assert describe(temporal, f"sundial/{DOOMED}/{name}") is None, f"{name} outlived it"

    # The operator goes on serving the namespace it still has ...
    served(kubectl, temporal, "after")
    process.assert_alive()
    # ... and so does the next one to start, whose listing of the deleted namespace the
    # apiserver refuses (the overlay's Role there is gone).
    process.stop()
    began = time.monotonic()
    process.start()
    served(kubectl, temporal, "after-restart", timeout=90)
    print(f"after the restart, a new object Ready in {time.monotonic() - began:.1f}s")
    process.assert_alive()
