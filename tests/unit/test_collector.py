"""Full garbage collections run on the operator's timer, not whenever the heap turns over
(collector.py): a churning heap no longer stops the event loop every half minute."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from sundial.collector import collect_every, collect_on_a_timer
from sundial.metrics import Metrics


@pytest.fixture
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def full_collections(metrics: Metrics) -> float:
    count = metrics.registry.get_sample_value("sundial_gc_pause_seconds_count", {"generation": "2"})
    return count or 0.0


def churn() -> None:
    """What the watch cache does: long-lived objects replaced by new ones, over and over."""
    kept: list[list[object]] = [[index] for index in range(100_000)]
    for _ in range(6):
        kept = [[index, {"status": index}] for index in range(100_000)]
    del kept


def test_a_churning_heap_makes_full_collections_by_default(collector_restored: None) -> None:
    """The control: with CPython's own thresholds the same churn does collect in full."""
    metrics = Metrics()
    with metrics.watching_gc():
        churn()
    assert full_collections(metrics) >= 1


def test_full_collections_wait_for_the_timer(collector_restored: None) -> None:
    metrics = Metrics()
    collect_on_a_timer()
    with metrics.watching_gc():
        churn()
        assert full_collections(metrics) == 0
        young = metrics.registry.get_sample_value(
            "sundial_gc_pause_seconds_count", {"generation": "0"}
        )
        assert young, "young collections still run"

        async def one_round() -> None:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(collect_every(0.05), timeout=0.3)

        asyncio.run(one_round())
        assert full_collections(metrics) >= 1
