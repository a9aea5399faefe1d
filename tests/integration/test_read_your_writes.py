"""Issue 14.4: read-your-writes, against the real apiserver. The kubernetes backend reads the
CronJob it wrote instead of the watch cache until the cache shows that write (ownwrites.py);
a retire or a deletion the cache has seen drops that memory. Here the watch lags as long as
the test likes: the cache is fed only when the test lets a real watch catch up (from the
resourceVersion before the first write), and the apiserver (GET, its audit log) says which
CronJob exists and how often Sundial applied one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, watch

from localstack import LocalStack
from sundial.api.models import ScheduledJob
from sundial.backends.kubernetes.backend import KubernetesBackend
from sundial.backends.protocol import Pass
from sundial.events import EventRecorder
from sundial.kube import KubeClient, load_api_client
from sundial.watchcache import WatchCache
from support import Kubectl, audit_events, eventually, in_shard

pytestmark = pytest.mark.cluster

NAME = "invoices"


@dataclass
class Lagging:
    """The backend as the operator wires it (a real KubeClient as `user`, the real Event
    recorder), over a watch cache the test feeds: `catch_up` runs a real watch of the
    namespace's CronJobs from where the last one stopped and puts what it says into the
    cache, as the operator's CronJob handler does."""

    api_client: client.ApiClient
    namespace: str
    cache: WatchCache
    backend: KubernetesBackend
    since: str

    def catch_up(self) -> None:
        batch = client.BatchV1Api(self.api_client)
        stream = watch.Watch().stream(
            batch.list_namespaced_cron_job, self.namespace,
            resource_version=self.since, timeout_seconds=2,
        )  # fmt: skip
        for event in stream:
            body: dict[str, Any] = event["raw_object"]
            if event["type"] == "DELETED":
                self.cache.remove_cronjob(body)
            else:
                self.cache.put_cronjob(body)
            self.since = body["metadata"]["resourceVersion"]

    def reconcile(self, sj: ScheduledJob) -> None:
        asyncio.run(self.backend.reconcile(Pass((self.namespace, NAME), sj, _now()), None,
                                           hold=False))  # fmt: skip

    def retire(self, sj: ScheduledJob) -> None:
        asyncio.run(self.backend.retire(Pass((self.namespace, NAME), sj, _now())))


def _now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def user() -> str:
    """A user of the backend's own, so the audit log tells its writes from the garbage
    collector's, the controller's and the test's (each test has a namespace of its own)."""
    return "sundial-read-your-writes"


@pytest.fixture
def lagging(stack: LocalStack, namespace: str, user: str) -> Iterator[Lagging]:
    api_client = load_api_client(str(stack.faults.kubeconfig(user)))
    kube = KubeClient(api_client)
    since = client.BatchV1Api(api_client).list_namespaced_cron_job(namespace).metadata
    cache = WatchCache()
    backend = KubernetesBackend(kube=kube, cache=cache, events=EventRecorder(kube))
    yield Lagging(api_client, namespace, cache, backend, since.resource_version)
    api_client.close()


def scheduledjob(kubectl: Kubectl, namespace: str, **job: Any) -> ScheduledJob:
    """A ScheduledJob on the server (its CronJob's owner: the garbage collector would take a
    CronJob whose owner does not exist), as the server holds it. Its schedule fires once
    a year, so the CronJob controller leaves the CronJob alone during the test."""
    # In a shard no operator serves: the session's operator would make its CronJob too.
    kubectl.apply(in_shard({
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {"schedule": "0 0 1 1 *", "timeZone": "UTC",
                 "job": {"image": "registry.example/app:1", **job}},
    }, "read-your-writes"))  # fmt: skip
    body = kubectl.get("scheduledjob", NAME, namespace)
    assert body is not None
    return ScheduledJob.model_validate(body)


def on_the_server(kubectl: Kubectl, namespace: str) -> dict[str, Any] | None:
    """The CronJob as the apiserver holds it, None when there is none."""
    return kubectl.get("cronjob", NAME, namespace)


def gone(kubectl: Kubectl, namespace: str) -> None:
    """The deletion finished (Orphan: the garbage collector takes its finalizer first)."""
    eventually(lambda: on_the_server(kubectl, namespace) is None, 60, 0.2, "CronJob gone")


def applies(stack: LocalStack, namespace: str, user: str) -> int:
    """The CronJob writes (server-side applies) `user` made, by the apiserver's audit log."""
    return sum(
        1
        for entry in audit_events(stack.log_dir / "audit.log")
        if (ref := entry.get("objectRef") or {}).get("resource") == "cronjobs"
        and not ref.get("subresource")
        and ref.get("namespace") == namespace
        and entry.get("verb") == "patch"
        and (entry.get("user") or {}).get("username") == user
    )


def applied(stack: LocalStack, namespace: str, user: str, count: int) -> None:
    """Exactly `count` applies: once the log shows that many, none more after a moment
    (the audit log is written in batches)."""
    eventually(lambda: applies(stack, namespace, user) >= count, 30, 0.2, f"{count} applies")
    asyncio.run(asyncio.sleep(1.5))
    assert applies(stack, namespace, user) == count


def test_switch_away_and_back_before_the_watch_catches_up_still_leaves_a_cronjob(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, user: str,
    lagging: Lagging,
) -> None:  # fmt: skip
    sj = scheduledjob(kubectl, namespace)
    lagging.reconcile(sj)  # created; the watch has not said so yet
    assert on_the_server(kubectl, namespace) is not None
    lagging.retire(sj)  # switched to temporal
    # Never both active: the CronJob Sundial just wrote is deleted although the cache has
    # not seen it yet (being deleted, or gone already).
    deleting = on_the_server(kubectl, namespace)
    assert deleting is None or deleting["metadata"].get("deletionTimestamp")
    gone(kubectl, namespace)
    lagging.catch_up()
    lagging.retire(sj)
    lagging.catch_up()
    lagging.reconcile(sj)  # switched back, same spec
    assert on_the_server(kubectl, namespace) is not None, (
        "switched back to kubernetes but no CronJob was written"
    )
    applied(stack, namespace, user, 2)


def test_a_cronjob_deleted_by_hand_is_made_again_once_the_deletion_is_seen(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, user: str,
    lagging: Lagging,
) -> None:  # fmt: skip
    sj = scheduledjob(kubectl, namespace)
    lagging.reconcile(sj)
    assert on_the_server(kubectl, namespace) is not None
    kubectl.run("delete", "cronjob", NAME, "-n", namespace, "--wait=true")  # by hand
    gone(kubectl, namespace)
    lagging.catch_up()  # the ADDED, then the DELETED
    lagging.reconcile(sj)
    assert on_the_server(kubectl, namespace) is not None
    applied(stack, namespace, user, 2)


def test_a_cronjob_the_apiserver_canonicalised_is_in_step_after_the_cache_caught_up(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, user: str,
    lagging: Lagging,
) -> None:  # fmt: skip
    """The apiserver writes `memory: 1024Mi` as `1Gi`: the live spec differs from the
    desired one, yet it is Sundial's write (same spec hash, generation), so nothing is
    applied again; that holds once the cache shows the write, when only the write's
    fingerprint is still remembered."""
    sj = scheduledjob(kubectl, namespace, resources={"limits": {"memory": "1024Mi"}})
    lagging.reconcile(sj)
    live = on_the_server(kubectl, namespace)
    assert live is not None
    container = live["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["memory"] == "1Gi"  # the premise
    lagging.catch_up()
    assert lagging.cache.cronjob((namespace, NAME)) is not None
    lagging.reconcile(sj)
    lagging.reconcile(sj)
    applied(stack, namespace, user, 1)
