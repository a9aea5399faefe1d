"""The Grafana dashboard (manifests/monitoring/sundial-dashboard.json, shipped as a ConfigMap
by the kustomization there): every PromQL expression reads only what the operator exports
(the names from its own registry, prometheus_support.py) and parses as PromQL (promtool),
and the JSON holds to the dashboard model's essentials (grafana/dashboard.schema.json,
written from Grafana's documented JSON model)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localstack.binaries import find_promtool
from prometheus_support import (
    MONITORING,
    SCRAPE_SERIES,
    bucket_bounds,
    bucket_matchers,
    exercised_metrics,
    exported_names,
    grafana_to_promql,
    metric_names,
)

DASHBOARD = MONITORING / "sundial-dashboard.json"
SCHEMA = Path(__file__).parent / "grafana" / "dashboard.schema.json"
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__all"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(within: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in within:
        yield panel
        yield from panels(panel.get("panels", []))


def expressions(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel query and every query variable's selector."""
    found = [(f"panel {p['title']!r} {t['refId']}", t["expr"])
             for p in panels(board["panels"]) for t in p.get("targets", [])]  # fmt: skip
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            selector = re.fullmatch(r"label_values\((.+),\s*\w+\)", text)
            assert selector, f"variable {variable['name']}: not label_values(selector, label)"
            found.append((f"variable {variable['name']}", selector.group(1)))
    return found


# ---- a JSON Schema subset: the keywords grafana/dashboard.schema.json uses --------------

TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
    "integer": int, "number": (int, float),
}  # fmt: skip


def violations(
    value: Any, schema: dict[str, Any], root: dict[str, Any], at: str = "$"
) -> list[str]:
    """Where `value` breaks `schema` (empty: it holds)."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return violations(value, root["$defs"][name], root, at)
    found: list[str] = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, name) for name in names):
            return [f"{at}: {value!r:.60} is not {' or '.join(names)}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{at}: {value!r} is not one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        found.append(f"{at}: {value!r} is not {schema['const']!r}")
    if "anyOf" in schema and all(violations(value, s, root, at) for s in schema["anyOf"]):
        found.append(f"{at}: {value!r:.60} matches none of anyOf")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{at}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{at}: {value} > {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            found.append(f"{at}: shorter than {schema['minLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(f"{at}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            found.append(f"{at}: fewer than {schema['minItems']} items")
        for i, item in enumerate(value):
            found += violations(item, schema.get("items", {}), root, f"{at}[{i}]")
    if isinstance(value, dict):
        found += [f"{at}: {key} is required" for key in schema.get("required", [])
                  if key not in value]  # fmt: skip
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                found += violations(item, properties[key], root, f"{at}.{key}")
            elif schema.get("additionalProperties") is False:
                found.append(f"{at}: {key} is not allowed")
    return found


def _is(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, TYPES[name])


def schema_violations(board: dict[str, Any]) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    return violations(board, schema, schema)


# ---- the tests ----------------------------------------------------------------------------


def test_the_exported_names_come_from_the_operators_registry() -> None:
    """The derivation of sample names from families agrees with the samples the registry
    really writes, once each family has one."""
    written = {sample.name for family in exercised_metrics().registry.collect()
               for sample in family.samples}  # fmt: skip
    assert written <= exported_names(), written - exported_names()
    for name in ("sundial_runs_total", "sundial_reconcile_duration_seconds_bucket",
                 "sundial_temporal_requests_total", "sundial_condition"):  # fmt: skip
        assert name in exported_names()
    assert "sundial_runs" not in exported_names(), "a counter is exposed with _total"


def test_every_expression_reads_only_metrics_the_operator_exports() -> None:
    exported = exported_names() | SCRAPE_SERIES
    checked = 0
    for where, expr in expressions(dashboard()):
        names = metric_names(grafana_to_promql(expr))
        assert names <= exported, f"{where}: {sorted(names - exported)} not exported: {expr}"
        assert names or expr.startswith("vector("), f"{where} reads no metric: {expr}"
        checked += 1
    assert checked >= 40, checked


def test_every_bucket_bound_an_expression_names_exists() -> None:
    bounds = bucket_bounds()
    for where, expr in expressions(dashboard()):
        for series, le in bucket_matchers(expr):
            assert le in bounds[series], (
                f"{where}: {series} has no le={le!r}: {sorted(bounds[series])}"
            )


def test_the_name_check_catches_a_wrong_name() -> None:
    exported = exported_names()
    assert metric_names('sum by (result) (rate(sundial_runs_total{result="Failed"}[5m]))') == {
        "sundial_runs_total"
    }
    assert metric_names("sum(rate(sundial_runs[5m]))") - exported == {"sundial_runs"}
    wrong = 'histogram_quantile(0.9, sum by (le) (rate(sundial_run_duration_bucket{le="60"}[5m])))'
    assert metric_names(wrong) - exported == {"sundial_run_duration_bucket"}
    joined = "a_total / on (namespace) group_left (name) b offset 5m and bool 1e3 > c"
    assert metric_names(joined) == {"a_total", "b", "c"}
    assert bucket_matchers('x_bucket{le="60"}') == {("x_bucket", "60")}
    with pytest.raises(ValueError, match="__name__"):
        metric_names('{__name__=~"sundial_.*"}')


def test_every_expression_parses_as_promql(tmp_path: Path) -> None:
    """promtool parses each one (as a recording rule's expression)."""
    found = expressions(dashboard())
    rules = [{"record": f"sundial:dashboard:{i}", "expr": grafana_to_promql(expr)}
             for i, (_, expr) in enumerate(found)]  # fmt: skip
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run([str(find_promtool()), "check", "rules", str(path)],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(found)} rules found" in checked.stdout
    path.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [
        {"record": "x", "expr": "sum(rate(sundial_runs_total[5m])"}]}]}))  # fmt: skip
    broken = subprocess.run([str(find_promtool()), "check", "rules", str(path)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert broken.returncode != 0, "promtool took an unbalanced parenthesis"


def test_the_dashboard_holds_to_the_schema() -> None:
    assert schema_violations(dashboard()) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda b: b.pop("uid"), "$: uid is required"),
        (lambda b: b["panels"][1]["gridPos"].update(w=30), "$.panels[1].gridPos.w: 30 > 24"),
        (lambda b: b["panels"][1].update(type="graphh"), "$.panels[1].type: 'graphh' is not one"),
        (lambda b: b["panels"][1]["targets"][0].pop("expr"), "$.panels[1].targets[0]: expr is"),
        (lambda b: b["templating"]["list"][1].update(type="dropdown"), "templating.list[1].type"),
        (lambda b: b.update(schemaVersion="39"), "$.schemaVersion: '39' is not integer"),
    ],
)
def test_the_schema_check_catches_a_broken_dashboard(change: Any, expected: str) -> None:
    board = dashboard()
    change(board)
    found = schema_violations(board)
    assert any(expected in violation for violation in found), found


def test_panels_do_not_overlap_and_ids_are_unique() -> None:
    every = list(panels(dashboard()["panels"]))
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[x, y] = panel["title"]


def test_every_variable_an_expression_uses_is_defined() -> None:
    board = dashboard()
    defined = {v["name"] for v in board["templating"]["list"]} | BUILTIN_VARIABLES
    for where, expr in expressions(board):
        used = set(re.findall(r"\$\{?(\w+)", expr))
        assert used <= defined, f"{where}: {sorted(used - defined)} undefined"
    refs = {json.dumps(p.get("datasource")) for p in panels(board["panels"]) if "targets" in p}
    assert refs == {json.dumps({"type": "prometheus", "uid": "${datasource}"})}


def test_the_dashboard_has_the_fleet_per_job_and_operator_views() -> None:
    board = dashboard()
    text = json.dumps(board)
    for metric in ("sundial_runs_total", "sundial_missed_runs_total", "sundial_skipped_runs_total",
                   "sundial_spec_problem", "sundial_run_start_delay_seconds_bucket",
                   "sundial_last_run_duration_seconds", "sundial_reconcile_duration_seconds_bucket",
                   "sundial_temporal_requests_total", "sundial_reconciles_total"):  # fmt: skip
        assert metric in text, metric
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["Fleet", "Per job ($name)", "Operator"]


def test_the_kustomization_ships_it_as_a_configmap_the_sidecar_finds() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert "prometheusrule.yaml" in kustomization["resources"]
    (generated,) = kustomization["configMapGenerator"]
    assert generated["files"] == [DASHBOARD.name]
    assert generated["options"]["labels"]["grafana_dashboard"] == "1"
    assert generated["options"]["disableNameSuffixHash"] is True
    for listed in kustomization["resources"] + generated["files"]:
        assert (MONITORING / listed).is_file(), listed
