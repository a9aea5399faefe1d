"""Leader election: one replica of several reconciles, the others wait on a Lease.

The protocol is client-go's leaderelection (what controller-runtime's managers use), with
its default timings: the leader renews every `retry_period`; it gives up leading when no
renewal succeeded for `renew_deadline`; a standby takes over once the record has stood
still for the whole `lease_duration`, which is longer than `renew_deadline`, so the old
leader has stopped before the new one starts. A graceful stop releases the Lease, and the
standby takes over on its next try.

kopf's peering was the other candidate. It freezes lower-priority operators while a
higher-priority one is seen, but two replicas of equal priority both run, and a crashed
peer's record stays until its TTL, with no fencing between: it cannot promise "exactly
one reconciles". No library gives an asyncio Lease elector (the kubernetes client's
leaderelection module is threaded and locks a ConfigMap), so this one is Sundial's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from urllib3.exceptions import HTTPError

from sundial.kube import ApiException, LeaseClient, api_error_message
from sundial.planning.lease import (
    LeaseRecord,
    Observation,
    claimed_spec,
    may_acquire,
    observe,
    released_spec,
)

log = logging.getLogger(__name__)
JITTER = 1.2  # client-go's JitterFactor for the standby's retries


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass
class LeaderElector:
    leases: LeaseClient
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    leading: bool = False
    # When the Lease was last read or written: a standby that can still reach it is a
    # healthy standby (readiness), one that cannot is not.
    last_contact: float | None = None
    _observation: Observation | None = None
    _lease: dict[str, Any] | None = None

    @property
    def renew_deadline(self) -> float:
        return self.lease_duration * 2 / 3

    @property
    def retry_period(self) -> float:
        return self.lease_duration * 2 / 15

    async def try_acquire_or_renew(self) -> bool:
        """One read and, when the Lease is free, expired or already ours, one write. A
        holder whose Lease is still valid writes first, on the Lease it last wrote
        (client-go's fast path): one request per renewal instead of two, which a sharded
        replica makes for every shard it holds. The write is a compare-and-swap on that
        resourceVersion: if anyone wrote the Lease since, it is refused, and the read
        below finds out who."""
        if await self._renew_as_written():
            return True
        try:
            lease = await self.leases.read(self.namespace, self.name)
            now = self.clock()
            if lease is None:
                written = await self.leases.create(self.namespace, self.name, self._claim(None))
            else:
                record = LeaseRecord.from_spec(lease.get("spec") or {})
                self._observation = observe(self._observation, record, now)
                self.last_contact = now
                if not may_acquire(self._observation, self.identity, now):
                    return False
                written = await self.leases.replace(lease, self._claim(record))
        except ApiException as error:
            # 409: another replica wrote the Lease first; anything else: try again later.
            if error.status != 409:
                log.warning("leader election: %s", api_error_message(error))
            return False
        except (OSError, HTTPError) as error:
            log.warning("leader election: the apiserver is unreachable: %s", error)
            return False
        self._wrote(written)
        return True

    async def _renew_as_written(self) -> bool:
        written, observed, now = self._lease, self._observation, self.clock()
        if not self.leading or written is None or observed is None:
            return False
        if observed.record.holder != self.identity:
            return False
        if now - observed.since >= self.lease_duration:  # expired by now: read first
            return False
        try:
            renewed = await self.leases.replace(written, self._claim(observed.record))
        except (ApiException, OSError, HTTPError) as error:
            log.debug("leader election: renewing as written failed, reading: %s", error)
            return False
        self._wrote(renewed)
        return True

    def _wrote(self, written: dict[str, Any]) -> None:
        self._lease = written
        self.last_contact = self.clock()
        self._observation = observe(None, LeaseRecord.from_spec(written["spec"]), self.last_contact)

    def seen(self, observation: Observation) -> None:
        """What a listing showed of this Lease (sharding reads all its Leases at once): a
        record unchanged since is judged expired on the listing's clock."""
        self._observation = observation

    def _claim(self, record: LeaseRecord | None) -> dict[str, Any]:
        return claimed_spec(record, self.identity, round(self.lease_duration), self.wall())

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait to lead; False when `stop` is set first."""
        log.info("leader election: %s waits for Lease %s/%s", self.identity,
                 self.namespace, self.name)  # fmt: skip
        while not stop.is_set():
            if await self.try_acquire_or_renew():
                self.leading = True
                log.info("leader election: %s leads", self.identity)
                return True
            delay = self.retry_period * random.uniform(1.0, JITTER)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # not wait_for: see WorkQueue.run_timer
                    await stop.wait()
        return False

    async def hold(self) -> None:
        """Renew until a renewal fails for `renew_deadline` or someone else holds the
        Lease; returns when leadership is lost.

        The deadline bounds the whole renewal, tries and waits alike, as client-go's
        renew loop does (a context with the deadline around its poll): checked only after a
        try returned, a try that began just before it (a read and a write, each up to the
        Lease client's timeout) let the old leader act for about 22 s of a 15 s lease,
        while the standby takes over at 15 s."""
        last_renewal = self.clock()
        while True:
            deadline = last_renewal + self.renew_deadline
            renewed = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - self.clock())):
                    await asyncio.sleep(self.retry_period)
                    renewed = await self.try_acquire_or_renew()
            if renewed:
                last_renewal = self.clock()
                continue
            held_by = self._observation.record.holder if self._observation else ""
            if held_by and held_by != self.identity:
                log.error("leader election: %s took the Lease; %s stops leading",
                          held_by, self.identity)  # fmt: skip
                break
            if self.clock() >= deadline:
                log.error("leader election: no renewal for %.0fs; %s stops leading",
                          self.renew_deadline, self.identity)  # fmt: skip
                break
        self.leading = False

    async def release(self) -> None:
        """Give the Lease up after a graceful stop; only ever a Lease this replica holds."""
        if not self.leading or self._lease is None:
            return
        self.leading = False
        record = LeaseRecord.from_spec(self._lease["spec"])
        try:
            await self.leases.replace(self._lease, released_spec(record, self.wall()))
            log.info("leader election: %s released the Lease", self.identity)
        except (ApiException, OSError, HTTPError) as error:
            log.warning("leader election: releasing the Lease failed (the standby takes "
                        "over when it expires): %s", error)  # fmt: skip
