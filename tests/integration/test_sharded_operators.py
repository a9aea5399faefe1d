"""Sharded mode (SUNDIAL_SHARDS, issue 32 part 2): two operator processes split the
ScheduledJobs through one Lease per shard; a replica joining takes half without a restart
of the other, a SIGKILLed replica's shards are taken over within 30 s, and a replica
given another shard count serves nothing until the old count's replicas are gone. Judged by the
apiserver: the shard Leases' holders, and the audit log's writes (who changed each
CronJob and each status), never by Sundial's own status."""

from __future__ import annotations

import itertools
import json
import signal
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from localstack import LocalStack
from localstack.apiserver import AUDITED_USER
from sundial.planning.shards import parse_shard_lease, shard_of
from support import (
    Kubectl,
    OperatorProcess,
    accepted_writes,
    audit_events,
    eventually,
    faulted_operator,
    in_shard,
    kubernetes_scheduledjob,
    no_retry_job,
    ready,
    received,
    sample,
    scrape,
    shard_holders,
)

pytestmark = pytest.mark.cluster

SHARD = "sharded"
FENCED = "shard-fence"
STALLED = "shard-fence-a"  # its own user: what it wrote is told apart
MANAGED = "app.kubernetes.io/managed-by=sundial"
SHARDS = 4
OBJECTS = 12
TAKEOVER_TARGET = 30.0


def replica(stack: LocalStack, name: str, namespace: str, shards: int = SHARDS) -> OperatorProcess:
    """A replica in sharded mode, as a user whose every request the audit log keeps."""
    return faulted_operator(
        stack, name, SHARD, user=AUDITED_USER, shards=str(shards),
        leader_election_namespace=namespace,
    )  # fmt: skip


def holders(kubectl: Kubectl, namespace: str, shards: int = SHARDS) -> dict[int, str]:
    return shard_holders(kubectl, namespace, shards)


def split_two_and_two(kubectl: Kubectl, namespace: str, first: str, second: str) -> dict[int, str]:
    """Each shard's holder once the two replicas hold two shards each."""
    return eventually(
        lambda: sorted((held := holders(kubectl, namespace)).values())
        == [first] * 2 + [second] * 2 and held,
        timeout=60, what="the shards split two and two",
    )  # fmt: skip


def writes(audit_log: Path, namespace: str) -> list[tuple[str, str, str]]:
    """(object name, what, writer) of each accepted write to the namespace's CronJobs and
    ScheduledJob statuses, in the order the apiserver took them."""
    taken = [
        event for event in audit_events(audit_log)
        if (ref := event.get("objectRef") or {}).get("namespace") == namespace
        and (ref.get("resource"), ref.get("subresource"), event.get("verb")) in {
            ("cronjobs", None, "create"), ("cronjobs", None, "update"),
            ("scheduledjobs", "status", "patch")}
        and (event.get("responseStatus") or {}).get("code", 200) < 300
        and "dryRun" not in event.get("requestURI", "")
    ]  # fmt: skip
    taken.sort(key=lambda event: event["stageTimestamp"])
    return [
        (event["objectRef"].get("name", ""), event["objectRef"]["resource"],
         event.get("userAgent", "").rpartition("(")[2].rstrip(")"))
        for event in taken
    ]  # fmt: skip


def own_listings(audit_log: Path, replica: str) -> Counter[str]:
    """The listings Sundial itself made (not kopf's watches), by resource, per the audit
    log: its User-Agent names the replica."""
    return Counter(
        (event.get("objectRef") or {}).get("resource", "")
        for event in audit_events(audit_log)
        if event.get("verb") == "list"
        and event.get("userAgent", "").endswith(f"({replica})")
        and "watch=true" not in event.get("requestURI", "")
    )


def reschedule(
    kubectl: Kubectl, namespace: str, names: list[str], schedule: str, *, check: bool = True
) -> None:
    for name in names:
        kubectl.run("patch", "scheduledjob", name, "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"schedule": schedule}}), check=check)  # fmt: skip


def cached(operator: OperatorProcess, resource: str) -> float:
    """What the replica holds in its watch cache (sundial_cached_objects)."""
    return scrape(operator.metrics_url)[sample("sundial_cached_objects", resource=resource)]


def sundial_cronjobs(kubectl: Kubectl) -> int:
    listed = json.loads(kubectl.run("get", "cronjobs", "-A", "-l", MANAGED, "-o", "json").stdout)
    return len(listed["items"])


def cronjob_schedules(kubectl: Kubectl, namespace: str) -> dict[str, str]:
    listed = json.loads(kubectl.run("get", "cronjobs", "-n", namespace, "-o", "json").stdout)
    return {c["metadata"]["name"]: c["spec"]["schedule"] for c in listed["items"]}


def test_two_replicas_split_the_shards_and_one_takes_over_a_killed_ones(
    kubectl: Kubectl, stack: LocalStack, crd_installed: None, namespace: str
) -> None:
    busybox = stack.node.images["busybox"] if stack.with_node else "busybox"
    names = [f"job-{i}" for i in range(OBJECTS)]
    shard_of_name = {name: shard_of(namespace, name, SHARDS) for name in names}
    a, b = replica(stack, "shard-a", namespace), replica(stack, "shard-b", namespace)
    c = replica(stack, "shard-c", namespace, shards=6)
    audit = stack.log_dir / "audit.log"
    try:
        a.start()
        for name in names:
            job = kubernetes_scheduledjob(name, namespace, no_retry_job(busybox, "true"),
                                          schedule="0 0 1 1 *")  # fmt: skip
            kubectl.apply(in_shard(job, SHARD))
        eventually(lambda: set(holders(kubectl, namespace).values()) == {"shard-a"},
                   what="a lone replica holds every shard")  # fmt: skip
        for name in names:
            eventually(lambda name=name: ready(kubectl, name, namespace), timeout=90,
                       what=f"{name} Ready")  # fmt: skip
        # Taking its four shards listed the ScheduledJobs once, not everything four times.
        listings = own_listings(audit, "shard-a")
        assert listings["cronjobs"] == 1, listings
        assert listings["scheduledjobs"] <= 2, listings

        # A second replica joins; the first is not restarted.
        b.start()
        split = split_two_and_two(kubectl, namespace, "shard-a", "shard-b")
        # Each caches its own shards' ScheduledJobs, CronJobs and Jobs only: together,
        # every Sundial CronJob of the cluster once (other tests' too: the cut is by the
        # owner's namespace/name, whatever the label selector).
        replicas = {"shard-a": a, "shard-b": b}
        mine = {r: sum(1 for n in names if split[shard_of_name[n]] == r) for r in replicas}

        def caching(resource: str) -> dict[str, float]:
            return {r: cached(replica, resource) for r, replica in replicas.items()}

        eventually(lambda: caching("scheduledjobs") == mine, timeout=30,
                   what="each replica caching its shards' ScheduledJobs")  # fmt: skip
        eventually(lambda: sum((held := caching("cronjobs")).values()) == sundial_cronjobs(kubectl)
                   and all(held[r] >= mine[r] for r in replicas),
                   timeout=30, what="every Sundial CronJob cached by one replica")  # fmt: skip
        reschedule(kubectl, namespace, names, "0 0 2 1 *")
        eventually(lambda: cronjob_schedules(kubectl, namespace)
                   == dict.fromkeys(names, "0 0 2 1 *"), timeout=90,
                   what="every CronJob rescheduled while split")  # fmt: skip
        a.assert_alive()
        # Each change was made by the replica whose Lease holds the object's shard.
        after_split = writes(audit, namespace)
        for name in names:
            updates = [w for n, what, w in after_split if n == name and what == "cronjobs"]
            assert updates[-1] == split[shard_of_name[name]], (name, updates, split)

        # The replica holding shards is killed: the other takes them within 30 s.
        killed = time.monotonic()
        b.signal(signal.SIGKILL)
        eventually(lambda: set(holders(kubectl, namespace).values()) == {"shard-a"},
                   timeout=60, interval=0.2,
                   what="the killed replica's shards taken over")  # fmt: skip
        took = time.monotonic() - killed
        assert took < TAKEOVER_TARGET, f"taken over in {took:.1f}s"
        reschedule(kubectl, namespace, names, "0 0 3 1 *")
        eventually(lambda: cronjob_schedules(kubectl, namespace)
                   == dict.fromkeys(names, "0 0 3 1 *"), timeout=90,
                   what="every CronJob rescheduled after the takeover")  # fmt: skip
        for name in names:
            eventually(lambda name=name: ready(kubectl, name, namespace), timeout=90,
                       what=f"{name} Ready after the takeover")  # fmt: skip

        # The count changed under a running replica (a rolling update to 6 shards): the
        # new replica serves nothing while a replica of 4 lives, says so in /readyz (200:
        # the update must go on) and its metrics, and does not shrink a's share.
        c.start()
        kept_out = "serving no shard: replicas hold shard Leases for [4]"
        eventually(lambda: c.readiness()[1].startswith(kept_out), timeout=60,
                   what="the replica of 6 shards saying why it serves nothing")  # fmt: skip
        assert c.readiness()[0] == 200, "Ready all the same: a rolling update goes on"
        assert scrape(c.metrics_url)[("sundial_shard_conflict", frozenset())] == 1
        reschedule(kubectl, namespace, names, "0 0 4 1 *")
        eventually(lambda: cronjob_schedules(kubectl, namespace)
                   == dict.fromkeys(names, "0 0 4 1 *"), timeout=90,
                   what="every CronJob rescheduled beside a replica of 6")  # fmt: skip
        assert set(holders(kubectl, namespace).values()) == {"shard-a"}
        assert set(holders(kubectl, namespace, 6).values()) == {""}
        # The old replica goes (its Leases released): the new one takes every shard of 6.
        a.stop()
        gone = time.monotonic()
        eventually(lambda: set(holders(kubectl, namespace, 6).values()) == {"shard-c"},
                   timeout=60, what="the replica of 6 takes its shards")  # fmt: skip
        count_changed = time.monotonic() - gone
        assert c.readiness()[1].startswith("serving shards 0, 1, 2, 3, 4, 5 of 6")
        reschedule(kubectl, namespace, names, "0 0 5 1 *")
        eventually(lambda: cronjob_schedules(kubectl, namespace)
                   == dict.fromkeys(names, "0 0 5 1 *"), timeout=90,
                   what="every CronJob rescheduled by the replica of 6")  # fmt: skip
    finally:
        a.stop()
        b.stop()
        c.stop()

    # Never two writers at once: each object's writer changes at most three times (a -> b
    # at the split, for b's shards; b -> a at the kill; a -> c once a was gone), and only
    # the shard's holder wrote: c nothing while a lived.
    every = writes(audit, namespace)
    for name in names:
        writers = [w for n, _, w in every if n == name]
        assert set(writers) <= {"shard-a", "shard-b", "shard-c"}, (name, writers)
        changes = sum(1 for x, y in itertools.pairwise(writers) if x != y)
        allowed = 3 if split[shard_of_name[name]] == "shard-b" else 1
        assert changes <= allowed, (name, writers)
        assert writers[-1] == "shard-c", (name, writers)
        first_c = writers.index("shard-c")
        assert "shard-a" not in writers[first_c:], (name, writers)
    print(f"split {split}; a SIGKILLed replica's shards taken over in {took:.1f}s; "
          f"the replica of 6 served {count_changed:.1f}s after the old went")  # fmt: skip


def test_two_replicas_given_one_name_by_mistake_still_split_the_shards(
    kubectl: Kubectl, stack: LocalStack, crd_installed: None, namespace: str
) -> None:
    """SUNDIAL_POD_NAME set to one value for two replicas: each process still holds its
    Leases under an identity of its own, so they split the shards instead of both taking
    every one for theirs. Judged by the Leases' holders on the apiserver."""
    twins = [replica(stack, "twin", namespace), replica(stack, "twin", namespace)]
    twins[1].log_file = stack.log_dir / "operator-twin-2.log"

    def held_by() -> dict[int, str]:
        leases = json.loads(kubectl.run("get", "leases", "-n", namespace, "-o", "json").stdout)
        return {
            parsed[0]: (lease.get("spec") or {}).get("holderIdentity") or ""
            for lease in leases["items"]
            if (parsed := parse_shard_lease(lease["metadata"]["name"])) is not None
        }

    try:
        for twin in twins:
            twin.start()
        split = eventually(
            lambda: sorted(Counter((held := held_by()).values()).values()) == [2, 2]
            and "" not in held.values() and held,
            timeout=60, what="the twins hold two shards each, under two identities",
        )  # fmt: skip
        assert all(holder.startswith("twin_") for holder in split.values()), split
    finally:
        for twin in twins:
            twin.stop()


def test_a_replica_that_cannot_renew_its_shards_stops_writing_before_another_takes_them(
    kubectl: Kubectl, stack: LocalStack, crd_installed: None, namespace: str,
    stopped_after: list[OperatorProcess],
) -> None:  # fmt: skip
    """A replica whose Lease requests stall (its Lease client goes through a relay that
    holds every answer past the client's timeout; its other calls go directly and keep
    writing) loses its shards: it stops at its renew deadline and exits 1, and the other
    takes them once their Leases have stood still. Judged by the audit log: no write of
    the stalled replica's user came after the other's first write to one of its shard
    Leases."""
    began = datetime.now(UTC)
    relay = stack.faults.apiserver_relay("shard-fence")
    settings = {"shards": str(SHARDS), "leader_election_namespace": namespace}
    # b as the audited user: its Lease writes in the test's namespace are kept too.
    lease_route = stack.faults.kubeconfig(STALLED, via=relay)
    a = faulted_operator(stack, "fence-a", FENCED, user=STALLED,
                         leader_election_kubeconfig=str(lease_route), **settings)  # fmt: skip
    b = faulted_operator(stack, "fence-b", FENCED, user=AUDITED_USER, **settings)
    stopped_after.extend([a, b])
    names = [f"fenced-{i}" for i in range(8)]
    a.start()
    eventually(lambda: set(holders(kubectl, namespace).values()) == {"fence-a"},
               timeout=60, what="a lone replica holds every shard")  # fmt: skip
    b.start()
    split = split_two_and_two(kubectl, namespace, "fence-a", "fence-b")
    a_shards = {shard for shard, holder in split.items() if holder == "fence-a"}
    for name in names:
        job = kubernetes_scheduledjob(name, namespace, {"image": "registry.example/fenced:1"},
                                      schedule="0 0 1 1 *")  # fmt: skip
        kubectl.apply(in_shard(job, FENCED))

    stop = threading.Event()

    def keep_changing() -> None:  # both replicas write up to the moment one stops
        minute = 0
        while not stop.is_set():
            minute = (minute + 1) % 60
            reschedule(kubectl, namespace, names, f"{minute} 0 1 1 *", check=False)
            stop.wait(0.5)

    changer = threading.Thread(target=keep_changing, daemon=True)
    changer.start()
    audit = stack.log_dir / "audit.log"
    try:
        eventually(lambda: any(not is_lease(e) for e in accepted_writes(audit, STALLED)),
                   timeout=60, what="a writes while it holds its shards")  # fmt: skip
        relay.latency(7.0, "answer")  # past the Lease client's timeout (5 s)
        eventually(lambda: set(holders(kubectl, namespace).values()) == {"fence-b"},
                   timeout=90, interval=0.2, what="b takes the stalled one's shards")  # fmt: skip
        assert a.proc is not None
        assert a.proc.wait(timeout=30) == 1, "losing a shard ends the process non-zero"
        a.proc = None
    finally:
        stop.set()
        changer.join(timeout=30)
        relay.resume()

    # This run's writes in this namespace only: the audited user is other tests' too.
    def here(e: dict[str, Any]) -> bool:
        return received(e) >= began and e["objectRef"].get("namespace") == namespace

    b_writes = [e for e in accepted_writes(audit, AUDITED_USER) if here(e)]
    a_writes = [e for e in accepted_writes(audit, STALLED) if here(e) and not is_lease(e)]
    taken_over = min(
        received(e) for e in b_writes
        if (parsed := parse_shard_lease(e["objectRef"].get("name", ""))) is not None
        and e["objectRef"].get("resource") == "leases" and parsed[0] in a_shards
    )  # fmt: skip
    late = [(e["verb"], e["objectRef"].get("name"), e["requestReceivedTimestamp"])
            for e in a_writes if received(e) >= taken_over]  # fmt: skip
    assert not late, late
    last = max(received(e) for e in a_writes)
    print(f"the stalled replica's last write {(taken_over - last).total_seconds():.1f}s "
          "before the other took its first shard")  # fmt: skip


def is_lease(event: dict[str, Any]) -> bool:
    return (event.get("objectRef") or {}).get("resource") == "leases"
