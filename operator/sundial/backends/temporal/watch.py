"""What stands in for a watch on Temporal: the list of schedules, read every few seconds.

Temporal has no watch on schedules. Describing each one every resync period is a request
per object per period (at a thousand temporal-backed objects and 30 s, 33 requests a
second, over the operator's whole Temporal budget). One listing per connection instead
shows every schedule's recent actions, pause and note and spec, a thousand to a request;
a schedule whose entry changed since the last listing (a run started or was seen to end,
someone paused, edited or deleted it) has its ScheduledJob queued, and that pass
describes it as before. Each slot still wakes its own object when it settles, and every
object is still described at least every `temporal_resync_seconds`: the listing is
eventually consistent, so it decides only when to look, never what a pass concludes.

Memory is one digest per tracked schedule; a connection with no tracked schedule is not
listed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sundial.backends.protocol import Key
from sundial.backends.temporal.client import (
    Connection,
    Temporal,
)
from sundial.errors import TemporalRejected, TemporalUnavailable
from sundial.planning.missed import SETTLE

log = logging.getLogger(__name__)


def changed(
    listed: dict[str, int], current: dict[str, int], seen: dict[str, int], tracked: set[str]
) -> set[str]:
    """Tracked schedules to look at after a listing (`current`): one whose entry differs
    from the last listing's (`listed`), or has left the list, unless its object's latest
    pass saw it so already (`seen`: each slot's own pass usually has, by the listing after
    it); and one listed for the first time whose entry differs from what its latest pass
    saw. What a pass saw only ever holds a wake back (but for a first listing), and a
    listing is compared with the listing before it, so the two sources cannot wake an
    object again and again should they ever disagree on an unchanged schedule."""
    woken = set()
    for schedule in tracked:
        now = current.get(schedule)
        if schedule in listed:
            if now != listed[schedule] and (schedule not in seen or now != seen[schedule]):
                woken.add(schedule)
        elif now is not None and schedule in seen and now != seen[schedule]:
            woken.add(schedule)
    return woken


def listed_lately(answered: datetime, now: datetime, interval: float) -> bool:
    """A listing that answered at `answered` still vouches for its connection at `now`:
    within two rounds of the listing (one may be late behind a slow Temporal)."""
    return (now - answered).total_seconds() <= 2 * interval + 1


@dataclass
class _Connection:
    """The tracked schedules at one connection: by id, their object; the last listing's
    digest of each it showed; the digest its object's latest pass saw."""

    keys: dict[str, Key] = field(default_factory=dict)
    listed: dict[str, int] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)


@dataclass
class ScheduleWatch:
    temporal: Temporal
    wake: Callable[[Key, float], None]  # the key, and the seconds to wait
    prefix: str
    interval: float
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _connections: dict[Connection, _Connection] = field(default_factory=dict)
    _where: dict[Key, tuple[Connection, str]] = field(default_factory=dict)
    _answered: dict[Connection, datetime] = field(default_factory=dict)

    def answered_lately(self, connection: Connection) -> bool:
        """The connection's listing succeeded within the last two rounds: its address,
        credentials and Temporal namespace work (what a describe would have shown)."""
        answered = self._answered.get(connection)
        return answered is not None and listed_lately(answered, self.clock(), self.interval)

    def track(self, key: Key, connection: Connection, schedule_id: str, seen: int) -> None:
        """After each pass: the object's schedule is at this connection under this id, and
        the pass saw it as `seen` (digests.description_digest)."""
        if self._where.get(key) == (connection, schedule_id):
            self._connections[connection].seen[schedule_id] = seen
            return
        self.forget(key)
        self._where[key] = (connection, schedule_id)
        tracked = self._connections.setdefault(connection, _Connection())
        tracked.keys[schedule_id] = key
        tracked.seen[schedule_id] = seen

    def forget(self, key: Key) -> None:
        """The object is gone, or no longer on Temporal."""
        where = self._where.pop(key, None)
        if where is None:
            return
        connection, schedule_id = where
        tracked = self._connections[connection]
        for schedules in (tracked.keys, tracked.listed, tracked.seen):
            schedules.pop(schedule_id, None)
        if not tracked.keys:
            del self._connections[connection]
            self._answered.pop(connection, None)

    async def look(self, connection: Connection) -> list[Key]:
        """List one connection's schedules; queue the objects whose entry changed, each
        once its newest action has settled (SETTLE and the jitter after its slot): a run
        that starts at a slot is then judged and recorded in one write, by the pass its
        slot had queued for that moment already."""
        listing = await self.temporal.list_schedules(connection, self.prefix)
        tracked = self._connections.get(connection)
        if tracked is None:  # every object on it was forgotten while the list was read
            return []
        self._answered[connection] = self.clock()
        current = {schedule: listed.digest for schedule, listed in listing.items()}
        schedules = set(tracked.keys)
        woken = sorted(changed(tracked.listed, current, tracked.seen, schedules))
        tracked.listed = {s: current[s] for s in schedules if s in current}
        now = self.clock()
        for schedule in woken:
            listed = listing.get(schedule)
            delay = 0.0
            if listed is not None and listed.newest_action is not None:
                settles = listed.newest_action + SETTLE + listed.jitter
                delay = max((settles - now).total_seconds() + 1, 0.0)
            self.wake(tracked.keys[schedule], delay)
        return [tracked.keys[s] for s in woken]

    async def run(self) -> None:
        """List every connection in use, every `interval` seconds, for ever: a failure
        waits for the next round (the passes report an unreachable Temporal in status;
        this only decides when to look)."""
        while True:
            await asyncio.sleep(self.interval)
            for connection in list(self._connections):
                try:
                    woken = await self.look(connection)
                except (TemporalUnavailable, TemporalRejected) as error:
                    log.debug("listing schedules at %s failed: %s", connection.describe(), error)
                    continue
                except Exception:
                    log.exception("listing schedules at %s failed", connection.describe())
                    continue
                if woken:
                    log.debug("schedules changed at %s: %d", connection.describe(), len(woken))
