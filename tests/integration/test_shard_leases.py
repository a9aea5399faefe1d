"""Sharding's Leases (sundial/sharding.py) against the real apiserver: replicas joining,
one crashing, and one configured with another shard count. Judged by the Lease records
the apiserver holds (holderIdentity), not by the coordinators' own view.

One coordinator runs in this process, the one that crashes in a process of its own,
SIGKILLed. (An operator replica's SIGKILL, judged by the audit log's writes, comes with
the operator's sharded mode.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import pytest

from localstack import LocalStack
from localstack.apiserver import AUDITED_USER
from sundial.kube import LeaseClient, load_api_client
from sundial.leader import LeaderElector
from sundial.planning.shards import shard_lease_name
from sundial.sharding import ShardCoordinator
from support import Kubectl, audit_events

pytestmark = pytest.mark.cluster

SHARDS = 4
LEASE_SECONDS = 15.0  # the default: a crashed replica's shards are taken within 30 s


async def until(probe: Callable[[], Awaitable[bool]], what: str, within: float) -> float:
    """Seconds until `probe` holds (a loaded 2-core machine: generous deadlines)."""
    start = time.monotonic()
    while not await probe():
        if time.monotonic() - start > within:
            raise AssertionError(f"not within {within:.0f}s: {what}")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


REPLICA = """
import asyncio, sys
from sundial.kube import LeaseClient, load_api_client
from sundial.sharding import ShardCoordinator
kubeconfig, namespace, identity, shards, duration = sys.argv[1:]
leases = LeaseClient(load_api_client(kubeconfig), timeout=5.0)
coordinator = ShardCoordinator(leases, namespace, identity, int(shards), float(duration))
asyncio.run(coordinator.run(asyncio.Event()))
"""


def test_replicas_share_the_shards_and_take_over_a_crashed_ones(
    stack: LocalStack, namespace: str
) -> None:
    api = load_api_client(str(stack.kubeconfig))
    leases = LeaseClient(api, timeout=5.0)

    async def holders() -> dict[int, str]:
        """Each shard's holder as the apiserver has it ("" when none)."""
        found = {lease["metadata"]["name"]: (lease.get("spec") or {}).get("holderIdentity")
                 for lease in await leases.list(namespace)}  # fmt: skip
        return {s: found.get(shard_lease_name(s, SHARDS)) or "" for s in range(SHARDS)}

    def coordinator(identity: str, shards: int = SHARDS) -> ShardCoordinator:
        return ShardCoordinator(leases, namespace, identity, shards, LEASE_SECONDS)

    async def scenario() -> None:
        a = coordinator("replica-a")
        # While the shards taken are listed in, they are cached but not served yet: a
        # pass before the listing ends would take "not listed yet" for "missing".
        during_listing: list[tuple[set[int], set[int]]] = []

        async def listing(shards: tuple[int, ...]) -> None:
            during_listing.append((set(shards) & a.held, set(shards) & a.serving))

        a.on_acquired = listing
        stop_a = asyncio.Event()
        run_a = asyncio.create_task(a.run(stop_a))

        async def a_holds_all() -> bool:
            return set((await holders()).values()) == {"replica-a"}

        await until(a_holds_all, "a lone replica holds every shard", 30)
        assert during_listing[0] == (set(range(SHARDS)), set()), during_listing
        await until(lambda: _now(a.serving == a.held), "served once listed", 10)

        # A second replica joins: the first lets half go, the second takes them; the
        # server never shows a shard without a holder for long, nor names a third.
        b = await asyncio.create_subprocess_exec(
            sys.executable, "-c", REPLICA, str(stack.kubeconfig), namespace, "replica-b",
            str(SHARDS), str(LEASE_SECONDS),
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )  # fmt: skip

        async def halved() -> bool:
            held = await holders()
            return sorted(held.values()) == ["replica-a"] * 2 + ["replica-b"] * 2

        split = await until(halved, "the shards split two and two", 60)
        server = await holders()
        assert a.held == {s for s, h in server.items() if h == "replica-a"}
        b_shards = {s for s, h in server.items() if h == "replica-b"}

        # A third, configured with another shard count, serves nothing and says why.
        c = coordinator("replica-c", shards=8)
        await c.round()
        await c.round()
        assert c.held == set()
        assert c.conflict is not None
        assert "[4] shards" in c.conflict

        # Two such replicas (a rolling update to 8 shards, say) do not shrink the share of
        # the replicas of 4: counted, they would make it 1, and a and b would let two
        # shards go that no one may take until the update ends.
        d = coordinator("replica-d", shards=8)
        deadline = time.monotonic() + 5 * a.retry_period
        while time.monotonic() < deadline:
            await c.round()
            await d.round()
            held = await holders()
            assert "" not in held.values(), f"a shard left unserved: {held}"
            await asyncio.sleep(0.5)
        assert (c.held, d.held) == (set(), set())
        assert await halved()

        # b is SIGKILLed: nothing is released. a takes its shards once their Leases have
        # stood still for the lease duration: within 30 s.
        os.kill(b.pid, signal.SIGKILL)
        await b.wait()
        assert {s for s, h in (await holders()).items() if h == "replica-b"} == b_shards

        took = await until(a_holds_all, "the crashed replica's shards taken over", 45)
        assert took <= 30, f"took {took:.1f}s"
        print(f"split in {split:.1f}s; the killed replica's shards taken in {took:.1f}s")

        stop_a.set()
        await run_a
        assert set((await holders()).values()) == {""}, "a graceful stop releases all"

    try:
        asyncio.run(scenario())
    finally:
        subprocess.run(["pkill", "-KILL", "-f", "sundial.sharding import"], check=False)
        leases.close()
        api.close()


def test_a_held_lease_is_renewed_with_one_write_and_one_taken_meanwhile_is_let_go(
    stack: LocalStack, kubectl: Kubectl, namespace: str
) -> None:
    """The holder renews with one write on the Lease it last wrote (client-go's fast path):
    a sharded replica renews one Lease per shard every two seconds, and a read before
    each write doubled that. The write is a compare-and-swap, so a Lease someone else
    wrote meanwhile fails it, and the holder reads, sees the new holder and stops. Judged
    by the apiserver's audit log (every request of AUDITED_USER) and the Lease itself."""
    api = load_api_client(str(stack.faults.kubeconfig(AUDITED_USER)))
    leases = LeaseClient(api, timeout=5.0)
    elector = LeaderElector(leases=leases, namespace=namespace, name="renewed",
                            identity="holder", lease_duration=LEASE_SECONDS)  # fmt: skip

    def requests(verb: str) -> int:
        return sum(
            1 for event in audit_events(stack.log_dir / "audit.log")
            if (event.get("user") or {}).get("username") == AUDITED_USER
            and (ref := event.get("objectRef") or {}).get("namespace") == namespace
            and ref.get("name") == "renewed" and event.get("verb") == verb
        )  # fmt: skip

    async def scenario() -> None:
        assert await elector.acquire(asyncio.Event())
        holding = asyncio.create_task(elector.hold())
        renewals = 4
        await asyncio.sleep(elector.retry_period * (renewals + 0.5))
        assert not holding.done()
        # The audit log is written in batches: wait for the renewals to show.
        await until(lambda: _now(requests("update") >= renewals), "the renewals audited", 30)
        reads = requests("get")
        assert reads <= 1, f"{reads} reads for {requests('update')} renewals"

        # Someone else writes the Lease (a replica that judged it expired): the holder's
        # next renewal is refused, it reads, and stops holding.
        lease = json.loads(kubectl.run("get", "lease", "renewed", "-n", namespace,
                                       "-o", "json").stdout)  # fmt: skip
        lease["spec"]["holderIdentity"] = "usurper"
        kubectl.run("replace", "-f", "-", stdin=json.dumps(lease))
        async with asyncio.timeout(elector.renew_deadline + 5):
            await holding
        assert not elector.leading
        assert requests("get") > reads

    try:
        asyncio.run(scenario())
    finally:
        leases.close()
        api.close()


async def _now(value: bool) -> bool:
    return value
