"""The shard cut and the fair-share rebalance (planning/shards.py), pure."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest

from sundial.planning.shards import (
    Moves,
    Standing,
    counted_replicas,
    fair_share,
    foreign_counts,
    member_lease_name,
    members_of,
    parse_shard_lease,
    rebalance,
    shard_lease_name,
    shard_of,
)


def test_the_cut_is_the_same_in_another_process() -> None:
    """Python's hash() is salted per process: two replicas would cut differently."""
    names = [("team-a", f"job-{i}") for i in range(50)]
    here = [shard_of(ns, name, 7) for ns, name in names]
    script = (
        "from sundial.planning.shards import shard_of;"
        f"print([shard_of(ns, name, 7) for ns, name in {names!r}])"
    )
    there = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True,
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(sys.path)},
    ).stdout  # fmt: skip
    assert there.strip() == str(here)


def test_the_cut_spreads_realistic_names_evenly() -> None:
    counts = Counter(
        shard_of(f"team-{t}", f"nightly-report-{j}", 8) for t in range(100) for j in range(100)
    )
    assert set(counts) == set(range(8))
    mean = 10_000 / 8  # each shard within 10 % of it: about four standard deviations
    assert all(abs(count - mean) < 0.1 * mean for count in counts.values()), counts


def test_the_namespace_is_part_of_the_cut() -> None:
    assert len({shard_of(f"ns-{i}", "same-name", 16) for i in range(100)}) > 1


@pytest.mark.parametrize(
    ("shards", "replicas", "share"),
    [(4, 1, 4), (4, 2, 2), (4, 3, 2), (5, 2, 3), (2, 5, 1), (3, 0, 3)],
)
def test_the_fair_share_lets_the_replicas_hold_every_shard(
    shards: int, replicas: int, share: int
) -> None:
    assert fair_share(shards, replicas) == share
    assert fair_share(shards, replicas) * max(replicas, 1) >= shards


def test_a_lone_replica_takes_every_free_shard() -> None:
    moves = rebalance(Standing(held=frozenset(), free=frozenset(range(4)), replicas=1), 4)
    assert moves == Moves(acquire=(0, 1, 2, 3), release=())


def test_a_replica_above_its_share_releases_and_takes_nothing() -> None:
    moves = rebalance(Standing(held=frozenset(range(4)), free=frozenset(), replicas=2), 4)
    assert moves == Moves(acquire=(), release=(2, 3))


def test_a_replica_never_takes_a_shard_someone_holds() -> None:
    moves = rebalance(Standing(held=frozenset({0}), free=frozenset({3}), replicas=2), 4)
    assert moves == Moves(acquire=(3,), release=())


def test_replicas_taking_turns_converge_to_one_holder_per_shard() -> None:
    """Three replicas join one by one and one leaves: after each change, turns of
    rebalancing end with every shard held by exactly one replica, none above its share."""
    shards = 8
    holder: dict[int, str] = {}

    def settle(replicas: list[str]) -> None:
        for _ in range(10):
            for me in replicas:
                standing = Standing(
                    held=frozenset(s for s, h in holder.items() if h == me),
                    free=frozenset(s for s in range(shards) if s not in holder),
                    replicas=counted_replicas(replicas, me),
                )
                moves = rebalance(standing, shards)
                for shard in moves.release:
                    del holder[shard]
                for shard in moves.acquire:
                    assert shard not in holder, "took a held shard"
                    holder[shard] = me

    for replicas in (["a"], ["a", "b"], ["a", "b", "c"], ["b", "c"]):
        for gone in set(holder.values()) - set(replicas):  # its Leases expired
            holder = {s: h for s, h in holder.items() if h != gone}
        settle(replicas)
        assert sorted(holder) == list(range(shards)), (replicas, holder)
        share = fair_share(shards, len(replicas))
        assert max(Counter(holder.values()).values()) <= share, (replicas, holder)
        assert set(holder.values()) == set(replicas), (replicas, holder)


def test_a_shard_leases_name_carries_the_count_and_reads_back() -> None:
    assert parse_shard_lease(shard_lease_name(3, 8)) == (3, 8)
    assert parse_shard_lease("sundial-leader") is None
    assert parse_shard_lease("sundial-shard-3-of-0") is None


def test_a_replica_sees_leases_held_under_another_count() -> None:
    held = [shard_lease_name(0, 4), shard_lease_name(1, 8), "sundial-replica-a"]
    assert foreign_counts(held, 4) == {8}
    assert foreign_counts(held[:1], 4) == set()


def test_a_member_leases_name_is_valid_whatever_the_identity() -> None:
    name = member_lease_name("Host_Name_1a2b3c", 6)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), name
    assert name.startswith("sundial-replica-of-6-host-name-1a2b3c")
    assert member_lease_name("twin_1", 6) != member_lease_name("twin_2", 6)


def test_replicas_of_another_shard_count_are_not_counted_in_the_fair_share() -> None:
    """A rolling update from 6 shards to 4 adds replicas that serve nothing until the old
    ones are gone. Counted, they would shrink the old replicas' share: 3 old and 3 new
    make a share of 1, the old replicas let 3 shards go, and no one may take them."""
    live = {member_lease_name(r, 6): r for r in ("old-a", "old-b", "old-c")}
    live |= {member_lease_name(r, 4): r for r in ("new-a", "new-b", "new-c")}
    live |= {shard_lease_name(0, 6): "old-a", "sundial-leader": "someone"}
    assert sorted(members_of(live, 6)) == ["old-a", "old-b", "old-c"]
    assert fair_share(6, counted_replicas(members_of(live, 6), "old-a")) == 2
    assert sorted(members_of(live, 4)) == ["new-a", "new-b", "new-c"]
    # Counts that share leading digits are not mixed up.
    assert members_of({member_lease_name("x", 12): "x"}, 1) == []
