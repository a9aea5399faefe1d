"""How Python's garbage collector runs in the operator: full collections on a timer.

At 5,000 objects the heap holds millions of containers (the watch cache's objects, kopf's
and the clients' bookkeeping), and a full collection walks all of them: about 0.45 s, with
every thread stopped, the event loop's too. CPython starts one whenever a quarter of the
long-lived heap is new since the last, and the watch cache turns over all the time (each
status write brings the object back as a new dict), so with the default thresholds that
was every 33 s (measured: 9 in 5 minutes, 4 s in all, each over 100 ms of loop lag), to
find almost nothing: the cache's objects are freed by reference counting, not by the
collector. Here the young generations are collected as usual (cycles die young), the
start-up heap is frozen out of every collection, and the full collection runs once every
`interval` seconds instead, so cyclic garbage that lived long waits at most that long.
"""

from __future__ import annotations

import asyncio
import gc

# Objects allocated (less freed) before a young collection: 700 by default, which at
# thousands of watch events a minute collected seven times a second and promoted
# short-lived objects to the older generations on the way.
YOUNG_THRESHOLD = 10_000
# Young collections between the middle generation's: CPython's own default.
MIDDLE_THRESHOLD = 10
# Middle collections before a full one: never reached (the timer does the full ones).
NEVER = 2**30
FULL_COLLECTION_SECONDS = 600.0


def collect_on_a_timer() -> None:
    """From now on: what exists is frozen out of collections (start-up: modules, clients,
    schemas), and full collections wait for `collect_every`."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, NEVER)


async def collect_every(interval: float = FULL_COLLECTION_SECONDS) -> None:
    """A full collection every `interval` seconds, for ever."""
    while True:
        await asyncio.sleep(interval)
        gc.collect()
