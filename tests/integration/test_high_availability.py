"""Two replicas with leader election, as the HA overlay runs them: each a real operator
process with the ServiceAccount's token and the manifests' RBAC. The leader is killed
(SIGKILL, and once SIGTERM) while ScheduledJobs are created and changed: the standby takes
over within the lease's bound, nothing is made twice, and the apiserver's audit log shows
the two never wrote status in the same stretch of time."""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localstack import LocalStack
from support import (
    OPERATOR_NAMESPACE,
    REPO,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    audit_events,
    eventually,
    in_shard,
    kubernetes_scheduledjob,
    lease_holder,
    no_retry_job,
    ready,
    rendered,
    scrape,
    service_account_kubeconfig,
    temporal_scheduledjob,
    token_operator,
)

pytestmark = pytest.mark.cluster

SHARD = "ha"
LEASE = "sundial-ha-test"
REPLICAS = ("replica-a", "replica-b")
# A kill's bound: the lease duration (15 s) and one jittered retry (2.4 s); a loaded
# machine gets some slack, the target is 30 s.
FAILOVER_TARGET = 30.0


def install_rbac(kubectl: Kubectl) -> None:
    """Everything of the cluster-wide overlay but the Deployment and its PDB (the
    replicas here are processes) and the CRDs (the session installed them)."""
    skip = {"Deployment", "PodDisruptionBudget", "CustomResourceDefinition"}
    documents = [d for d in rendered(kubectl, REPO / "manifests/overlays/cluster-wide")
                 if d["kind"] not in skip]  # fmt: skip
    kubectl.run("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in documents))


def holder(kubectl: Kubectl) -> str:
    return lease_holder(kubectl, LEASE, OPERATOR_NAMESPACE)


@pytest.fixture(scope="module")
def sa_kubeconfig(
    kubectl: Kubectl,
    stack: LocalStack,
    tmp_path_factory: pytest.TempPathFactory,
    crd_installed: None,
) -> Path:
    install_rbac(kubectl)
    path = tmp_path_factory.mktemp("ha") / "kubeconfig"
    return service_account_kubeconfig(kubectl, stack.apiserver_url, stack.pki.ca_cert, path)


def replica(stack: LocalStack, kubeconfig: Path, name: str) -> OperatorProcess:
    return token_operator(stack, kubeconfig, name, SHARD, leader_election_lease=LEASE,
                          temporal_resync_seconds="5", log_level="DEBUG")  # fmt: skip


@pytest.fixture
def replicas(
    stack: LocalStack, sa_kubeconfig: Path, kubectl: Kubectl
) -> Iterator[dict[str, OperatorProcess]]:
    kubectl.run("delete", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "--ignore-not-found")
    processes = {name: replica(stack, sa_kubeconfig, name) for name in REPLICAS}
    for process in processes.values():
        process.start()
    yield processes
    for process in processes.values():
        process.stop()


def status_writers(audit_log: Path, namespace: str) -> list[str]:
    """Which replica wrote each status of the namespace's ScheduledJobs, in order."""
    writes = [
        event for event in audit_events(audit_log)
        if (event.get("objectRef") or {}).get("namespace") == namespace
        and event["objectRef"].get("resource") == "scheduledjobs"
        and event["objectRef"].get("subresource") == "status"
        and event.get("verb") == "patch"
        and (event.get("responseStatus") or {}).get("code", 200) < 300
    ]  # fmt: skip
    writes.sort(key=lambda event: event["stageTimestamp"])
    return [event.get("userAgent", "").rpartition("(")[2].rstrip(")") for event in writes]


def test_the_standby_takes_over_when_the_leader_stops_and_nothing_is_done_twice(
    kubectl: Kubectl,
    stack: LocalStack,
    namespace: str,
    temporal: TemporalSide,
    replicas: dict[str, OperatorProcess],
    operator: OperatorProcess,
) -> None:
    """`operator` (the session's, serving objects without a shard label) runs too: the
    audit log shows it never wrote these objects' status either."""
    busybox = stack.node.images["busybox"] if stack.with_node else "busybox"
    job = no_retry_job(busybox, "true")
    kubernetes_names: list[str] = []
    temporal_names: list[str] = []
    failovers: list[tuple[str, float]] = []
    leader = eventually(lambda: holder(kubectl) in REPLICAS and holder(kubectl),
                        what="one replica leads")  # fmt: skip
    # Issue 25.17: the standby serves /metrics too (the Service names both replicas; a
    # target down for ever is an alert about nothing).
    standby = next(name for name in REPLICAS if name != leader)

    def standby_metrics() -> bool:
        try:
            return bool(scrape(replicas[standby].metrics_url))
        except OSError:
            return False

    eventually(standby_metrics, what="the standby's /metrics")
    for round_, how in enumerate((signal.SIGKILL, signal.SIGTERM, signal.SIGKILL)):
        # Changes in flight while the leader goes: new objects of both backends, and an
        # edit of each object of the round before.
        for name in kubernetes_names:
            kubectl.run("patch", "scheduledjob", name, "-n", namespace, "--type=merge",
                        "-p", json.dumps({"spec": {"schedule": f"{round_} * * * *"}}))  # fmt: skip
        for name in temporal_names:
            every = {"spec": {"interval": {"every": f"{round_ + 3}s"}}}
            kubectl.run("patch", "scheduledjob", name, "-n", namespace, "--type=merge",
                        "-p", json.dumps(every))  # fmt: skip
        for i in range(2):
            name = f"cron-{round_}-{i}"
            every_5_minutes = kubernetes_scheduledjob(name, namespace, job, schedule="*/5 * * * *")
            kubectl.apply(in_shard(every_5_minutes, SHARD))
            kubernetes_names.append(name)
        name = f"flow-{round_}"
        kubectl.apply(in_shard(temporal_scheduledjob(name, namespace), SHARD))
        temporal_names.append(name)

        stopped = time.monotonic()
        replicas[leader].proc.send_signal(how)  # type: ignore[union-attr]
        standby = next(name for name in REPLICAS if name != leader)
        eventually(lambda standby=standby: holder(kubectl) == standby,
                   timeout=90, interval=0.2,
                   what=f"{standby} takes over from {leader}")  # fmt: skip
        failovers.append((how.name, time.monotonic() - stopped))
        replicas[leader].proc.wait(timeout=30)  # type: ignore[union-attr]
        replicas[leader].start()  # back as the standby
        leader = standby

    for name in kubernetes_names + temporal_names:
        eventually(lambda name=name: ready(kubectl, name, namespace), timeout=120,
                   what=f"{name} converges")  # fmt: skip

    # Nothing twice: one CronJob per kubernetes ScheduledJob, with the last edit in it;
    # one Temporal schedule per temporal one.
    cronjobs = json.loads(kubectl.run("get", "cronjobs", "-n", namespace, "-o", "json").stdout)
    schedules = {c["metadata"]["name"]: c["spec"]["schedule"] for c in cronjobs["items"]}
    assert sorted(schedules) == sorted(kubernetes_names)
    assert schedules["cron-0-0"] == "2 * * * *"

    async def schedule_ids() -> list[str]:
        return [s.id async for s in await temporal.client.list_schedules()]

    expected_ids = sorted(f"sundial/{namespace}/{n}" for n in temporal_names)
    eventually(lambda: sorted(i for i in temporal.run(schedule_ids) if f"/{namespace}/" in i)
               == expected_ids, what="one schedule per temporal ScheduledJob")  # fmt: skip

    # Exactly one replica wrote at a time: the writer changes only at a failover.
    writers = status_writers(stack.log_dir / "audit.log", namespace)
    assert set(writers) <= set(REPLICAS), writers
    changes = sum(1 for a, b in itertools.pairwise(writers) if a != b)
    assert changes <= len(failovers), writers
    assert all(seconds < FAILOVER_TARGET for _, seconds in failovers), failovers
    print("failovers:", ", ".join(f"{how} {seconds:.1f}s" for how, seconds in failovers))
