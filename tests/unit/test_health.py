"""What /readyz answers (sundial/health.py), with the clock passed in."""

from __future__ import annotations

from typing import Any, cast

from sundial.health import Health
from sundial.leader import LeaderElector


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
