"""The alert rules (manifests/monitoring/prometheusrule.yaml) as Prometheus reads them:
extracted from the PrometheusRule into a plain rule file, checked by `promtool check rules`,
and run against input series by `promtool test rules` (alerts/sundial-rules.test.yaml:
which alerts must fire, and when none may). promtool is built from the Go module proxy by
hack/build-binaries.sh and cached (localstack.binaries.find_promtool)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from localstack.binaries import find_promtool
from prometheus_support import (
    SCRAPE_SERIES,
    exported_names,
    metric_names,
    prometheus_rule,
    rule_file,
)

TESTS = Path(__file__).parent / "alerts" / "sundial-rules.test.yaml"
# The alerts issue 31 asks to be tested, besides every other rule's own case.
REQUIRED = {"ScheduledJobRunsFailing", "ScheduledJobRunMissed", "SundialDown",
            "ScheduledJobPausedByPolicy", "ScheduledJobPausedByFailurePolicy"}  # fmt: skip


@pytest.fixture(scope="module")
def promtool() -> Path:
    return find_promtool()


def alerts() -> list[dict[str, Any]]:
    return [rule for group in prometheus_rule()["spec"]["groups"] for rule in group["rules"]
            if "alert" in rule]  # fmt: skip


def run_unit_tests(
    promtool: Path, workdir: Path, rules: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    (workdir / "sundial-rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copy(TESTS, workdir / TESTS.name)
    return subprocess.run([str(promtool), "test", "rules", TESTS.name], cwd=workdir,
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_promtool_checks_the_rules(promtool: Path, tmp_path: Path) -> None:
    path = tmp_path / "sundial-rules.yaml"
    path.write_text(yaml.safe_dump(rule_file(), sort_keys=False))
    checked = subprocess.run([str(promtool), "check", "rules", str(path)],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    count = sum(len(group["rules"]) for group in rule_file()["groups"])
    assert f"SUCCESS: {count} rules found" in checked.stdout


def test_promtool_unit_tests_of_the_alerts_pass(promtool: Path, tmp_path: Path) -> None:
    result = run_unit_tests(promtool, tmp_path, rule_file(summary_only=True))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    checks = [check for case in cases for check in case["alert_rule_test"]]
    firing = {c["alertname"] for c in checks if c["exp_alerts"]}
    quiet = {c["alertname"] for c in checks if not c["exp_alerts"]}
    names = {rule["alert"] for rule in alerts()}
    assert names >= REQUIRED
    assert names <= firing, f"never shown firing: {sorted(names - firing)}"
    assert (names - {"ScheduledJobRunsSkipped"}) <= quiet, sorted(names - quiet)


@pytest.mark.parametrize(
    ("alert", "broken"),
    [
        ("ScheduledJobPausedByPolicy", "sundial_spec_problem == 1"),
        ("ScheduledJobPausedByFailurePolicy", "sundial_paused == 1"),
        ("ScheduledJobRunsFailing", 'sundial_condition{condition="RunsFailing"} == 1'),
        ("SundialDown", 'absent(up{job=~".*sundial.*"})'),
        ("ScheduledJobRunMissed", "increase(sundial_missed_runs_total[15m]) > 0"),
        ("ScheduledJobRunsFailing", "sundial_condition == 1"),
        ("SundialStalled", "time() - sundial_next_run_timestamp_seconds > 600"),
        ("ScheduledJobRunsSkipped", "increase(sundial_skipped_runs_total[1h]) > 0"),
        ("SundialShardUnserved", "max(sundial_shards) > sum(sundial_shards_held)"),
        ("SundialShardCountMismatch", "sundial_shard_conflict == 1"),
    ],
)
def test_the_unit_tests_catch_a_broken_rule(
    promtool: Path, tmp_path: Path, alert: str, broken: str
) -> None:
    """Each rule weakened in a plausible way (a filter dropped, a threshold lowered, the
    first-miss arm gone) fails the unit tests: they pin the rules, not just run them."""
    rules = rule_file(summary_only=True)
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert]
    rule["expr"] = broken
    result = run_unit_tests(promtool, tmp_path, rules)
    assert result.returncode != 0, f"{alert} as {broken!r} still passed"
    assert alert in result.stdout + result.stderr


def test_every_rule_reads_only_metrics_the_operator_exports() -> None:
    exported = exported_names() | SCRAPE_SERIES
    for rule in (r for g in rule_file()["groups"] for r in g["rules"]):
        names = metric_names(rule["expr"])
        assert names, rule["expr"]
        assert names <= exported, f"{rule.get('alert')}: {sorted(names - exported)}"
