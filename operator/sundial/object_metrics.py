"""The per-ScheduledJob series of /metrics, kept as plain numbers and turned into samples
when Prometheus scrapes.

prometheus_client makes each labelled child a metric object of its own, with a lock and a
value object per sample: about 5 KiB per ScheduledJob for its handful of series, 25 MiB at
5,000 objects. Here each object holds one slotted record (a few hundred bytes) and a
collector builds the families from them at scrape time, as kube-state-metrics does.
The records are written on the event loop and read by the metrics server's thread: the
collector takes a copy of the table first (one C-level copy, atomic under the GIL), and
every field it reads is a number or a small dict replaced, never changed in place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

Key = tuple[str, str]
OBJECT_LABELS = ["namespace", "name", "backend"]


@dataclass(slots=True)
class ObjectSeries:
    """Everything /metrics says of one ScheduledJob. None: no such series (yet)."""

    backend: str
    last_run: float | None = None
    next_run: float | None = None
    last_duration: float | None = None
    # spec.monitoring.maxRunDuration, the limit the durations are held to.
    max_run_duration: float | None = None
    last_start_delay: float | None = None
    consecutive_failures: float | None = None
    running: float | None = None
    unknown: float | None = None
    unseen: float | None = None
    # By condition type, reason, result: replaced on change, never mutated in place.
    conditions: dict[str, float] | None = None
    missed: dict[str, float] | None = None
    skipped: dict[str, float] | None = None
    runs: dict[str, float] | None = None
    # The reason of the problem only a spec change can fix that holds the object (Ready
    # False): its next run goes stale for that, not because the operator is stuck.
    spec_problem: str | None = None
    # Why no run is scheduled now (status.pause.reason), and failure pauses so far.
    paused: str | None = None
    failure_pauses: float | None = None


def counted(counts: dict[str, float] | None, label: str) -> dict[str, float]:
    """A copy of `counts` with `label` counted once more."""
    new = dict(counts or {})
    new[label] = new.get(label, 0.0) + 1
    return new


class ObjectSeriesCollector(Collector):
    def __init__(self, table: dict[Key, ObjectSeries]) -> None:
        self._table = table

    def collect(self) -> Iterator[Metric]:
        rows = list(self._table.items())
        gauges = {
            "last_run": GaugeMetricFamily(
                "sundial_last_run_timestamp_seconds", "Scheduled time of the latest run.",
                labels=OBJECT_LABELS),
            "next_run": GaugeMetricFamily(
                "sundial_next_run_timestamp_seconds", "Scheduled time of the next run.",
                labels=OBJECT_LABELS),
            "last_duration": GaugeMetricFamily(
                "sundial_last_run_duration_seconds", "How long the latest run that ended took.",
                labels=OBJECT_LABELS),
            "max_run_duration": GaugeMetricFamily(
                "sundial_max_run_duration_seconds",
                "The object's monitoring.maxRunDuration: the limit its runs are held to "
                "(RunTooLong past it); absent when it has none.",
                labels=OBJECT_LABELS),
            "last_start_delay": GaugeMetricFamily(
                "sundial_last_run_start_delay_seconds",
                "How late the latest run that started began after its slot.",
                labels=OBJECT_LABELS),
            "consecutive_failures": GaugeMetricFamily(
                "sundial_consecutive_failures",
                "Failed or timed-out runs since the last success.", labels=OBJECT_LABELS),
            "running": GaugeMetricFamily(
                "sundial_running_runs", "Runs in progress.", labels=OBJECT_LABELS),
        }  # fmt: skip
        unknown = CounterMetricFamily(
            "sundial_unknown_runs", "Slots Sundial could not verify either way (not missed).",
            labels=OBJECT_LABELS,
        )  # fmt: skip
        unseen = CounterMetricFamily(
            "sundial_unseen_runs",
            "Runs that ended unseen (status.unseenRuns): Jobs deleted, or executions past "
            "Temporal's retention, before Sundial read them. Not in sundial_runs_total.",
            labels=OBJECT_LABELS,
        )  # fmt: skip
        condition = GaugeMetricFamily(
            "sundial_condition",
            "1 while the ScheduledJob's condition is True (RunsFailing, RunTooLong, RunsMissed): "
            "alerts on it respect failureThreshold and maxRunDuration.",
            labels=[*OBJECT_LABELS, "condition"],
        )  # fmt: skip
        spec_problem = GaugeMetricFamily(
            "sundial_spec_problem",
            "1 while a problem only a spec change can fix holds the ScheduledJob, by its "
            "reason (Ready False): SundialStalled leaves such objects out.",
            labels=[*OBJECT_LABELS, "reason"],
        )  # fmt: skip
        paused = GaugeMetricFamily(
            "sundial_paused",
            "1 while nothing is scheduled for the ScheduledJob, by why (status.pause.reason): "
            "Suspended, MaintenanceWindow, FailurePolicy (an alert of its own, apart from "
            "failing).",
            labels=[*OBJECT_LABELS, "reason"],
        )  # fmt: skip
        failure_pauses = CounterMetricFamily(
            "sundial_failure_policy_pauses",
            "Times the failure policy paused the ScheduledJob (failurePolicy.pauseAfter).",
            labels=OBJECT_LABELS,
        )  # fmt: skip
        by_label = {
            "missed": CounterMetricFamily(
                "sundial_missed_runs", "Runs that did not happen and never will, by reason.",
                labels=[*OBJECT_LABELS, "reason"]),
            "skipped": CounterMetricFamily(
                "sundial_skipped_runs", "Runs the overlap policy deliberately skipped.",
                labels=[*OBJECT_LABELS, "reason"]),
            "runs": CounterMetricFamily(
                "sundial_runs", "Runs that ended, by result (Succeeded, Failed, TimedOut, ...).",
                labels=[*OBJECT_LABELS, "result"]),
        }  # fmt: skip
        for (namespace, name), series in rows:
            labels = [namespace, name, series.backend]
            for field_name, family in gauges.items():
                value = getattr(series, field_name)
                if value is not None:
                    family.add_metric(labels, value)
            if series.unknown is not None:
                unknown.add_metric(labels, series.unknown)
            if series.unseen is not None:
                unseen.add_metric(labels, series.unseen)
            for label_value, value in _items(series.conditions):
                condition.add_metric([*labels, label_value], value)
            if series.spec_problem is not None:
                spec_problem.add_metric([*labels, series.spec_problem], 1.0)
            if series.paused is not None:
                paused.add_metric([*labels, series.paused], 1.0)
            if series.failure_pauses is not None:
                failure_pauses.add_metric(labels, series.failure_pauses)
            for field_name, counter in by_label.items():
                for label_value, value in _items(getattr(series, field_name)):
                    counter.add_metric([*labels, label_value], value)
        yield from gauges.values()
        yield unknown
        yield unseen
        yield condition
        yield spec_problem
        yield paused
        yield failure_pauses
        yield from by_label.values()


def _items(counts: dict[str, float] | None) -> Iterable[tuple[str, float]]:
    return list(counts.items()) if counts else ()
