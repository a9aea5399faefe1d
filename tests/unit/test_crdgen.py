"""The CRD is generated from the models, structural, and committed fresh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sundial.api import crdgen

CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "scheduledjobs.sundial.dev.yaml"


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found.extend(walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(walk(value, f"{path}[{i}]"))
    return found


def test_committed_crd_is_fresh() -> None:
    assert CRD_FILE.read_text() == crdgen.render(), "run `make crds` and commit the result"


def test_schema_is_structural() -> None:
    schema = crdgen.openapi_schema()
    for path, node in walk(schema):
        assert "$ref" not in node, path
        assert "anyOf" not in node, path
        assert "title" not in node, path
        assert node.get("default", "") is not None, f"null default at {path}"
        if "properties" in node:
            assert node.get("type") == "object", f"{path} lacks type: object"
            assert "additionalProperties" not in node, path


def test_spec_fields_have_descriptions_for_kubectl_explain() -> None:
    spec = crdgen.openapi_schema()["properties"]["spec"]
    for name in ("backend", "schedule", "timeZone", "concurrencyPolicy", "job", "workflow"):
        assert spec["properties"][name].get("description"), name


def test_printer_columns() -> None:
    version = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == [
        "Backend", "Schedule", "Suspend", "Last Run", "Next Run", "Last Result", "Missed",
        "Ready", "Age", "TimeZone", "Last Duration", "Failures",
    ]  # fmt: skip
    assert columns["Next Run"]["type"] == "string"
    assert columns["TimeZone"]["priority"] == 1
    # -o wide only: the newest run's duration and the failing streak.
    assert columns["Last Duration"]["priority"] == 1
    assert columns["Failures"]["priority"] == 1
    assert version["subresources"] == {"status": {}}


def test_temporal_only_fields_are_refused_on_kubernetes_at_apply() -> None:
    spec = crdgen.openapi_schema()["properties"]["spec"]
    refused = {
        rule["fieldPath"].removeprefix(".")
        for rule in spec["x-kubernetes-validations"]
        if "only supported with backend: temporal" in rule["message"]
    }
    # What kubectl explain calls temporal-only is refused elsewhere, not ignored.
    documented = {
        name for name, field in spec["properties"].items()
        if "temporal only" in field.get("description", "")
    }  # fmt: skip
    assert documented <= refused
    # A connection on a kubernetes-backed object would be silently unused.
    assert "temporalConnectionRef" in refused
