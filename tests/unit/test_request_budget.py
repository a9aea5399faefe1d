"""The request budget (backends/temporal/limits.RequestBudget): a token bucket shared by
every Temporal call, on a clock the test moves (no wall time, so no flake)."""

from __future__ import annotations

import asyncio

from sundial.backends.temporal.limits import RequestBudget


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_burst_then_the_rate() -> None:
    clock = Clock()
    taken: list[str] = []
    budget = RequestBudget(4, burst=2, on_request=taken.append, clock=clock, sleep=clock.sleep)

    async def take(count: int) -> None:
        for i in range(count):
            await budget.take(f"call-{i}")

    asyncio.run(take(6))
    assert taken == [f"call-{i}" for i in range(6)], "every call counted once, in order"
    # Two at once (the burst), then one per 1/4 s.
    assert clock.slept == [0.25] * 4
    assert clock.now - 1000.0 == 1.0


def test_tokens_refill_while_idle_up_to_the_burst_only() -> None:
    clock = Clock()
    budget = RequestBudget(10, burst=3, clock=clock, sleep=clock.sleep)

    async def take(count: int) -> None:
        for _ in range(count):
            await budget.take()

    asyncio.run(take(3))
    assert clock.slept == []
    clock.now += 60  # idle a minute: the bucket holds 3, not 600
    asyncio.run(take(4))
    assert clock.slept == [0.1]


def test_the_default_burst_is_one_seconds_worth() -> None:
    assert RequestBudget(20).capacity == 20
    assert RequestBudget(0.5).capacity == 1
