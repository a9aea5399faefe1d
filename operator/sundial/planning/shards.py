"""Sharding: which replica serves which ScheduledJob, decided through Kubernetes itself.

The ScheduledJobs are cut into `shards` shards (SUNDIAL_SHARDS) by a stable hash of their
namespace and name, so every replica computes the same cut with no write to anyone's
object. Each shard has a Lease, held with the leader election protocol (leader.py,
planning/lease.py): the holder alone serves the shard's objects, and it stops before its
Lease can expire, so no two replicas ever write one object. Each replica also keeps a
member Lease of its own, so a replica that holds no shard yet is counted: the replicas
alive decide the fair share, and a replica holding more than its share lets the extra
shards go (after it has stopped serving them) for the newcomer to take. Nothing restarts.

The hash is blake2b, not Python's `hash()`, which is salted per process.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

SHARD_LEASE_PREFIX = "sundial-shard-"
MEMBER_LEASE_PREFIX = "sundial-replica-"
_SHARD_LEASE = re.compile(rf"^{SHARD_LEASE_PREFIX}(?P<shard>[0-9]+)-of-(?P<count>[1-9][0-9]*)$")


def shard_of(namespace: str, name: str, shards: int) -> int:
    """The shard a ScheduledJob belongs to: the same in every replica, for ever."""
    digest = hashlib.blake2b(f"{namespace}/{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def shard_lease_name(shard: int, shards: int) -> str:
    """The shard count is in the name: replicas configured with different counts cut the
    objects differently, and each sees the other's Leases (`foreign_counts`)."""
    return f"{SHARD_LEASE_PREFIX}{shard}-of-{shards}"


def parse_shard_lease(name: str) -> tuple[int, int] | None:
    """(shard, shard count) of a shard Lease's name; None for any other Lease."""
    found = _SHARD_LEASE.match(name)
    if found is None:
        return None
    return int(found["shard"]), int(found["count"])


def foreign_counts(held_lease_names: Iterable[str], shards: int) -> set[int]:
    """The other shard counts that live replicas hold Leases under. Two replicas with two
    counts could both serve one object, so a replica that sees any stops serving and says
    so; a count changed by a rolling update goes on once the old replicas are gone."""
    counts = {parsed[1] for name in held_lease_names if (parsed := parse_shard_lease(name))}
    return counts - {shards}


def member_lease_name(identity: str, shards: int) -> str:
    """A replica's own Lease: its identity made a valid object name (an identity may hold
    `_` or capitals; a Lease's name is a lowercase DNS subdomain). The shard count is in
    it: only replicas of one count share its shards (`members_of`)."""
    name = f"{_member_prefix(shards)}{identity}".lower()
    return re.sub(r"[^a-z0-9.-]+", "-", name)[:253].rstrip("-.")


def _member_prefix(shards: int) -> str:
    return f"{MEMBER_LEASE_PREFIX}of-{shards}-"


def members_of(live: dict[str, str], shards: int) -> list[str]:
    """The holders of live member Leases of replicas configured with `shards` (live:
    Lease name -> holder). Replicas of another count serve nothing while this count's
    replicas live, so they must not shrink this count's fair share."""
    prefix = _member_prefix(shards)
    return [holder for name, holder in live.items() if name.startswith(prefix)]


def fair_share(shards: int, replicas: int) -> int:
    """The most shards one replica holds while `replicas` are alive (at least one: this
    one): together they can always hold them all."""
    return -(-shards // max(replicas, 1))


@dataclass(frozen=True)
class Standing:
    """What one replica sees: the shards it holds, the shards no live replica holds
    (never held, released, or expired), and how many replicas are alive."""

    held: frozenset[int]
    free: frozenset[int]
    replicas: int


@dataclass(frozen=True)
class Moves:
    acquire: tuple[int, ...]
    release: tuple[int, ...]


def rebalance(standing: Standing, shards: int) -> Moves:
    """Take free shards up to the fair share; above it, let the highest go. A replica
    only ever takes what nobody holds, so a rebalance is a release by the one holding
    too many, then a take by the one holding too few: never two holders."""
    share = fair_share(shards, standing.replicas)
    held = sorted(standing.held)
    if len(held) > share:
        return Moves(acquire=(), release=tuple(held[share:]))
    wanted = share - len(held)
    return Moves(acquire=tuple(sorted(standing.free - standing.held)[:wanted]), release=())


def counted_replicas(member_holders: Iterable[str], me: str) -> int:
    """Replicas alive: the distinct holders of unexpired member Leases, this one included
    (its own member Lease may not be written yet)."""
    return len({*member_holders, me})
