"""The run metrics (metrics.py): counted once per ended run, bounded labels, dropped with
the object; and every metric the shipped alerts use is one the operator exports."""

from __future__ import annotations

import asyncio
import gc
import re
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from sundial.api.models import MissedRun, ScheduledJobStatus
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
    assert value(metrics, "sundial_last_run_duration_seconds") == 30
    assert value(metrics, "sundial_last_run_start_delay_seconds") == 2
    assert value(metrics, "sundial_consecutive_failures") == 0
    # The distributions are per namespace: their series do not grow with the objects.
    assert namespace_value(metrics, "sundial_run_duration_seconds_count") == 2
    assert namespace_value(metrics, "sundial_run_duration_seconds_sum") == 60
    assert namespace_value(metrics, "sundial_run_start_delay_seconds_count") == 2
    metrics.forget(KEY)
    assert value(metrics, "sundial_runs_total", result="Failed") is None
    assert value(metrics, "sundial_last_run_duration_seconds") is None
    assert value(metrics, "sundial_consecutive_failures") is None
    # The namespace's last object is gone, and with it the namespace's distributions.
    assert namespace_value(metrics, "sundial_run_duration_seconds_count") is None


def namespace_value(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"namespace": "team", "backend": "kubernetes"})


def test_series_per_object_are_few_and_none_is_a_histogram() -> None:
    """Per-object histograms multiply the series by their buckets (tens of thousands at
    5,000 objects, and most of the operator's memory per object): the per-object view is
    gauges, the distributions are per namespace."""
    metrics = Metrics()
    for index in range(50):
        key = ("team", f"job-{index}")
        history = run_history(ScheduledJobStatus(), [job_run(job(0, True))], Limits(),
                              T0 + timedelta(minutes=5), complete=True)  # fmt: skip
        metrics.history(key, "kubernetes", history, ScheduledJobStatus())
        metrics.times(key, "kubernetes", T0, T0 + timedelta(minutes=1))
    per_object = [
        sample for family in metrics.registry.collect() for sample in family.samples
        if sample.labels.get("name", "").startswith("job-")
    ]  # fmt: skip
    assert len(per_object) <= 50 * 8, len(per_object)
    assert not [s for s in per_object if s.name.endswith("_bucket")]


def test_every_metric_in_the_shipped_alerts_is_exported() -> None:
    metrics = Metrics()
    metrics.watch_shards(2, held=lambda: 0, conflict=lambda: False)  # sharded mode's too
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


def test_a_full_garbage_collection_shows_in_the_gc_pauses_and_the_watch_comes_off() -> None:
    """A collection stops every thread, the event loop's too: its pauses are measured, by
    generation, so loop lag can be told apart from the collector's."""
    metrics = Metrics()
    with metrics.watching_gc():
        gc.collect()
        gc.collect()
    full = metrics.registry.get_sample_value("sundial_gc_pause_seconds_count", {"generation": "2"})
    assert full is not None
    assert full >= 2
    gc.collect()
    after = metrics.registry.get_sample_value("sundial_gc_pause_seconds_count", {"generation": "2"})
    assert after == full


def test_the_series_of_an_object_cost_under_a_kibibyte() -> None:
    """prometheus_client's labelled children cost about 4 KiB per ScheduledJob for five
    series (20 MiB at 5,000 objects): the per-object series are one record each, made
    into samples when scraped."""
    metrics = Metrics()
    status = ScheduledJobStatus.model_validate({"conditions": [
        {"type": "RunsMissed", "status": "False", "reason": "RanOnTime", "message": "on time",
         "lastTransitionTime": "2026-12-05T00:00:00Z"},
    ]})  # fmt: skip
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for index in range(2000):
        key = ("bench", f"sj-{index:05d}")
        metrics.times(key, "kubernetes", T0, T0 + timedelta(minutes=1))
        metrics.runs(key, "kubernetes", [MissedRun(scheduled_time=T0, reason="OverlapSkipped")])
        metrics.history(key, "kubernetes", None, status)
    per_object = (tracemalloc.get_traced_memory()[0] - before) / 2000
    tracemalloc.stop()
    assert per_object < 1024, per_object
    assert (
        value(metrics, "sundial_skipped_runs_total", reason="OverlapSkipped") is None
    )  # other key
    assert metrics.registry.get_sample_value("sundial_skipped_runs_total", {
        "namespace": "bench", "name": "sj-00007", "backend": "kubernetes",
        "reason": "OverlapSkipped"}) == 1  # fmt: skip
    assert metrics.registry.get_sample_value("sundial_condition", {
        "namespace": "bench", "name": "sj-00007", "backend": "kubernetes",
        "condition": "RunsMissed"}) == 0  # fmt: skip


def test_an_object_held_by_a_spec_problem_says_so_until_it_is_in_step_again() -> None:
    metrics = Metrics()
    metrics.times(KEY, "kubernetes", None, T0)
    metrics.spec_problem(KEY, "kubernetes", "InvalidTimeZone")
    assert value(metrics, "sundial_spec_problem", reason="InvalidTimeZone") == 1
    metrics.spec_problem(KEY, "kubernetes", None)
    assert value(metrics, "sundial_spec_problem", reason="InvalidTimeZone") is None
    assert value(metrics, "sundial_next_run_timestamp_seconds") == T0.timestamp()


STALLED = re.compile(
    r"^\(?time\(\) - (?P<next_run>\w+) > (?P<seconds>\d+)\)?"
    r"(?: unless on \((?P<on>[\w, ]+)\) (?P<held>\w+))?$"
)


def stalled_alerts(metrics: Metrics, now: datetime) -> set[tuple[str, str]]:
    """The objects SundialStalled fires for, its expression evaluated on the samples."""
    (rule,) = [rule for group in yaml.safe_load(RULES.read_text())["spec"]["groups"]
               for rule in group["rules"] if rule.get("alert") == "SundialStalled"]  # fmt: skip
    shape = STALLED.match(" ".join(rule["expr"].split()))
    assert shape is not None, f"evaluate the new shape of SundialStalled here: {rule['expr']}"
    samples = [s for family in metrics.registry.collect() for s in family.samples]
    stale = {
        (s.labels["namespace"], s.labels["name"]) for s in samples
        if s.name == shape["next_run"] and now.timestamp() - s.value > int(shape["seconds"])
    }  # fmt: skip
    if shape["held"] is None:
        return stale
    assert [label.strip() for label in shape["on"].split(",")] == ["namespace", "name"]
    held = {(s.labels["namespace"], s.labels["name"]) for s in samples if s.name == shape["held"]}
    return stale - held


def test_the_stalled_alert_blames_the_operator_only_for_objects_it_fails_to_bring_in_step() -> None:
    metrics = Metrics()
    stuck_on_spec, stuck_on_api = ("team", "bad-zone"), ("team", "api-down")
    for key in (stuck_on_spec, stuck_on_api, KEY):
        metrics.times(key, "kubernetes", None, T0)
    # The passes since: one refused by a spec problem, one failed (retried), one in step.
    metrics.spec_problem(stuck_on_spec, "kubernetes", "InvalidTimeZone")
    metrics.times(KEY, "kubernetes", None, T0 + timedelta(hours=1))
    assert stalled_alerts(metrics, T0 + timedelta(minutes=30)) == {stuck_on_api}


def test_runs_that_ended_unseen_are_counted_apart_once_per_pass_that_states_them() -> None:
    """status.unseenRuns, as a counter per object (sundial_unseen_runs_total): the gap
    stated, never added to sundial_runs_total."""
    metrics = Metrics()
    status = ScheduledJobStatus()
    assert value(metrics, "sundial_unseen_runs_total") is None
    history = run_history(status, [job_run(job(0, True))], Limits(),
                          T0 + timedelta(minutes=5), complete=True, unseen=4)  # fmt: skip
    metrics.history(KEY, "kubernetes", history, status)
    status = status.model_copy(update={"recent_runs": history.recent_runs,
                                       "unseen_runs": history.unseen_runs})  # fmt: skip
    # The next pass adds none: the counter stays.
    history = run_history(status, [job_run(job(0, True))], Limits(),
                          T0 + timedelta(minutes=6), complete=True)  # fmt: skip
    metrics.history(KEY, "kubernetes", history, status)
    assert value(metrics, "sundial_unseen_runs_total") == 4
    assert value(metrics, "sundial_runs_total", result="Succeeded") == 1
    metrics.forget(KEY)
    assert value(metrics, "sundial_unseen_runs_total") is None


def test_the_limit_a_dashboard_sets_durations_against_is_the_objects_own() -> None:
    def judged(limit: timedelta | None) -> None:
        status = ScheduledJobStatus()
        history = run_history(status, [], Limits(max_run_duration=limit), T0, complete=True)
        metrics.history(KEY, "kubernetes", history, status)

    metrics = Metrics()
    judged(timedelta(minutes=5))
    assert value(metrics, "sundial_max_run_duration_seconds") == 300.0
    judged(None)  # the limit taken out of the spec
    assert value(metrics, "sundial_max_run_duration_seconds") is None
    judged(timedelta(seconds=90))
    metrics.forget(KEY)
    assert value(metrics, "sundial_max_run_duration_seconds") is None


def test_a_sharded_replica_exports_its_shards_and_whether_another_count_keeps_it_out() -> None:
    metrics = Metrics()
    held = {1, 4}
    conflict: list[str] = []
    metrics.watch_shards(6, held=lambda: len(held), conflict=lambda: bool(conflict))
    value = metrics.registry.get_sample_value
    assert (value("sundial_shards"), value("sundial_shards_held")) == (6, 2)
    assert value("sundial_shard_conflict") == 0
    held.clear()
    conflict.append("replicas hold shard Leases for [4] shards")
    assert (value("sundial_shards_held"), value("sundial_shard_conflict")) == (0, 1)


def test_an_unsharded_operator_exports_no_shard_series() -> None:
    assert Metrics().registry.get_sample_value("sundial_shards") is None
