"""Sundial's own status write coming back on the watch needs no pass of its own: the pass
that wrote it saw everything it says (otherwise every write is two passes). Against the
real apiserver: the operator's object graph in this process (in_process.operator_graph),
its Reconciler writing the status, and the ScheduledJob event handler given the object
as the apiserver then holds it, as its watch event carries it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf._core.actions.invocation import invoke

import sundial.handlers  # noqa: F401 - registers the event handlers with kopf
from in_process import operator_graph
from localstack import LocalStack
from sundial.kube import KubeClient, load_api_client
from sundial.workqueue import WorkQueue
from support import (
    SHARD_LABEL,
    Kubectl,
    audit_events,
    eventually,
    in_shard,
    kubernetes_scheduledjob,
)

pytestmark = pytest.mark.cluster

NAME = "invoices"
SHARD = "status-echo"
SELECTOR = f"{SHARD_LABEL}={SHARD}"
Key = tuple[str, str]  # namespace, name


class RecordingQueue(WorkQueue[Key]):
    """The work queue the handlers feed, recording what they queue (nothing runs it)."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[Key] = []

    def add(self, key: Key, *, urgent: bool = False) -> None:
        self.added.append(key)
        super().add(key, urgent=urgent)

    def add_after(self, key: Key, delay: float) -> None:
        self.added.append(key)
        super().add_after(key, delay)


def _handler() -> Any:
    return next(
        h for h in kopf.get_default_registry()._watching.get_all_handlers()
        if h.fn.__name__ == "scheduledjob_event"
    )  # fmt: skip


async def event(memo: kopf.Memo, type_: str, body: dict[str, Any]) -> None:
    """The watch event of `body`, through the ScheduledJob handler as kopf invokes it."""
    await invoke(_handler().fn, settings=kopf.OperatorSettings(),
                 kwargs={"type": type_, "body": kopf.Body(body), "memo": memo,
                         "event": {"type": type_, "object": body}})  # fmt: skip


def status_writes(stack: LocalStack, namespace: str, user: str) -> int:
    """The status writes of the namespace's ScheduledJobs by `user` the apiserver took."""
    return sum(
        1 for entry in audit_events(stack.log_dir / "audit.log")
        if (entry.get("objectRef") or {}).get("namespace") == namespace
        and entry["objectRef"].get("resource") == "scheduledjobs"
        and entry["objectRef"].get("subresource") == "status"
        and entry.get("verb") == "patch"
        and (entry.get("user") or {}).get("username") == user
        and (entry.get("responseStatus") or {}).get("code", 200) < 300
    )  # fmt: skip


def handler_memo(graph: kopf.Memo) -> kopf.Memo:
    """What the handlers see: the graph's cache and Reconciler, a queue that records."""
    return kopf.Memo(cache=graph.cache, queue=RecordingQueue(), selector=graph.selector,
                     reconciler=graph.reconciler)  # fmt: skip


async def created(kubectl: Kubectl, server: KubeClient, memo: kopf.Memo, namespace: str) -> None:
    """The ScheduledJob applied, and its ADDED event through the handler (into the cache).
    Made after the graph's first listing, so its workers never run a pass of it: the test
    runs the one pass (the work queue would never run two of one object at once)."""
    # In a shard only this graph serves: the session's operator would write its status too.
    await asyncio.to_thread(kubectl.apply, in_shard(kubernetes_scheduledjob(
        NAME, namespace, {"image": "app:1"}, schedule="0 3 * * *", timeZone="UTC"),
        SHARD))  # fmt: skip
    body = await server.read_scheduledjob(namespace, NAME)
    assert body is not None
    await event(memo, "ADDED", body)
    memo.queue.added.clear()


def test_sundials_own_status_write_coming_back_needs_no_pass_but_an_edit_on_it_does(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str
) -> None:
    user = "sundial-echo"
    kubeconfig = stack.faults.kubeconfig(user)
    admin = load_api_client(str(stack.kubeconfig))
    server = KubeClient(admin)
    key = (namespace, NAME)

    async def scenario() -> tuple[int, int, int, int]:
        async with operator_graph(kubeconfig, namespace, label_selector=SELECTOR) as graph:
            memo = handler_memo(graph)
            reconciler, queue = graph.reconciler, memo.queue
            await created(kubectl, server, memo, namespace)
            await reconciler(key)
            # The apiserver writes its audit log in batches, just after the answer.
            await asyncio.to_thread(eventually, lambda: status_writes(stack, namespace, user),
                                    what="the pass's status write in the audit log")  # fmt: skip
            remembered = reconciler.remembered_statuses()
            written = await server.read_scheduledjob(*key)
            assert written is not None
            assert written.get("status")
            await event(memo, "MODIFIED", written)
            # The cache shows the write now: no second copy of the status is kept.
            remembered_after = reconciler.remembered_statuses()
            quiet = len(queue.added)
            await asyncio.to_thread(kubectl.run, "annotate", "scheduledjob", NAME, "-n",
                                    namespace, "sundial.dev/run-now=a")  # fmt: skip
            requested = await server.read_scheduledjob(*key)
            assert requested is not None
            await event(memo, "MODIFIED", requested)
            # Every write of this user by now: the one pass's, and no other.
            writes = status_writes(stack, namespace, user)
            return writes, remembered, remembered_after, quiet - len(queue.added)

    try:
        writes, remembered, remembered_after, more = asyncio.run(scenario())
    finally:
        admin.close()
    assert writes == 1
    assert remembered == 1
    assert remembered_after == 0
    assert more == -1, "an annotation edit at the written version is news"


def test_the_echo_of_a_status_write_arriving_before_its_answer_needs_no_pass(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str
) -> None:
    """Under load the watch event of a status write often comes before the write's own
    answer: the pass had not yet remembered the version, so the echo queued a second pass
    (for a temporal-backed object, a second describe per slot). Here the answers to the
    operator's requests are held back (a relay's latency), so the event comes first."""
    relay = stack.faults.apiserver_relay("echo-first")
    kubeconfig: Path = stack.faults.kubeconfig("sundial-echo-first", via=relay)
    admin = load_api_client(str(stack.kubeconfig))
    server = KubeClient(admin)
    key = (namespace, NAME)

    async def scenario() -> tuple[bool, list[Key]]:
        async with operator_graph(kubeconfig, namespace, label_selector=SELECTOR) as graph:
            memo = handler_memo(graph)
            await created(kubectl, server, memo, namespace)
            relay.latency(1.5, "answer")
            try:
                writing = asyncio.create_task(graph.reconciler(key))
                while True:  # the write reached the apiserver; its answer is on its way
                    body = await server.read_scheduledjob(*key)
                    if body is not None and body.get("status"):
                        break
                    await asyncio.sleep(0.05)
                await event(memo, "MODIFIED", body)
                in_flight = not writing.done()
                await writing
            finally:
                relay.resume()
            return in_flight, memo.queue.added

    try:
        in_flight, queued = asyncio.run(scenario())
    finally:
        admin.close()
    assert in_flight, "the event came after the answer: the test did not test"
    assert queued == [], "the echo of the write in flight queued a pass"
