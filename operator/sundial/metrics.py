"""Prometheus metrics on the operator's /metrics, in a registry of Sundial's own."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from sundial.models import MissedRun

Key = tuple[str, str]


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
        self.temporal_requests = Counter(
            "sundial_temporal_requests", "Requests made to Temporal (all connections).",
            registry=self.registry,
        )  # fmt: skip
        self._labelled: dict[Key, str] = {}

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

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def runs(self, key: Key, backend: str, new_runs: list[MissedRun]) -> None:
        for run in new_runs:
            if run.reason == "Unknown":
                self.unknown.labels(*key, backend).inc()
                continue
            counter = self.skipped if run.reason == "OverlapSkipped" else self.missed
            counter.labels(*key, backend, run.reason).inc()

    def times(
        self, key: Key, backend: str, last_run: datetime | None, next_run: datetime | None
    ) -> None:
        old_backend = self._labelled.get(key)
        if old_backend is not None and old_backend != backend:
            self.forget(key)
        self._labelled[key] = backend
        for gauge, moment in ((self.last_run, last_run), (self.next_run, next_run)):
            if moment is None:
                _remove(gauge, *key, backend)
            else:
                gauge.labels(*key, backend).set(moment.timestamp())

    def forget(self, key: Key) -> None:
        """Drop the gauges of a deleted ScheduledJob; its counters keep their last value."""
        backend = self._labelled.pop(key, None)
        if backend is None:
            return
        for gauge in (self.last_run, self.next_run):
            _remove(gauge, *key, backend)


def _remove(metric: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
