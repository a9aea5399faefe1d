"""Read-your-writes over the watch cache, one rule for every write Sundial remembers.

The watch cache lags Sundial's own writes (the status of a ScheduledJob, its CronJob): a
pass that read the older cached object would write again, or judge the same slots twice.
So each write is remembered with the resourceVersion the server gave it, and read instead
of the cache until the cache shows that version or a later one (the object, or its
deletion's tombstone); from then on the cache is the truth, and only what `settled` keeps
of the write stays (nothing by default), so memory per object does not hold a second copy
of it. The memory is dropped when the object is retired or deleted. One entry per object
at most.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sundial.watchcache import resource_version

T = TypeVar("T")


@dataclass
class _Write(Generic[T]):
    version: int
    value: T
    cache_caught_up: bool = False


class OwnWrites(Generic[T]):
    def __init__(self, settled: Callable[[T], T] | None = None) -> None:
        """`settled`: what `last` still needs of a write once the cache shows it."""
        self._writes: dict[Hashable, _Write[T]] = {}
        self._settled = settled

    def remember(self, key: Hashable, written: dict[str, Any], value: T) -> None:
        """`written`: the object as the server returned it from the write."""
        version = resource_version(written)
        if version is None:
            self._writes.pop(key, None)  # no order to go by: trust the cache
        else:
            self._writes[key] = _Write(version, value)

    def read(self, key: Hashable, cached_version: int | None) -> T | None:
        """The remembered write while the cache (at `cached_version`: the object's, or its
        deletion's) has not caught up with it; None once it has, and from then on."""
        write = self._writes.get(key)
        if write is None or write.cache_caught_up:
            return None
        if cached_version is not None and cached_version >= write.version:
            if self._settled is None:
                del self._writes[key]
            else:
                write.value = self._settled(write.value)
                write.cache_caught_up = True
            return None
        return write.value

    def last(self, key: Hashable) -> T | None:
        """The last write, whether or not the cache has caught up (what Sundial wrote is
        compared with what the server made of it: canonicalised values)."""
        write = self._writes.get(key)
        return write.value if write is not None else None

    def version(self, key: Hashable) -> int | None:
        """The resourceVersion of the write remembered for the key, if any."""
        write = self._writes.get(key)
        return write.version if write is not None else None

    def __len__(self) -> int:
        """Writes held (memory: at most one per object)."""
        return len(self._writes)

    def forget(self, key: Hashable) -> None:
        self._writes.pop(key, None)
