"""Leader election over a coordination.k8s.io Lease, decided the way client-go's
leaderelection decides it; the reads and writes are in sundial/leader.py.

Expiry is judged on this process's own monotonic clock, never by comparing the Lease's
renewTime with the local wall clock: a replica takes over only once it has watched the
record stay unchanged for a whole leaseDurationSeconds, so clock skew between machines
cannot make two replicas lead at once. A record with no holder was released on purpose
(a graceful stop) and is free at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> LeaseRecord:
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


@dataclass(frozen=True)
class Observation:
    """The record last read, and when (monotonic seconds) it was first seen as it is."""

    record: LeaseRecord
    since: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """A record that changed (another renewal, another holder) restarts the clock."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def may_acquire(observation: Observation, identity: str, now: float) -> bool:
    record = observation.record
    if not record.holder or record.holder == identity:
        return True
    return now - observation.since >= record.duration_seconds


def micro_time(moment: datetime) -> str:
    """A Lease's MicroTime: RFC 3339 with microseconds, in UTC."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claimed_spec(
    record: LeaseRecord | None, identity: str, duration_seconds: int, now: datetime
) -> dict[str, Any]:
    """The spec that takes the Lease (or renews it, when this replica holds it already):
    acquireTime and leaseTransitions move only when the holder changes."""
    stamp = micro_time(now)
    same_holder = record is not None and record.holder == identity
    transitions = 0 if record is None else record.transitions + (0 if same_holder else 1)
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": record.acquire_time if same_holder and record else stamp,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }


def released_spec(record: LeaseRecord, now: datetime) -> dict[str, Any]:
    """What a graceful stop leaves (client-go's ReleaseOnCancel): no holder, so the
    standby takes over on its next try instead of a whole lease duration later."""
    return {
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "acquireTime": record.acquire_time,
        "renewTime": micro_time(now),
        "leaseTransitions": record.transitions,
    }
