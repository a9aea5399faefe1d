"""Issue 25.15: the leader stops within its renew deadline however slowly renewals fail.

The Lease's calls are stood in for by slow coroutines (each answers within the Lease
client's own timeout, a third of the lease duration, as a slow apiserver would): before,
the deadline was checked only after a try returned, so the old leader went on acting for
about 22 s of a 15 s lease, while the standby took over at 15 s."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from sundial.leader import LeaderElector

LEASE_SECONDS = 1.5  # renew deadline 1.0 s, retry period 0.2 s


class SlowLeases:
    """The first read and write answer at once (the leader takes the Lease); from then on
    a read answers after `delay` and every write fails after `delay`."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0
        self.lease: dict[str, Any] | None = None

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls += 1
        if self.calls > 2:
            await asyncio.sleep(self.delay)
        return self.lease

    async def create(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        self.lease = {"metadata": {"name": name, "namespace": namespace,
                                   "resourceVersion": "1"}, "spec": spec}  # fmt: skip
        return self.lease

    async def replace(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        await asyncio.sleep(self.delay)
        raise OSError("no answer")


def test_the_leader_stops_leading_within_the_renew_deadline_of_its_last_renewal() -> None:
    leases = SlowLeases(delay=0.2)  # a try (read, failed write) takes 0.4 s; tries every 0.6 s
    elector = LeaderElector(leases=cast(Any, leases), namespace="ns", name="lease",
                            identity="a", lease_duration=LEASE_SECONDS)  # fmt: skip

    async def lead_then_lose() -> float:
        assert await elector.acquire(asyncio.Event())
        renewed = time.monotonic()
        await elector.hold()
        return time.monotonic() - renewed

    held_for = asyncio.run(lead_then_lose())
    assert not elector.leading
    # Stopped by the deadline (1.0 s), with a scheduling margin, never a whole try later.
    assert held_for < elector.renew_deadline + 0.1, held_for
