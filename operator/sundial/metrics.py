"""Prometheus metrics on the operator's /metrics, in a registry of Sundial's own."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import gc
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from sundial.api import reasons
from sundial.api.models import MissedRun, ScheduledJobStatus
from sundial.object_metrics import ObjectSeries, ObjectSeriesCollector, counted
from sundial.planning.runs import RunHistory
from sundial.watchcache import CACHED

Key = tuple[str, str]

# The distributions are per namespace and backend, never per object: a histogram per
# ScheduledJob multiplies the series by its buckets (60,000 at 5,000 objects) and was most of
# the operator's memory per object. Per object, gauges say how the latest run went.
DURATION_BUCKETS = (1, 10, 60, 300, 900, 3600, 4 * 3600, float("inf"))
DELAY_BUCKETS = (1, 5, 15, 60, 300, float("inf"))
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, float("inf"))
WATCHED_CONDITIONS = (reasons.RUNS_MISSED, reasons.RUNS_FAILING, reasons.RUN_TOO_LONG)
QUEUE_STATES = ("queued", "parked", "delayed", "processing")  # WorkQueue.depth's keys


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reconciles = Counter(
            "sundial_reconciles", "Reconcile passes by result (ok, error).",
            ["result"], registry=self.registry,
        )  # fmt: skip
        self.reconcile_seconds = Histogram(
            "sundial_reconcile_duration_seconds", "Time one reconcile pass takes.",
            registry=self.registry,
        )  # fmt: skip
        self.loop_lag = Histogram(
            "sundial_event_loop_lag_seconds",
            "How late a periodic timer fires on the event loop: the time the loop was blocked "
            "(watch events and timers wait that long).",
            buckets=LAG_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.gc_pause = Histogram(
            "sundial_gc_pause_seconds",
            "How long each garbage collection took, by generation: it stops the event loop "
            "too, so this tells the collector's share of the loop lag.",
            ["generation"], buckets=LAG_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.temporal_requests = Counter(
            "sundial_temporal_requests",
            "Requests made to Temporal (all connections), by gRPC method.",
            ["operation"], registry=self.registry,
        )  # fmt: skip
        self.queue_depth = Gauge(
            "sundial_workqueue_depth",
            "ScheduledJobs in the work queue, read at scrape: queued (waiting for a worker), "
            "parked (waiting for their Temporal connection's turn), delayed (a wake-up later: "
            "the next slot, a retry), processing.",
            ["state"], registry=self.registry,
        )  # fmt: skip
        self.cached_objects = Gauge(
            "sundial_cached_objects",
            "Objects held in the watch cache, read at scrape, by resource (scheduledjobs, "
            "cronjobs, jobs): a sharded replica holds its shards' only.",
            ["resource"], registry=self.registry,
        )  # fmt: skip
        namespace_labels = ["namespace", "backend"]
        self.run_duration = Histogram(
            "sundial_run_duration_seconds", "How long each run that ended took, per namespace.",
            namespace_labels, buckets=DURATION_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.start_delay = Histogram(
            "sundial_run_start_delay_seconds",
            "How late each run started after its slot, per namespace.",
            namespace_labels, buckets=DELAY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._sharded = False
        # Per object: one record each, made into samples at scrape (object_metrics.py).
        self._objects: dict[Key, ObjectSeries] = {}
        self.registry.register(ObjectSeriesCollector(self._objects))
        # Objects per (namespace, backend): the namespace's histograms go with its last.
        self._per_namespace: collections.Counter[tuple[str, str]] = collections.Counter()

    def measured(
        self, reconcile: Callable[[Key], Awaitable[float | None]]
    ) -> Callable[[Key], Awaitable[float | None]]:
        """The reconcile function, counted and timed."""

        async def measured_reconcile(key: Key) -> float | None:
            with self.reconcile_seconds.time():
                try:
                    result = await reconcile(key)
                except Exception:
                    self.reconciles.labels("error").inc()
                    raise
            self.reconciles.labels("ok").inc()
            return result

        return measured_reconcile

    async def watch_loop_lag(self, interval: float = 1.0) -> None:
        """Sample the event loop's lag for ever: sleep `interval`, observe how much later
        than asked the loop woke this task (what asyncio's debug mode calls a slow
        callback, measured all the time and cheaply)."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + interval
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(loop.time() - asked, 0.0))

    def watch_queue(self, depth: Callable[[], Mapping[str, int]]) -> None:
        """sundial_workqueue_depth from the queue's own counts, read at each scrape (no
        work on the queue's hot path)."""
        for state in QUEUE_STATES:
            self.queue_depth.labels(state).set_function(functools.partial(_count, depth, state))

    def watch_cache(self, cached: Callable[[], Mapping[str, int]]) -> None:
        """sundial_cached_objects from the watch cache's own counts, read at each scrape:
        what the operator holds in memory, by resource (a sharded replica: its shards')."""
        for resource in CACHED:
            self.cached_objects.labels(resource).set_function(
                functools.partial(_count, cached, resource)
            )

    def watch_shards(
        self, shards: int, *, held: Callable[[], int], conflict: Callable[[], bool]
    ) -> None:
        """Sharded mode's series, read at each scrape (an unsharded operator has none):
        across replicas, sum(sundial_shards_held) below sundial_shards is a shard no one
        serves."""
        if self._sharded:  # made once per registry
            return
        self._sharded = True
        Gauge("sundial_shards", "Sharded mode: the shard count (SUNDIAL_SHARDS).",
              registry=self.registry).set(shards)  # fmt: skip
        Gauge(
            "sundial_shards_held", "Sharded mode: the shards this replica serves.",
            registry=self.registry,
        ).set_function(held)  # fmt: skip
        Gauge(
            "sundial_shard_conflict",
            "Sharded mode: 1 while this replica serves nothing because replicas configured "
            "with another SUNDIAL_SHARDS hold shard Leases (its log says which count).",
            registry=self.registry,
        ).set_function(lambda: float(conflict()))  # fmt: skip

    def temporal_request(self, operation: str) -> None:
        self.temporal_requests.labels(operation).inc()

    @contextlib.contextmanager
    def watching_gc(self) -> Iterator[None]:
        """Time every garbage collection while inside (gc's own callbacks, in whichever
        thread collects)."""
        started: list[float] = [0.0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                pause = time.perf_counter() - started[0]
                self.gc_pause.labels(str(info["generation"])).observe(pause)

        gc.callbacks.append(on_gc)
        try:
            yield
        finally:
            gc.callbacks.remove(on_gc)

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def runs(self, key: Key, backend: str, new_runs: list[MissedRun]) -> None:
        series = self._series(key, backend)
        for run in new_runs:
            if run.reason == "Unknown":
                series.unknown = (series.unknown or 0.0) + 1
            elif run.reason == "OverlapSkipped":
                series.skipped = counted(series.skipped, run.reason)
            else:
                series.missed = counted(series.missed, run.reason)

    def times(
        self, key: Key, backend: str, last_run: datetime | None, next_run: datetime | None
    ) -> None:
        series = self._series(key, backend)
        series.last_run = last_run.timestamp() if last_run is not None else None
        series.next_run = next_run.timestamp() if next_run is not None else None

    def history(
        self, key: Key, backend: str, history: RunHistory | None, status: ScheduledJobStatus
    ) -> None:
        """The runs newly started and ended in a pass, and the gauges of where runs stand."""
        series = self._series(key, backend)
        for run in history.newly_finished if history else []:
            series.runs = counted(series.runs, run.result)
            if run.duration_seconds is not None:
                self.run_duration.labels(key[0], backend).observe(run.duration_seconds)
                series.last_duration = run.duration_seconds
        started = history.newly_started if history else []
        for run in sorted(started, key=lambda run: run.start_time or run.scheduled_time):
            if run.start_delay_seconds is not None:
                delay = max(run.start_delay_seconds, 0)
                self.start_delay.labels(key[0], backend).observe(delay)
                series.last_start_delay = delay
        if history is not None and history.unseen_added:
            series.unseen = (series.unseen or 0.0) + history.unseen_added
        if history is not None:
            series.consecutive_failures = history.consecutive_failures
            series.running = history.running
            # The limit the durations are held to, for a dashboard to set them against.
            limit = history.limits.max_run_duration
            series.max_run_duration = limit.total_seconds() if limit is not None else None
        present = {c.type: c.status for c in status.conditions}
        conditions = {name: float(present[name] == "True")
                      for name in WATCHED_CONDITIONS if name in present}  # fmt: skip
        if conditions != (series.conditions or {}):
            series.conditions = conditions or None

    def spec_problem(self, key: Key, backend: str, reason: str | None) -> None:
        """The problem only a spec change can fix that holds the object, by its reason, or
        None once a pass ends otherwise (in step, or failed and retried)."""
        series = self._series(key, backend) if reason is not None else self._objects.get(key)
        if series is not None:
            series.spec_problem = reason

    def pause(self, key: Key, backend: str, reason: str | None, *, tripped: bool) -> None:
        """Why the object is paused now (None: it is not), and a failure pause counted."""
        series = self._series(key, backend)
        series.paused = reason
        if tripped:
            series.failure_pauses = (series.failure_pauses or 0.0) + 1

    def _series(self, key: Key, backend: str) -> ObjectSeries:
        """The object's record; a new one (its old series dropped) on a change of backend."""
        series = self._objects.get(key)
        if series is not None and series.backend == backend:
            return series
        self.forget(key)
        self._per_namespace[key[0], backend] += 1
        series = self._objects[key] = ObjectSeries(backend)
        return series

    def forget(self, key: Key) -> None:
        """Drop every series of a deleted ScheduledJob (or of its old backend)."""
        series = self._objects.pop(key, None)
        if series is None:
            return
        place = (key[0], series.backend)
        self._per_namespace[place] -= 1
        if self._per_namespace[place] <= 0:
            del self._per_namespace[place]
            _remove(self.run_duration, *place)
            _remove(self.start_delay, *place)


def _count(depth: Callable[[], Mapping[str, int]], state: str) -> float:
    return float(depth()[state])


def _remove(metric: Histogram, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
