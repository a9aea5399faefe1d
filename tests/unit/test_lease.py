"""Leader election's decisions (sundial/planning/lease.py), with the clock passed in."""

from __future__ import annotations

from datetime import UTC, datetime

from sundial.planning.lease import (
    LeaseRecord,
    claimed_spec,
    may_acquire,
    micro_time,
    observe,
    released_spec,
)

NOW = datetime(2026, 12, 3, 12, 0, 0, 123456, tzinfo=UTC)


def record(holder: str = "a", renew: str = "t1", transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, 15, "t0", renew, transitions)


def test_a_held_lease_is_taken_only_after_it_stood_still_for_its_duration() -> None:
    seen = observe(None, record(), now=100.0)
    assert not may_acquire(seen, "b", now=114.9)
    assert may_acquire(observe(seen, record(), now=115.0), "b", now=115.0)


def test_a_renewal_restarts_the_standby_clock() -> None:
    seen = observe(None, record(renew="t1"), now=100.0)
    renewed = observe(seen, record(renew="t2"), now=110.0)
    assert renewed.since == 110.0
    assert not may_acquire(renewed, "b", now=120.0)
    assert may_acquire(renewed, "b", now=125.0)


def test_the_wall_clock_in_the_record_is_never_compared_with_ours() -> None:
    """A renewTime far in the past (a skewed clock) does not make the Lease free: only
    watching it stand still does."""
    stale = LeaseRecord("a", 15, "2000-01-01T00:00:00.000000Z", "2000-01-01T00:00:00.000000Z", 3)
    assert not may_acquire(observe(None, stale, now=5.0), "b", now=5.0)


def test_a_released_or_own_lease_is_free_at_once() -> None:
    assert may_acquire(observe(None, record(holder=""), now=0.0), "b", now=0.0)
    assert may_acquire(observe(None, record(holder="b"), now=0.0), "b", now=0.0)


def test_taking_over_counts_a_transition_and_renewing_keeps_the_acquire_time() -> None:
    taken = claimed_spec(record(holder="a", transitions=2), "b", 15, NOW)
    assert taken["holderIdentity"] == "b"
    assert taken["leaseTransitions"] == 3
    assert taken["acquireTime"] == taken["renewTime"] == "2026-12-03T12:00:00.123456Z"
    renewed = claimed_spec(LeaseRecord.from_spec(taken), "b", 15, NOW.replace(second=2))
    assert renewed["leaseTransitions"] == 3
    assert renewed["acquireTime"] == taken["acquireTime"]
    assert renewed["renewTime"] == "2026-12-03T12:00:02.123456Z"


def test_a_new_lease_starts_at_zero_transitions() -> None:
    assert claimed_spec(None, "a", 15, NOW)["leaseTransitions"] == 0


def test_release_leaves_no_holder() -> None:
    released = released_spec(record(holder="a", transitions=4), NOW)
    assert released["holderIdentity"] is None
    assert released["leaseTransitions"] == 4
    assert LeaseRecord.from_spec(released).holder == ""
    assert micro_time(NOW) == released["renewTime"]
