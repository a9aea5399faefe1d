"""The CPU and memory of Sundial's own code per pass and per object, without servers.

    .venv/bin/python bench/pass_cost.py                 # 1,000 minute schedules, 10 minutes
    .venv/bin/python bench/pass_cost.py --profile 25    # and cProfile's top 25 (own time)

What bench/run.py measures on the real stack includes the apiserver, the kubernetes
client's threads and kopf; this isolates the reconcile pass itself, the part that grows
with the number of objects and slots. An in-memory API (`EchoingApi`) stores each status
patch and hands the written object back to the watch cache, as the watch would. The
workload is the bench's own worst steady case: kubernetes-backed `* * * * *` ScheduledJobs
with `concurrencyPolicy: Forbid` whose first Job never ends (no node), so every slot is an
overlap skip recorded with one status write. The clock is simulated: each object is passed
when its last pass asked to be (as the work queue's timer would), in time order.

Reported: slots, passes, status writes (and per slot: one is the design), CPU
milliseconds per pass (process time), and the Python heap per object held by the cache and
the operator's memories (tracemalloc).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import heapq
import pstats
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "operator"), str(REPO / "bench")]

from workload import Item, scheduledjob  # noqa: E402

from sundial.api.models import ScheduledJobSpec  # noqa: E402
from sundial.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from sundial.events import EventRecorder  # noqa: E402
from sundial.metrics import Metrics  # noqa: E402
from sundial.planning.schedule import Timetable, timetable  # noqa: E402
from sundial.reconcile import Reconciler  # noqa: E402
from sundial.watchcache import WatchCache  # noqa: E402

NAMESPACE = "bench"
START = datetime(2026, 12, 7, 9, 0, 30, tzinfo=UTC)


class EchoingApi:
    """The API calls a kubernetes-backed steady pass makes, answered in memory; every
    write comes back to the cache as its watch event would."""

    def __init__(self, cache: WatchCache) -> None:
        self.cache = cache
        self.version = 100
        self.status_writes = 0
        self.event_writes = 0
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    def create(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        meta.update(uid=f"uid-{meta['name']}", resourceVersion=self._next(), generation=1,
                    creationTimestamp="2026-12-07T08:00:00Z")  # fmt: skip
        self.objects[(meta["namespace"], meta["name"])] = obj
        self.cache.put_scheduledjob(obj)

    async def patch_scheduledjob_status(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.status_writes += 1
        obj = self.objects[(namespace, name)]
        status = merged(obj.get("status") or {}, patch)
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": self._next()},
               "status": status}  # fmt: skip
        self.objects[(namespace, name)] = obj
        self.cache.put_scheduledjob(obj)
        return obj

    async def read_scheduledjob(self, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(namespace, name)]

    async def read_cronjob(self, *_: object) -> None:
        return None

    async def apply_cronjob(self, manifest: dict[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        job = f"{meta['name']}-29000000"
        live = {
            **manifest,
            "metadata": {**meta, "resourceVersion": self._next(), "generation": 1,
                         "uid": f"cj-{meta['name']}", "creationTimestamp": "2026-12-07T08:00:00Z"},
            "status": {"active": [{"kind": "Job", "name": job, "namespace": meta["namespace"]}],
                       "lastScheduleTime": "2026-12-07T08:59:00Z"},
        }  # fmt: skip
        self.cache.put_cronjob(live)
        self.cache.put_job({
            "metadata": {"name": job, "namespace": meta["namespace"],
                         "resourceVersion": self._next(),
                         "creationTimestamp": "2026-12-07T08:59:00Z",
                         "labels": {"sundial.dev/scheduledjob": meta["name"]},
                         "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp":
                                         "2026-12-07T08:59:00Z"}},
            "status": {"startTime": "2026-12-07T08:59:01Z", "active": 1},
        })  # fmt: skip
        return live

    async def list_all(self, *_: object) -> list[dict[str, Any]]:
        return []

    async def cronjob_event_messages(self, *_: object) -> list[str]:
        return []

    async def create_event(self, *_: object) -> None:
        self.event_writes += 1

    async def patch_event(self, *_: object) -> None:
        self.event_writes += 1


def merged(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) applied, as the apiserver does."""
    result = dict(target)
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        elif isinstance(v, dict) and isinstance(result.get(k), dict):
            result[k] = merged(result[k], v)
        else:
            result[k] = v
    return result


def timetable_of(schedule: str) -> Timetable:
    return timetable(ScheduledJobSpec.model_validate({"schedule": schedule, "job": {"image": "a"}}))


async def run(
    count: int, minutes: int, profiler: cProfile.Profile | None, schedule: str = "* * * * *"
) -> dict[str, float]:
    tracemalloc.start()
    heap_before = tracemalloc.get_traced_memory()[0]
    cache = WatchCache()
    api: Any = EchoingApi(cache)
    now = [START]
    events = EventRecorder(api)
    reconciler = Reconciler(
        kube=api, cache=cache, events=events, metrics=Metrics(),
        backends=[KubernetesBackend(kube=api, cache=cache, events=events)],
        clock=lambda: now[0],
    )  # fmt: skip
    keys = []
    for i in range(count):
        item = Item(f"sj-{i:05d}", "custom", "kubernetes", schedule, "UTC")
        sj = scheduledjob(item, NAMESPACE)
        sj["spec"]["concurrencyPolicy"] = "Forbid"  # type: ignore[index]
        api.create(sj)
        keys.append((NAMESPACE, item.name))
    # Each object is passed when its own last pass asked to be (the work queue's timer),
    # in time order: the first pass applies the CronJob and starts the accounting.
    due: list[tuple[datetime, int, tuple[str, str]]] = [
        (START, n, key) for n, key in enumerate(keys)
    ]
    heapq.heapify(due)
    end = START + timedelta(minutes=minutes)
    first_writes = -1
    passes = 0
    cpu = 0.0
    sequence = len(keys)
    while due and due[0][0] <= end:
        moment, _, key = heapq.heappop(due)
        now[0] = moment
        if first_writes < 0 and moment > START:
            first_writes = api.status_writes
        began = time.process_time()
        if profiler is not None and moment > START:
            profiler.enable()
        requeue = await reconciler(key)
        if profiler is not None:
            profiler.disable()
        if moment > START:
            cpu += time.process_time() - began
            passes += 1
        if requeue is not None:
            sequence += 1
            heapq.heappush(due, (moment + timedelta(seconds=requeue), sequence, key))
    slots = len(timetable_of(schedule).slots_between(START, end, 100_000)) * count
    heap = tracemalloc.get_traced_memory()[0] - heap_before
    tracemalloc.stop()
    writes = api.status_writes - max(first_writes, 0)
    return {
        "objects": count,
        "slots": slots,
        "passes": passes,
        "status_writes": writes,
        "status_writes_per_slot": writes / max(slots, 1),
        "event_writes": api.event_writes,
        "cpu_ms_per_pass": 1000 * cpu / max(passes, 1),
        "heap_kib_per_object": heap / 1024 / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--schedule", default="* * * * *")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N")
    args = parser.parse_args()
    profiler = cProfile.Profile() if args.profile else None
    result = asyncio.run(run(args.objects, args.minutes, profiler, args.schedule))
    for name, value in result.items():
        print(f"{name:>22}: {value:.3f}" if isinstance(value, float) else f"{name:>22}: {value}")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
