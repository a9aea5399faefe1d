"""Issue 14.19: a ScheduledJob the cache still holds but the server no longer has (a ghost a
re-list brought back) never gets a backend object made for it: the first create of its
CronJob or Temporal schedule is preceded by a GET of the ScheduledJob. Against the real
apiserver and Temporal: the operator's object graph in this process, a ghost put in its
cache, one pass; the apiserver's audit log and Temporal say what was written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from in_process import operator_graph
from localstack import LocalStack
from support import Kubectl, TemporalSide, audit_events

pytestmark = pytest.mark.cluster

NAME = "invoices"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def ghost(namespace: str, backend: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"backend": backend, "schedule": "* * * * *", "timeZone": "UTC"}
    if backend == "kubernetes":
        spec["job"] = {"image": "app:1"}
    else:
        spec["workflow"] = {"type": "Tick", "taskQueue": "q"}
    return {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": NAME, "namespace": namespace, "uid": "u1",
                     "resourceVersion": "5", "generation": 1,
                     "finalizers": finalizers or []},
        "spec": spec,
    }  # fmt: skip


def one_pass_over_a_ghost(
    stack: LocalStack, namespace: str, user: str, body: dict[str, Any]
) -> tuple[bool, list[str]]:
    """Whether the cache still holds the ghost after one pass, and the writes `user` made
    in the namespace (resource/subresource verb)."""
    key = (namespace, NAME)

    async def scenario() -> bool:
        async with operator_graph(stack.faults.kubeconfig(user), namespace) as graph:
            graph.cache.put_scheduledjob(body)
            await graph.reconciler(key)
            return graph.cache.scheduledjob(key) is not None

    held = asyncio.run(scenario())
    writes = [
        f"{ref.get('resource')}/{ref.get('subresource') or ''} {entry['verb']}"
        for entry in audit_events(stack.log_dir / "audit.log")
        if (ref := entry.get("objectRef") or {}).get("namespace") == namespace
        and entry.get("verb") in WRITES
        and (entry.get("user") or {}).get("username") == user
        and ref.get("resource") != "events"
    ]  # fmt: skip
    return held, writes


def test_no_cronjob_is_made_for_a_scheduledjob_that_is_gone(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str
) -> None:
    held, writes = one_pass_over_a_ghost(
        stack, namespace, "sundial-ghost-k", ghost(namespace, "kubernetes")
    )
    assert writes == []
    assert kubectl.get("cronjob", NAME, namespace) is None
    assert not held  # and the cache no longer holds the ghost


def test_no_schedule_is_made_for_a_scheduledjob_that_is_gone(
    stack: LocalStack,
    kubectl: Kubectl,
    crd_installed: None,
    temporal: TemporalSide,
    namespace: str,
) -> None:
    body = ghost(namespace, "temporal", ["sundial.dev/temporal-schedule"])
    held, writes = one_pass_over_a_ghost(stack, namespace, "sundial-ghost-t", body)
    assert writes == []
    assert not held

    async def described() -> bool:
        try:
            await temporal.client.get_schedule_handle(f"sundial/{namespace}/{NAME}").describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    assert not temporal.run(described), "a schedule was created for a ScheduledJob that is gone"
