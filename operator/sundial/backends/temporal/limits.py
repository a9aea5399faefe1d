"""The limits every Temporal call passes: one request budget for the whole operator (a
token bucket, so the request rate stays bounded however many ScheduledJobs there are) and
a circuit breaker per connection (its calls fail fast while it is open)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


class RequestBudget:
    """A token bucket shared by every Temporal call: the operator's request rate stays
    bounded however many ScheduledJobs it has."""

    def __init__(
        self,
        per_second: float,
        burst: int | None = None,
        on_request: Callable[[str], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.per_second = per_second
        self._on_request = on_request
        self.capacity = float(burst or max(1, int(per_second)))
        self._tokens = self.capacity
        self._clock = clock
        self._sleep = sleep
        self._updated = clock()
        self._lock = asyncio.Lock()

    async def take(self, operation: str = "") -> None:
        async with self._lock:
            while True:
                now = self._clock()
                self._tokens = min(
                    self.capacity, self._tokens + (now - self._updated) * self.per_second
                )
                self._updated = now
                # Within rounding of a whole token is one: otherwise a clock whose float
                # cannot move by the last sliver (far from its epoch) never gets there.
                if self._tokens >= 1 - 1e-9:
                    self._tokens = max(0.0, self._tokens - 1)
                    if self._on_request is not None:
                        self._on_request(operation)
                    return
                await self._sleep((1 - self._tokens) / self.per_second)


@dataclass
class Breaker:
    """One connection's recent failures: while open, its calls fail at once instead of
    each holding a worker for the connect timeout."""

    failures: int = 0
    open_until: float = 0.0
    last_error: str = ""


# Backoff of an open breaker: 2 s, doubling per consecutive failure, at most a minute.
BREAKER_BASE_SECONDS = 2.0
BREAKER_MAX_SECONDS = 60.0
