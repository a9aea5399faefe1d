"""Generates the ScheduledJob CustomResourceDefinition from the pydantic models.

pydantic emits JSON Schema with `$ref`, `anyOf [X, null]` for optional fields and a `title`
everywhere; a Kubernetes structural schema allows none of those. This module turns one into
the other, and adds what only a CRD has (printer columns, subresources). Run it with
`python -m sundial.crdgen > crds/scheduledjobs.sundial.dev.yaml` (`make crds`).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from sundial import models

_DROPPED_KEYWORDS = {"title", "examples", "discriminator"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Backend", "type": "string", "jsonPath": ".spec.backend"},
    {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
    {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"},
    {"name": "Last Run", "type": "date", "jsonPath": ".status.lastScheduleTime"},
    # A string, not a date: kubectl prints a date in the future as <invalid>.
    {"name": "Next Run", "type": "string", "jsonPath": ".status.nextRunTimes[0]"},
    {"name": "Missed", "type": "integer", "jsonPath": ".status.missedRuns"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "TimeZone", "type": "string", "jsonPath": ".spec.timeZone", "priority": 1},
]


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline every $ref and rewrite pydantic's JSON Schema into a structural schema."""
    definitions: dict[str, Any] = schema.get("$defs", {})

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        node = dict(node)
        if "$ref" in node:
            target = definitions[node.pop("$ref").rsplit("/", 1)[-1]]
            node = {**target, **node}
        if "anyOf" in node:
            variants = [v for v in node.pop("anyOf") if v.get("type") != "null"]
            if len(variants) != 1:
                raise ValueError(f"cannot express a union in a structural schema: {variants}")
            if node.get("default", "") is None:
                del node["default"]
            node = {**convert(variants[0]), **node}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROPPED_KEYWORDS or key == "$defs":
                continue
            if key == "properties":
                out[key] = {name: convert(sub) for name, sub in value.items()}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = convert(value)
            else:
                out[key] = value
        if out.get("x-kubernetes-preserve-unknown-fields"):
            out.pop("additionalProperties", None)
            if out.get("items") == {}:
                out.pop("items")
        elif out.get("additionalProperties") is False:
            # Structural schemas forbid it beside properties; the apiserver prunes unknown
            # fields and `kubectl apply` warns about them.
            del out["additionalProperties"]
        return out

    result: dict[str, Any] = convert(schema)
    return result


def openapi_schema() -> dict[str, Any]:
    spec = structural(models.ScheduledJobSpec.model_json_schema(by_alias=True))
    status = structural(
        models.ScheduledJobStatus.model_json_schema(by_alias=True, mode="serialization")
    )
    spec["description"] = "The desired recurring job."
    status["description"] = "What the operator observed; rebuilt on every reconcile."
    return {
        "type": "object",
        "description": "A recurring job run by a native Kubernetes CronJob or a Temporal "
        "Schedule, with every missed or skipped run reported in status.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.size() <= {models.MAX_NAME_LENGTH}",
                "message": f"metadata.name must be at most {models.MAX_NAME_LENGTH} characters: "
                "the CronJob controller appends a suffix to name each Job",
            }
        ],
    }


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{models.PLURAL}.{models.GROUP}"},
        "spec": {
            "group": models.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": models.KIND,
                "listKind": f"{models.KIND}List",
                "plural": models.PLURAL,
                "singular": models.SINGULAR,
                "shortNames": models.SHORT_NAMES,
                "categories": ["all"],
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def render() -> str:
    header = "# Generated by `make crds` from operator/sundial/models.py. Do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
