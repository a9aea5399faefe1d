"""Sharded mode's Leases: this replica's share of the ScheduledJobs (planning/shards.py
decides; this module reads and writes the Leases).

Each round (the leader election's retry period) the replica renews its member Lease,
lists the namespace's Leases once, and moves toward its fair share: a shard to let go is
first no longer served (`on_releasing` returns once its passes have finished), then its
Lease is released; a free shard is taken with the leader election's compare-and-swap,
then cached (`on_acquired`, once for all the shards a round took: it lists them in) and
only then served. A held shard is
renewed by a `LeaderElector.hold` of its own; one whose renewal fails for the renew
deadline is lost, and `lost` is set: the replica must stop writing at once (as a leader
that lost its Lease does), because another replica takes the shard once its Lease has
stood still for the lease duration.

wiring._serve_shards gives the two moves their meaning (the cache, the queue, the
Temporal budget's share); __main__ stops the process when `lost` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from urllib3.exceptions import HTTPError

from sundial.kube import ApiException, LeaseClient, api_error_message
from sundial.leader import JITTER, LeaderElector
from sundial.planning.lease import LeaseRecord, Observation, may_acquire, observe
from sundial.planning.shards import (
    MEMBER_LEASE_PREFIX,
    Standing,
    counted_replicas,
    foreign_counts,
    member_lease_name,
    members_of,
    rebalance,
    shard_lease_name,
    shard_of,
)

log = logging.getLogger(__name__)

# A member Lease that stood still this many lease durations is a replica long gone: it is
# deleted, so replicas that come and go (each Pod a new identity) leave no Leases behind.
MEMBER_GONE_AFTER = 4


async def _nothing(shards: tuple[int, ...]) -> None:
    return None


async def _nothing_to_let_go(shard: int) -> None:
    return None


@dataclass
class ShardCoordinator:
    leases: LeaseClient
    namespace: str
    identity: str
    shards: int
    lease_duration: float = 15.0
    # Called once per round with the shards it took (one listing brings them all in).
    on_acquired: Callable[[tuple[int, ...]], Awaitable[None]] = _nothing
    on_releasing: Callable[[int], Awaitable[None]] = _nothing_to_let_go
    clock: Callable[[], float] = time.monotonic
    # The shards whose Leases this replica holds: their objects are cached (`caches`).
    held: set[int] = field(default_factory=set)
    # The held shards listed into the cache since they were taken: their objects are
    # reconciled (`serves`). Until then a pass could mistake "not listed yet" for
    # "missing": a Job not in the cache is a run that did not happen.
    serving: set[int] = field(default_factory=set)
    # Set when a held shard could not be renewed in time: stop writing now.
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    # Why this replica serves nothing though shards are free (another shard count is live).
    conflict: str | None = None
    _member: LeaderElector = field(init=False)
    _electors: dict[int, LeaderElector] = field(default_factory=dict)
    _holds: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    _observed: dict[str, Observation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._member = self._elector(member_lease_name(self.identity, self.shards))

    @property
    def retry_period(self) -> float:
        return self.lease_duration * 2 / 15

    def shard(self, key: tuple[str, str]) -> int:
        """The shard of the ScheduledJob (namespace, name)."""
        return shard_of(*key, self.shards)

    def caches(self, namespace: str, name: str) -> bool:
        """Whether the ScheduledJob (namespace, name), or what it owns, is cached here."""
        return self.shard((namespace, name)) in self.held

    def serves(self, namespace: str, name: str) -> bool:
        """Whether the ScheduledJob (namespace, name) is reconciled here."""
        return self.shard((namespace, name)) in self.serving

    def _elector(self, name: str) -> LeaderElector:
        return LeaderElector(
            leases=self.leases, namespace=self.namespace, name=name, identity=self.identity,
            lease_duration=self.lease_duration, clock=self.clock,
        )  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds until `stop`; then every shard is let go (served no more, released),
        unless one was lost."""
        try:
            while not stop.is_set() and not self.lost.is_set():
                try:
                    await self.round()
                except Exception:  # a round's surprise must not end the rounds unseen
                    log.exception("sharding: a round failed; the next one is due as usual")
                delay = self.retry_period * random.uniform(1.0, JITTER)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()
        finally:
            # Lost: the Lease route failed, and releasing through it would hold the exit
            # for its timeouts (43 s seen through a stalled relay). The shards still held
            # expire within the lease duration and are taken then.
            if not self.lost.is_set():
                for shard in sorted(self.held):
                    await self._release(shard)
                await self._member.release()

    async def round(self) -> None:
        if await self._member.try_acquire_or_renew():
            self._member.leading = True
        try:
            listed = await self.leases.list(self.namespace)
        except (ApiException, OSError, HTTPError) as error:
            message = api_error_message(error) if isinstance(error, ApiException) else error
            log.warning("sharding: cannot list Leases: %s", message)
            return
        now = self.clock()
        live: dict[str, str] = {}  # lease name -> holder, of Leases not expired
        for lease in listed:
            name = lease["metadata"]["name"]
            record = LeaseRecord.from_spec(lease.get("spec") or {})
            observation = observe(self._observed.get(name), record, now)
            self._observed[name] = observation
            if record.holder and not may_acquire(observation, "", now):
                live[name] = record.holder
            elif name.startswith(MEMBER_LEASE_PREFIX) and self._long_gone(observation, now):
                await self._delete_member(lease)
        names = {lease["metadata"]["name"] for lease in listed}
        self._observed = {n: o for n, o in self._observed.items() if n in names}
        foreign = foreign_counts(live, self.shards)
        if foreign:
            self._conflict(f"replicas hold shard Leases for {sorted(foreign)} shards, this "
                           f"one is configured with {self.shards}: it serves nothing until "
                           "they are gone")  # fmt: skip
            for shard in sorted(self.held):
                await self._release(shard)
            return
        self.conflict = None
        members = members_of(live, self.shards)
        free = frozenset(
            shard for shard in range(self.shards)
            if shard_lease_name(shard, self.shards) not in live
        )  # fmt: skip
        standing = Standing(frozenset(self.held), free, counted_replicas(members, self.identity))
        moves = rebalance(standing, self.shards)
        for shard in moves.release:
            await self._release(shard)
        taken = [shard for shard in moves.acquire if await self._acquire(shard)]
        if taken:
            await self.on_acquired(tuple(taken))
            self.serving.update(shard for shard in taken if shard in self.held)

    def _long_gone(self, observation: Observation, now: float) -> bool:
        duration = observation.record.duration_seconds or self.lease_duration
        return now - observation.since >= MEMBER_GONE_AFTER * duration

    async def _delete_member(self, lease: dict[str, Any]) -> None:
        try:
            await self.leases.delete(lease)
            log.info("sharding: deleted the member Lease %s of a replica long gone",
                     lease["metadata"]["name"])  # fmt: skip
        except (ApiException, OSError, HTTPError) as error:
            log.warning("sharding: deleting a gone replica's Lease failed: %s", error)

    def _conflict(self, message: str) -> None:
        if self.conflict != message:
            log.error("sharding: %s", message)
        self.conflict = message

    async def _acquire(self, shard: int) -> bool:
        name = shard_lease_name(shard, self.shards)
        elector = self._electors.setdefault(shard, self._elector(name))
        if (observation := self._observed.get(name)) is not None:
            elector.seen(observation)  # else the elector would watch it expire again
        if not await elector.try_acquire_or_renew():
            return False
        elector.leading = True
        self.held.add(shard)
        self._holds[shard] = asyncio.create_task(self._hold(shard, elector), name=name)
        log.info("sharding: %s serves shard %d of %d", self.identity, shard, self.shards)
        return True

    async def _hold(self, shard: int, elector: LeaderElector) -> None:
        await elector.hold()
        if shard in self.held:  # not let go on purpose: lost
            self.held.discard(shard)
            self.serving.discard(shard)
            log.error("sharding: %s lost shard %d", self.identity, shard)
            self.lost.set()

    async def _release(self, shard: int) -> None:
        """Served no more first (its passes finished), then the Lease let go."""
        self.held.discard(shard)
        self.serving.discard(shard)
        await self.on_releasing(shard)
        hold = self._holds.pop(shard, None)
        if hold is not None:
            hold.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hold
        elector = self._electors.get(shard)
        if elector is not None:
            await elector.release()
            log.info("sharding: %s let shard %d of %d go", self.identity, shard, self.shards)
