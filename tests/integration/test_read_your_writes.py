"""Issue 14.4: read-your-writes, against the real apiserver. The kubernetes backend reads the
CronJob it wrote instead of the watch cache until the cache shows that write (ownwrites.py);
a retire or a deletion the cache has seen drops that memory. Here the watch lags as long as
the test likes: the cache is fed only when the test lets a real watch catch up (from the
resourceVersion before the first write), and the apiserver (GET, its audit log) says which
CronJob exists and how often Sundial wrote one.

Issue 32's create-first writes are proven here too: the backend's client runs as the user
whose every request the audit log keeps (reads too), so what each path costs is counted by
the apiserver: a new CronJob one create, a spec change one replace, a CronJob someone else
made one refused create and one read."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, watch

from localstack import LocalStack
from localstack.apiserver import AUDITED_USER
from sundial.api.models import ScheduledJob
from sundial.backends.kubernetes.backend import KubernetesBackend
from sundial.backends.protocol import Pass
from sundial.errors import Retry, SpecProblem
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
    """A user of the backend's own, so the audit log tells its requests from the garbage
    collector's, the controller's and the test's (each test has a namespace of its own):
    the one whose reads are logged too."""
    return AUDITED_USER


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


def requests(stack: LocalStack, namespace: str, user: str) -> list[tuple[str, int]]:
    """(verb, answer) of each request `user` made on CronJobs in the namespace, oldest
    first, by the apiserver's audit log; but the list and watch that feed the cache (the
    operator's watches, here the test's `catch_up`)."""
    return [
        (entry["verb"], (entry.get("responseStatus") or {}).get("code", 0))
        for entry in audit_events(stack.log_dir / "audit.log")
        if entry.get("verb") not in ("list", "watch")
        and (ref := entry.get("objectRef") or {}).get("resource") == "cronjobs"
        and not ref.get("subresource")
        and ref.get("namespace") == namespace
        and (entry.get("user") or {}).get("username") == user
    ]


def applies(stack: LocalStack, namespace: str, user: str) -> int:
    """The CronJob writes `user` made that the apiserver took (creates, replaces)."""
    return sum(1 for verb, code in requests(stack, namespace, user)
               if verb in ("create", "update", "patch") and code < 300)  # fmt: skip


def made_requests(
    stack: LocalStack, namespace: str, user: str, expected: list[tuple[str, int]]
) -> None:
    """Exactly these requests on CronJobs, in order (the log is written in batches)."""
    eventually(lambda: len(requests(stack, namespace, user)) >= len(expected), 30, 0.2,
               f"{len(expected)} requests in the audit log")  # fmt: skip
    asyncio.run(asyncio.sleep(1.5))
    assert requests(stack, namespace, user) == expected


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


# ---- create-first (issue 32): what each write path costs, by the audit log -------------


def container_of(cronjob: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"][0]  # fmt: skip
    return found


def test_a_new_cronjob_costs_one_create_and_a_spec_change_one_replace_that_drops_the_rest(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, user: str,
    lagging: Lagging,
) -> None:  # fmt: skip
    """No read before the create: a create cannot write over anything. A spec change is
    one replace of the whole CronJob: what the spec no longer sets is gone from the
    server, a label someone else put on the CronJob stays."""
    sj = scheduledjob(kubectl, namespace, resources={"limits": {"memory": "64Mi"}})
    lagging.reconcile(sj)
    live = on_the_server(kubectl, namespace)
    assert live is not None
    assert "resources" in container_of(live)
    lagging.catch_up()
    kubectl.run("label", "cronjob", NAME, "-n", namespace, "team=billing")
    lagging.catch_up()
    lagging.reconcile(scheduledjob(kubectl, namespace))  # resources no longer set
    live = on_the_server(kubectl, namespace)
    assert live is not None
    assert "resources" not in container_of(live) or not container_of(live)["resources"], live
    assert live["metadata"]["labels"]["team"] == "billing"
    made_requests(stack, namespace, user, [("create", 201), ("update", 200)])


def test_a_replace_refused_or_overtaken_changes_nothing_and_the_next_pass_writes_it(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, user: str,
    lagging: Lagging,
) -> None:  # fmt: skip
    """Two faults on the replace: an admission policy refuses it (403), then someone
    writes the CronJob after the cache's copy (409, the resourceVersion precondition).
    Each time the pass is retried with the reason and the server's CronJob is as it was;
    once allowed and caught up, one replace writes the change over the other's label."""
    sj = scheduledjob(kubectl, namespace)
    lagging.reconcile(sj)
    lagging.catch_up()
    before = on_the_server(kubectl, namespace)
    assert before is not None
    changed = scheduledjob(kubectl, namespace, resources={"limits": {"memory": "64Mi"}})
    refusal = stack.faults.deny("replace-cronjob", resources=["cronjobs"], api_groups=["batch"],
                                operations=["UPDATE"], namespace=namespace)  # fmt: skip
    with refusal, pytest.raises(Retry) as refused:
        lagging.reconcile(changed)
    assert refused.value.reason == "Forbidden", refused.value
    kubectl.run("label", "cronjob", NAME, "-n", namespace, "team=billing")  # not yet seen
    with pytest.raises(Retry):
        lagging.reconcile(changed)
    live = on_the_server(kubectl, namespace)
    assert live is not None
    assert live["spec"] == before["spec"]
    lagging.catch_up()
    lagging.reconcile(changed)
    live = on_the_server(kubectl, namespace)
    assert live is not None
    assert container_of(live)["resources"]["limits"]["memory"] == "64Mi"
    assert live["metadata"]["labels"]["team"] == "billing"
    made_requests(
        stack, namespace, user, [("create", 201), ("update", 403), ("update", 409), ("update", 200)]
    )


def refused_untouched(
    stack: LocalStack, kubectl: Kubectl, namespace: str, user: str, lagging: Lagging,
    expected: list[tuple[str, int]],
) -> None:  # fmt: skip
    """A pass over someone else's CronJob: refused (CronJobExists), the CronJob as it was
    (its resourceVersion), and the backend's requests on CronJobs exactly `expected`."""
    theirs = on_the_server(kubectl, namespace)
    assert theirs is not None
    with pytest.raises(SpecProblem) as refused:
        lagging.reconcile(scheduledjob(kubectl, namespace))
    assert refused.value.reason == "CronJobExists", refused.value
    after = on_the_server(kubectl, namespace)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    made_requests(stack, namespace, user, expected)


def test_a_create_that_meets_a_cronjob_sundial_did_not_make_reads_it_and_writes_nothing(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, user: str,
    lagging: Lagging,
) -> None:  # fmt: skip
    """The watch cache holds only Sundial's CronJobs, so it cannot say the name is free:
    the create is refused (409), the CronJob read, found someone else's, and left as it
    was, with the reason (CronJobExists)."""
    kubectl.run("create", "cronjob", NAME, "-n", namespace, "--image=registry.example/app:1",
                "--schedule=0 0 1 1 *")  # fmt: skip
    refused_untouched(stack, kubectl, namespace, user, lagging, [("create", 409), ("get", 200)])


def test_a_cached_cronjob_with_sundials_labels_not_made_for_this_object_is_not_written(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, user: str,
    lagging: Lagging,
) -> None:  # fmt: skip
    """The watch cache holds every CronJob with Sundial's labels, and labels anyone can
    set: one in the cache is still Sundial's to write only with its owner reference to
    this object's uid. Someone's CronJob labelled as Sundial's is neither read nor
    written: CronJobExists."""
    kubectl.apply({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": NAME, "namespace": namespace, "labels": {
            "app.kubernetes.io/managed-by": "sundial", "sundial.dev/scheduledjob": NAME}},
        "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.example/app:1"}]}}}}},
    })  # fmt: skip
    lagging.catch_up()
    assert lagging.cache.cronjob((namespace, NAME)) is not None  # the premise
    refused_untouched(stack, kubectl, namespace, user, lagging, [])
