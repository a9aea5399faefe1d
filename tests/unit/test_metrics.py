"""The run metrics (metrics.py): counted once per ended run, bounded labels, dropped with
the object; and every metric the shipped alerts use is one the operator exports."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from sundial.api.models import ScheduledJobStatus
from sundial.metrics import Metrics
from sundial.planning.missed import JobRecord
from sundial.planning.runs import Limits, job_run, run_history

RULES = Path(__file__).parents[2] / "manifests" / "monitoring" / "prometheusrule.yaml"
KEY = ("team", "nightly")
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def job(minute: int, ok: bool) -> JobRecord:
    start = T0 + timedelta(minutes=minute, seconds=2)
    return JobRecord(
        scheduled_time=T0 + timedelta(minutes=minute), created=start, start_time=start,
        finished_at=start + timedelta(seconds=30), succeeded=ok, failed=not ok,
        name=f"nightly-{minute}",
    )  # fmt: skip


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    own = {"namespace": "team", "name": "nightly", "backend": "kubernetes"}
    return metrics.registry.get_sample_value(name, {**own, **labels})


def test_ended_runs_are_counted_once_with_their_durations_and_dropped_with_the_object() -> None:
    metrics = Metrics()
    status = ScheduledJobStatus()
    for jobs in ([job(0, False)], [job(0, False), job(1, True)], [job(0, False), job(1, True)]):
        history = run_history(status, [job_run(j) for j in jobs], Limits(),
                              T0 + timedelta(minutes=5), complete=True)  # fmt: skip
        status = status.model_copy(update={
            "recent_runs": history.recent_runs,
            "last_failed_time": history.last_failed_time,
            "last_successful_time": history.last_successful_time,
            "consecutive_failures": history.consecutive_failures,
        })  # fmt: skip
        metrics.history(KEY, "kubernetes", history, status)
    assert value(metrics, "sundial_runs_total", result="Failed") == 1
    assert value(metrics, "sundial_runs_total", result="Succeeded") == 1
    assert value(metrics, "sundial_run_duration_seconds_count") == 2
    assert value(metrics, "sundial_run_duration_seconds_sum") == 60
    assert value(metrics, "sundial_run_start_delay_seconds_count") == 2
    assert value(metrics, "sundial_consecutive_failures") == 0
    metrics.forget(KEY)
    assert value(metrics, "sundial_runs_total", result="Failed") is None
    assert value(metrics, "sundial_run_duration_seconds_count") is None
    assert value(metrics, "sundial_consecutive_failures") is None


def test_every_metric_in_the_shipped_alerts_is_exported() -> None:
    metrics = Metrics()
    exported = set()
    for family in metrics.registry.collect():
        exported.add(family.name)
        if family.type == "counter":
            exported.add(family.name + "_total")
        if family.type == "histogram":
            exported |= {family.name + suffix for suffix in ("_bucket", "_count", "_sum")}
    rules = [rule for group in yaml.safe_load(RULES.read_text())["spec"]["groups"]
             for rule in group["rules"]]  # fmt: skip
    used = {name for rule in rules for name in re.findall(r"\bsundial_\w+", rule["expr"])}
    assert used, "the alerts name no Sundial metric"
    assert used <= exported, used - exported


def test_a_blocked_event_loop_shows_in_the_loop_lag() -> None:
    """The lag is measured by the loop itself: a callback that blocks it for 0.3 s makes
    the next one-second tick 0.3 s late, and that is what the histogram holds."""
    metrics = Metrics()

    async def scenario() -> None:
        watcher = asyncio.create_task(metrics.watch_loop_lag(interval=0.1))
        await asyncio.sleep(0.15)
        time.sleep(0.3)  # noqa: ASYNC251 -- blocks the loop, as a slow pass would
        await asyncio.sleep(0.25)
        watcher.cancel()

    asyncio.run(scenario())
    count = metrics.registry.get_sample_value("sundial_event_loop_lag_seconds_count")
    quick = metrics.registry.get_sample_value(
        "sundial_event_loop_lag_seconds_bucket", {"le": "0.1"}
    )
    assert count is not None
    assert quick is not None
    assert count - quick == 1, "exactly one tick was late by more than 0.1 s"
