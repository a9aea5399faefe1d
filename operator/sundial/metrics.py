"""Prometheus metrics on the operator's /metrics, in a registry of Sundial's own."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from sundial.api.models import MissedRun, ScheduledJobStatus
from sundial.planning.runs import RunHistory

Key = tuple[str, str]

# The distributions are per namespace and backend, never per object: a histogram per
# ScheduledJob multiplies the series by its buckets (60,000 at 5,000 objects) and was most of
# the operator's memory per object. Per object, gauges say how the latest run went.
DURATION_BUCKETS = (1, 10, 60, 300, 900, 3600, 4 * 3600, float("inf"))
DELAY_BUCKETS = (1, 5, 15, 60, 300, float("inf"))
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, float("inf"))
WATCHED_CONDITIONS = ("RunsMissed", "RunsFailing", "RunTooLong")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ["namespace", "name", "backend", "reason"]
        self.missed = Counter(
            "sundial_missed_runs", "Runs that did not happen and never will, by reason.",
            labels, registry=self.registry,
        )  # fmt: skip
        self.skipped = Counter(
            "sundial_skipped_runs", "Runs the overlap policy deliberately skipped.",
            labels, registry=self.registry,
        )  # fmt: skip
        self.unknown = Counter(
            "sundial_unknown_runs", "Slots Sundial could not verify either way (not missed).",
            ["namespace", "name", "backend"], registry=self.registry,
        )  # fmt: skip
        self.last_run = Gauge(
            "sundial_last_run_timestamp_seconds", "Scheduled time of the latest run.",
            ["namespace", "name", "backend"], registry=self.registry,
        )  # fmt: skip
        self.next_run = Gauge(
            "sundial_next_run_timestamp_seconds", "Scheduled time of the next run.",
            ["namespace", "name", "backend"], registry=self.registry,
        )  # fmt: skip
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
        object_labels = ["namespace", "name", "backend"]
        self.runs_total = Counter(
            "sundial_runs", "Runs that ended, by result (Succeeded, Failed, TimedOut, ...).",
            [*object_labels, "result"], registry=self.registry,
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
        self.last_duration = Gauge(
            "sundial_last_run_duration_seconds", "How long the latest run that ended took.",
            object_labels, registry=self.registry,
        )  # fmt: skip
        self.last_start_delay = Gauge(
            "sundial_last_run_start_delay_seconds",
            "How late the latest run that started began after its slot.",
            object_labels, registry=self.registry,
        )  # fmt: skip
        self.consecutive_failures = Gauge(
            "sundial_consecutive_failures", "Failed or timed-out runs since the last success.",
            object_labels, registry=self.registry,
        )  # fmt: skip
        self.running_runs = Gauge(
            "sundial_running_runs", "Runs in progress.", object_labels, registry=self.registry
        )
        self.condition = Gauge(
            "sundial_condition",
            "1 while the ScheduledJob's condition is True (RunsFailing, RunTooLong, RunsMissed): "
            "alerts on it respect failureThreshold and maxRunDuration.",
            [*object_labels, "condition"], registry=self.registry,
        )  # fmt: skip
        self._labelled: dict[Key, str] = {}
        # Objects labelled per (namespace, backend): the namespace's histograms go with its last.
        self._per_namespace: collections.Counter[tuple[str, str]] = collections.Counter()
        self._results: dict[Key, set[str]] = {}
        self._reasons: dict[Key, set[tuple[str, str]]] = {}

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
        self._label(key, backend)
        for run in new_runs:
            if run.reason == "Unknown":
                self.unknown.labels(*key, backend).inc()
                continue
            counter = self.skipped if run.reason == "OverlapSkipped" else self.missed
            counter.labels(*key, backend, run.reason).inc()
            self._reasons.setdefault(key, set()).add((backend, run.reason))

    def times(
        self, key: Key, backend: str, last_run: datetime | None, next_run: datetime | None
    ) -> None:
        self._label(key, backend)
        for gauge, moment in ((self.last_run, last_run), (self.next_run, next_run)):
            if moment is None:
                _remove(gauge, *key, backend)
            else:
                gauge.labels(*key, backend).set(moment.timestamp())

    def history(
        self, key: Key, backend: str, history: RunHistory | None, status: ScheduledJobStatus
    ) -> None:
        """The runs newly started and ended in a pass, and the gauges of where runs stand."""
        self._label(key, backend)
        for run in history.newly_finished if history else []:
            self.runs_total.labels(*key, backend, run.result).inc()
            self._results.setdefault(key, set()).add(run.result)
            if run.duration_seconds is not None:
                self.run_duration.labels(key[0], backend).observe(run.duration_seconds)
                self.last_duration.labels(*key, backend).set(run.duration_seconds)
        started = history.newly_started if history else []
        for run in sorted(started, key=lambda run: run.start_time or run.scheduled_time):
            if run.start_delay_seconds is not None:
                delay = max(run.start_delay_seconds, 0)
                self.start_delay.labels(key[0], backend).observe(delay)
                self.last_start_delay.labels(*key, backend).set(delay)
        if history is not None:
            self.consecutive_failures.labels(*key, backend).set(history.consecutive_failures)
            self.running_runs.labels(*key, backend).set(history.running)
        present = {c.type: c.status for c in status.conditions}
        for name in WATCHED_CONDITIONS:
            if name in present:
                self.condition.labels(*key, backend, name).set(present[name] == "True")
            else:
                _remove(self.condition, *key, backend, name)

    def _label(self, key: Key, backend: str) -> None:
        old_backend = self._labelled.get(key)
        if old_backend is not None and old_backend != backend:
            self.forget(key)
        if old_backend != backend:
            self._per_namespace[key[0], backend] += 1
        self._labelled[key] = backend

    def forget(self, key: Key) -> None:
        """Drop every series of a deleted ScheduledJob (or of its old backend)."""
        backend = self._labelled.pop(key, None)
        if backend is None:
            return
        labels = (*key, backend)
        for metric in (self.last_run, self.next_run, self.last_duration, self.last_start_delay,
                       self.consecutive_failures, self.running_runs, self.unknown):  # fmt: skip
            _remove(metric, *labels)
        place = (key[0], backend)
        self._per_namespace[place] -= 1
        if self._per_namespace[place] <= 0:
            del self._per_namespace[place]
            _remove(self.run_duration, *place)
            _remove(self.start_delay, *place)
        for result in self._results.pop(key, set()):
            _remove(self.runs_total, *labels, result)
        for name in WATCHED_CONDITIONS:
            _remove(self.condition, *labels, name)
        for counted_backend, reason in self._reasons.pop(key, set()):
            _remove(self.missed, *key, counted_backend, reason)
            _remove(self.skipped, *key, counted_backend, reason)


def _remove(metric: Gauge | Counter | Histogram, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
