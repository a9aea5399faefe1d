"""What /readyz answers (sundial/health.py), with the clock passed in."""

from __future__ import annotations

from typing import Any, cast

from sundial.health import Health
from sundial.leader import LeaderElector
from sundial.sharding import ShardCoordinator


def elector(leading: bool, last_contact: float | None) -> LeaderElector:
    return LeaderElector(leases=cast(Any, None), namespace="ns", name="lease", identity="a",
                         leading=leading, last_contact=last_contact)  # fmt: skip


def test_a_single_replica_is_ready_once_its_cache_is_filled() -> None:
    assert Health().readiness() == (False, "filling the cache")
    assert Health(cache_filled=True).readiness() == (True, "ready")


def test_the_leader_is_ready_once_its_cache_is_filled() -> None:
    leader = elector(leading=True, last_contact=0.0)
    assert not Health(elector=leader).readiness()[0]
    assert Health(elector=leader, cache_filled=True).readiness() == (True, "leading")


def test_a_standby_is_ready_while_it_can_read_the_lease() -> None:
    standby = elector(leading=False, last_contact=100.0)
    assert Health(elector=standby, clock=lambda: 110.0).readiness() == (True, "standby")
    assert not Health(elector=standby, clock=lambda: 116.0).readiness()[0]
    assert not Health(elector=elector(False, None), clock=lambda: 0.0).readiness()[0]


def test_a_failing_first_listing_is_named_while_it_is_tried_again() -> None:
    health = Health(cache_problem="429: Too many requests, please try again later.")
    ready, why = health.readiness()
    assert not ready
    assert (
        why
        == "filling the cache: the listing failed (429: Too many requests, please try again later.)"
    )


def coordinator(held: set[int], conflict: str | None = None) -> ShardCoordinator:
    return ShardCoordinator(leases=cast(Any, None), namespace="ns", identity="a_1",
                            shards=6, held=held, serving=set(held), conflict=conflict)  # fmt: skip


def test_a_sharded_replica_says_which_shards_it_serves() -> None:
    health = Health(shards=coordinator({3, 0}), cache_filled=True)
    assert health.readiness() == (True, "serving shards 0, 3 of 6")
    assert Health(shards=coordinator(set()), cache_filled=True).readiness() == (
        True, "serving no shard of 6 yet")  # fmt: skip
    assert not Health(shards=coordinator({1})).readiness()[0]  # its cache not yet filled


def test_a_replica_kept_out_by_another_shard_count_is_ready_and_says_why() -> None:
    # Ready on purpose: a rolling update that changes SUNDIAL_SHARDS waits for each new Pod
    # to be Ready before it stops an old one, and the new ones serve only once the old
    # count's replicas are gone; not Ready, the update would wait for ever.
    why = "replicas hold shard Leases for [4] shards, this one is configured with 6"
    health = Health(shards=coordinator(set(), conflict=why), cache_filled=True)
    assert health.readiness() == (True, f"serving no shard: {why}")
