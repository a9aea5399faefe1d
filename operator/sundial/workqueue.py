"""A level-triggered work queue, the shape of client-go's: one heap of due times for every
ScheduledJob instead of a timer per object.

- A key is queued at most once; a key added while it is being reconciled runs again after.
- A key whose object changed goes first (`urgent`): a new or edited ScheduledJob does not
  wait behind the wake-ups of a busy minute boundary.
- `add_after` wakes a key at a given time (the next slot, a retry), keeping the earliest.
- Failures back off per key, exponentially, capped, and reset on success, so nothing loops hot.
- `close` lets each worker finish the pass it is in and take no other (a graceful stop).
- Lanes: keys whose passes wait on one shared outside limit (a Temporal connection's request
  budget) are in a lane (`lane_of`), with at most `lane_limit` passes in flight; a key
  taken while its lane is full is parked, and goes first once a pass of the lane ends. A
  worker never waits on a full lane, so a slow Temporal never holds every worker; and all
  lanes together hold at most `lanes_limit` passes, so neither do many Temporal
  connections (four of two passes each held all eight workers). A freed turn goes to the
  lanes with parked keys in turn (round robin), so no lane waits behind another. Parked
  keys whose object changed go before parked wake-ups, as in the queue itself. A key
  woken for a lane it has since left (its object deleted or moved) hands that turn on.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from sundial.errors import Retry

K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        base_backoff: float = 1.0,
        max_backoff: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        lane_of: Callable[[K], Hashable | None] | None = None,
        lane_limit: int = 1,
        lanes_limit: int | None = None,
    ) -> None:
        self._clock = clock
        self._lane_of = lane_of
        self._lane_limit = lane_limit
        self._lanes_limit = lanes_limit
        self._in_lane: dict[Hashable, int] = {}
        self._in_lanes = 0
        # Per lane, two parked lines, taken in order: keys whose object changed, then
        # wake-ups (as `_urgent` and `_ready`); each parked key with its lane and line.
        self._parked: dict[Hashable, tuple[deque[K], deque[K]]] = {}
        self._parked_keys: dict[K, tuple[Hashable, bool]] = {}
        # Keys taken off a parked line: the lane whose freed turn each holds, and whether
        # it is urgent (where it parks again if the turn was taken meanwhile).
        self._woken: dict[K, tuple[Hashable, bool]] = {}
        self._base_backoff = base_backoff
        self._max_backoff = max_backoff
        # Two lanes: keys whose object just changed (a watch event of the ScheduledJob
        # itself) go before wake-ups and owned-object events; `_items` counts both.
        self._urgent: deque[K] = deque()
        self._ready: deque[K] = deque()
        self._items = asyncio.Semaphore(0)
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._failures: dict[K, int] = {}
        self._sequence = 0
        self._wakeup = asyncio.Event()
        self._pass_ended = asyncio.Event()
        self._closed = False
        self._workers = 0

    def add(self, key: K, *, urgent: bool = False) -> None:
        """Queue a key once; `urgent` (its object changed) puts it before the wake-ups
        already waiting, moving it up if it is one of them."""
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            if key in self._parked_keys:
                # Pending already; its object changed: to the lane's urgent line.
                if urgent:
                    self._promote_parked(key)
                return
            if urgent and key in self._woken:
                self._woken[key] = (self._woken[key][0], True)
            if urgent and key not in self._urgent:
                self._ready.remove(key)
                self._urgent.append(key)
            return
        self._queued.add(key)
        (self._urgent if urgent else self._ready).append(key)
        self._items.release()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        due = self._clock() + delay
        if self._due.get(key, float("inf")) <= due:
            return
        self._due[key] = due
        self._sequence += 1
        heapq.heappush(self._delayed, (due, self._sequence, key))
        self._wakeup.set()

    def backoff(self, key: K) -> float:
        """Requeue a failed key later, doubling the wait on each consecutive failure."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(self._base_backoff * 2.0**failures, self._max_backoff)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    async def run_timer(self) -> None:
        """Moves delayed keys to the ready queue when they fall due."""
        while True:
            now = self._clock()
            while self._delayed and self._delayed[0][0] <= now:
                due, _, key = heapq.heappop(self._delayed)
                if self._due.get(key) == due:
                    del self._due[key]
                    self.add(key)
            timeout = self._delayed[0][0] - now if self._delayed else None
            self._wakeup.clear()
            # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancellation that
            # arrives as the event is set, and a graceful stop then waits for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()

    def close(self) -> None:
        """Workers return once the pass each is in ends; idle ones return at once."""
        self._closed = True
        for _ in range(self._workers):
            self._items.release()

    async def run_worker(self, reconcile: Callable[[K], Awaitable[float | None]]) -> None:
        """Reconciles keys one at a time; several workers share one queue."""
        self._workers += 1
        while not self._closed:
            await self._items.acquire()
            if self._closed:
                return
            urgent = bool(self._urgent)
            key = (self._urgent or self._ready).popleft()
            lane = self._lane_of(key) if self._lane_of is not None else None
            woken = self._woken.pop(key, None)
            if woken is not None:
                woken_for, urgent = woken
                if woken_for != lane:
                    self._wake_parked(woken_for)
            if lane is not None and self._lane_full(lane):
                changed, wakeups = self._parked.setdefault(lane, (deque(), deque()))
                (changed if urgent else wakeups).append(key)
                self._parked_keys[key] = (lane, urgent)
                continue
            self._queued.discard(key)
            self._processing.add(key)
            if lane is not None:
                self._in_lane[lane] = self._in_lane.get(lane, 0) + 1
                self._in_lanes += 1
            try:
                requeue_after = await reconcile(key)
            except asyncio.CancelledError:
                raise
            except Retry as error:
                delay = self.backoff(key)
                log.warning("reconcile of %s failed: %s; retrying in %.0fs", key, error, delay)
            except Exception:
                delay = self.backoff(key)
                log.exception("reconcile of %s failed; retrying in %.0fs", key, delay)
            else:
                self.forget(key)
                if requeue_after is not None:
                    self.add_after(key, requeue_after)
            finally:
                if lane is not None:
                    self._leave_lane(lane)
                self._processing.discard(key)
                self._pass_ended.set()
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)

    async def passes_ended(self, which: Callable[[K], bool]) -> None:
        """Returns once no pass of a key `which` admits is running (sharded mode: a shard
        is let go only after its passes have ended)."""
        while any(which(key) for key in self._processing):
            self._pass_ended.clear()
            await self._pass_ended.wait()

    def depth(self) -> dict[str, int]:
        """Keys by where they wait, for sundial_workqueue_depth (lengths only: cheap):
        queued for a worker, parked for their lane's turn, delayed to a later time (the
        next slot, a retry), and processing now."""
        return {
            "queued": len(self._urgent) + len(self._ready),
            "parked": len(self._parked_keys),
            "delayed": len(self._due),
            "processing": len(self._processing),
        }

    def _lane_full(self, lane: Hashable) -> bool:
        return self._in_lane.get(lane, 0) >= self._lane_limit or (
            self._lanes_limit is not None and self._in_lanes >= self._lanes_limit
        )

    def _leave_lane(self, lane: Hashable) -> None:
        """A pass of the lane ended: its turn goes to a parked key."""
        self._in_lane[lane] -= 1
        self._in_lanes -= 1
        if not self._in_lane[lane]:
            del self._in_lane[lane]
        self._wake_parked(lane)

    def _wake_parked(self, lane: Hashable) -> None:
        """A freed turn: the longest-parked key (urgent ones first) of the first lane, in
        turn, that has parked keys and room (`lane`, whose pass ended, has room; a lane
        parked only because all lanes together were full has it now too) goes to the head
        of the queue, holding the turn; that lane goes to the back of the turn order."""
        candidates = [lane] if self._lanes_limit is None else list(self._parked)
        chosen = next(
            (c for c in candidates
             if c in self._parked and self._in_lane.get(c, 0) < self._lane_limit),
            None,
        )  # fmt: skip
        if chosen is None:
            return
        changed, wakeups = self._parked.pop(chosen)
        key = (changed or wakeups).popleft()
        if changed or wakeups:
            self._parked[chosen] = (changed, wakeups)  # to the back of the turn order
        self._woken[key] = self._parked_keys.pop(key)
        self._urgent.appendleft(key)
        self._items.release()

    def _promote_parked(self, key: K) -> None:
        lane, urgent = self._parked_keys[key]
        if not urgent:
            changed, wakeups = self._parked[lane]
            wakeups.remove(key)
            changed.append(key)
            self._parked_keys[key] = (lane, True)
