"""Issue 25, defect 15: the old leader stops acting before the new one starts, even when its
Lease requests are slow rather than refused. Two replicas with leader election, each a user
of its own; the leader's Lease client goes through a relay (SUNDIAL_LEADER_ELECTION_KUBECONFIG,
controller-runtime's LeaderElectionConfig) while its other calls go directly and keep
writing. The relay then delays every answer past the Lease client's timeout: the leader
cannot renew, the standby takes over. Judged by the apiserver's audit log: no write of the
old leader's user was received after the new leader's acquiring write."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from localstack import LocalStack
from localstack.sundial_setup import CLUSTER_RESOURCE_NAMESPACE
from support import (
    Kubectl,
    OperatorProcess,
    accepted_writes,
    eventually,
    faulted_operator,
    in_shard,
    kubernetes_scheduledjob,
    lease_holder,
    received,
)

pytestmark = pytest.mark.cluster

SHARD = "fencing"
LEASE = "sundial-fencing-test"
LEADER, STANDBY = "fence-a", "fence-b"
# Past the Lease client's timeout (lease duration / 3 = 5 s): every renewal times out.
ANSWER_DELAY = 7.0


def holder(kubectl: Kubectl) -> str:
    return lease_holder(kubectl, LEASE, CLUSTER_RESOURCE_NAMESPACE)


def is_lease(event: dict[str, Any]) -> bool:
    ref = event.get("objectRef") or {}
    return bool(ref.get("resource") == "leases" and ref.get("name") == LEASE)


def test_a_leader_whose_lease_answers_are_slow_stops_writing_before_the_standby_leads(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str,
    stopped_after: list[OperatorProcess],
) -> None:  # fmt: skip
    kubectl.run("delete", "lease", LEASE, "-n", CLUSTER_RESOURCE_NAMESPACE, "--ignore-not-found")
    relay = stack.faults.apiserver_relay("fence-lease")
    settings = {"leader_election": "true", "leader_election_lease": LEASE}
    leader = faulted_operator(
        stack, LEADER, SHARD, user=LEADER,
        leader_election_kubeconfig=str(stack.faults.kubeconfig(LEADER, via=relay)), **settings,
    )  # fmt: skip
    standby = faulted_operator(stack, STANDBY, SHARD, user=STANDBY, **settings)
    stopped_after.extend([leader, standby])
    leader.start()
    eventually(
        lambda: holder(kubectl) == LEADER,
        timeout=60,
        what="the first leads",
    )
    standby.start()
    eventually(lambda: standby.readiness()[0] == 200, timeout=60, what="the standby is ready")

    names = [f"fenced-{i}" for i in range(3)]
    for name in names:
        manifest = kubernetes_scheduledjob(
            name, namespace, {"image": "registry.example/fenced:1"}, schedule="0 0 1 1 *"
        )
        kubectl.apply(in_shard(manifest, SHARD))
    for name in names:
        eventually(lambda name=name: kubectl.get("cronjob", name, namespace),
                   what=f"the leader makes {name}'s CronJob")  # fmt: skip

    # Changes keep coming, so the leader writes (CronJobs, status) up to the moment it stops.
    stop = threading.Event()

    def keep_changing() -> None:
        minute = 0
        while not stop.is_set():
            minute = (minute + 1) % 60
            for name in names:
                patch = {"spec": {"schedule": f"{minute} 0 1 1 *"}}
                kubectl.run("patch", "scheduledjob", name, "-n", namespace, "--type=merge",
                            "-p", json.dumps(patch), check=False)  # fmt: skip
            stop.wait(0.5)

    changer = threading.Thread(target=keep_changing, daemon=True)
    changer.start()
    try:
        audit = stack.log_dir / "audit.log"
        eventually(lambda: any(not is_lease(e) for e in accepted_writes(audit, LEADER)),
                   what="the leader writes while it leads")  # fmt: skip
        relay.latency(ANSWER_DELAY, "answer")
        eventually(lambda: holder(kubectl) == STANDBY, timeout=90, interval=0.2,
                   what="the standby takes over from the slow leader")  # fmt: skip
        process = leader.proc
        assert process is not None
        assert process.wait(timeout=30) == 1, "losing the Lease ends the process non-zero"
        # The standby, now leading, writes too: the changes reach it.
        eventually(lambda: any(not is_lease(e) for e in accepted_writes(audit, STANDBY)),
                   timeout=60, what="the new leader acts")  # fmt: skip
    finally:
        stop.set()
        changer.join(timeout=30)
        relay.resume()

    acquired = min(received(e) for e in accepted_writes(audit, STANDBY) if is_lease(e))
    old_writes = [e for e in accepted_writes(audit, LEADER) if not is_lease(e)]
    last_old = max(received(e) for e in old_writes)
    gap = (acquired - last_old).total_seconds()
    print(f"old leader's last write {last_old.isoformat()}, the new leader's acquire "
          f"{acquired.isoformat()}: {gap:.1f}s apart")  # fmt: skip
    late = [(e["verb"], e["objectRef"], e["requestReceivedTimestamp"])
            for e in old_writes if received(e) >= acquired]  # fmt: skip
    assert not late, late
