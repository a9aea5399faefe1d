"""What the operator exports to Prometheus, and the metric names a PromQL expression reads:
the Grafana dashboard's and the alert rules' tests hold every expression to the first.

The exported names come from the operator's own registry (sundial.metrics.Metrics), never
from a list kept here: a family renamed or dropped in the code fails the tests that read it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sundial.api.models import MissedRun
from sundial.metrics import Metrics

REPO = Path(__file__).resolve().parent.parent
MONITORING = REPO / "manifests" / "monitoring"
# Series Prometheus makes itself for every scrape target, not the operator.
SCRAPE_SERIES = frozenset({"up"})
# The samples each family type is exposed as (the text format prometheus_client writes).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}
# Words of PromQL that are not metric names where a name could stand.
KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan",
})  # fmt: skip
GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
NAME = re.compile(r"(?<![\w.:])([A-Za-z_:][A-Za-z0-9_:]*)")


def exercised_metrics() -> Metrics:
    """A Metrics with a sample in every family the operator can fill without a cluster."""
    metrics = Metrics()
    key, backend = ("shop", "nightly"), "kubernetes"
    metrics.reconciles.labels("ok").inc()
    metrics.reconcile_seconds.observe(0.02)
    metrics.loop_lag.observe(0.001)
    metrics.gc_pause.labels("2").observe(0.01)
    metrics.temporal_request("DescribeSchedule")
    metrics.watch_queue(lambda: {"queued": 3, "parked": 1, "delayed": 40, "processing": 2})
    metrics.run_duration.labels(*key[:1], backend).observe(42)
    metrics.start_delay.labels(*key[:1], backend).observe(3)
    slot = datetime(2026, 12, 4, 3, tzinfo=UTC)
    reasons = ("ControllerDown", "OverlapSkipped", "Unknown")
    metrics.runs(key, backend, [MissedRun(scheduled_time=slot, reason=r) for r in reasons])
    metrics.times(key, backend, slot, slot)
    metrics.spec_problem(key, backend, "InvalidSchedule")
    return metrics


@cache
def exported_names() -> frozenset[str]:
    """Every sample name /metrics can carry, from the families of the operator's registry."""
    names: set[str] = set()
    metrics = Metrics()
    metrics.watch_shards(2, held=lambda: 0, conflict=lambda: False)  # sharded mode's too
    for family in metrics.registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return frozenset(names)


@cache
def bucket_bounds() -> dict[str, frozenset[str]]:
    """Each histogram's `le` values as exposed (prometheus_client writes 60 as "60.0")."""
    bounds: dict[str, set[str]] = {}
    for family in exercised_metrics().registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                bounds.setdefault(sample.name, set()).add(sample.labels["le"])
    return {name: frozenset(values) for name, values in bounds.items()}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, keywords, labels)."""
    if "__name__" in expr:
        raise ValueError(f"a selector by __name__ cannot be checked: {expr}")
    text = STRING.sub('""', expr)
    text = re.sub(r"#[^\n]*", " ", text)  # comments
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)  # ranges and subqueries
    text = GROUPING.sub(" ", text)
    text = re.sub(r"\boffset\s+-?\w+", " ", text, flags=re.IGNORECASE)
    names = set()
    for match in NAME.finditer(text):
        word = match.group(1)
        if word.lower() in KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def bucket_matchers(expr: str) -> set[tuple[str, str]]:
    """(histogram bucket series, le value) pairs an expression matches exactly."""
    found = set()
    for match in re.finditer(r"(\w+_bucket)\s*\{([^{}]*)\}", expr):
        for le in re.findall(r'\ble\s*=\s*"([^"]*)"', match.group(2)):
            found.add((match.group(1), le))
    return found


def grafana_to_promql(expr: str) -> str:
    """A Grafana query as Prometheus would get it: the range and interval macros as a
    duration, every other variable as 1 (a number outside strings, a regex inside)."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}",
                  "5m", expr)  # fmt: skip
    return re.sub(r"\$\{\w+(:\w+)?\}|\$\w+", "1", expr)


def prometheus_rule() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return loaded


def rule_file(*, summary_only: bool = False) -> dict[str, Any]:
    """The PrometheusRule's groups as a plain Prometheus rule file (what promtool reads)."""
    groups = prometheus_rule()["spec"]["groups"]
    if summary_only:
        for rule in (rule for group in groups for rule in group["rules"]):
            if "annotations" in rule:
                rule["annotations"] = {"summary": rule["annotations"]["summary"]}
    return {"groups": groups}
