"""Generates Sundial's CustomResourceDefinitions from the pydantic models.

pydantic emits JSON Schema with `$ref`, `anyOf [X, null]` for optional fields and a `title`
everywhere; a Kubernetes structural schema allows none of those. This module turns one into
the other, and adds what only a CRD has (printer columns, subresources). Run it with
`python -m sundial.api.crdgen crds` (`make crds`); `--check crds` says whether crds/ is fresh.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from sundial.api import connection_models, models

_DROPPED_KEYWORDS = {"title", "examples", "discriminator"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Backend", "type": "string", "jsonPath": ".spec.backend"},
    {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
    {"name": "Suspend", "type": "boolean", "jsonPath": ".spec.suspend"},
    {"name": "Last Run", "type": "date", "jsonPath": ".status.lastScheduleTime"},
    # A string, not a date: kubectl prints a date in the future as <invalid>.
    {"name": "Next Run", "type": "string", "jsonPath": ".status.nextRunTimes[0]"},
    {"name": "Last Result", "type": "string", "jsonPath": ".status.lastResult"},
    {"name": "Missed", "type": "integer", "jsonPath": ".status.missedRuns"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "TimeZone", "type": "string", "jsonPath": ".spec.timeZone", "priority": 1},
    {
        "name": "Last Duration",
        "type": "number",
        "jsonPath": ".status.recentRuns[0].durationSeconds",
        "priority": 1,
    },
    {
        "name": "Failures",
        "type": "integer",
        "jsonPath": ".status.consecutiveFailures",
        "priority": 1,
    },
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
            if key == "format" and value is None:
                continue  # a model's `"format": None` takes its type's format away
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


class _Dumper(yaml.SafeDumper):
    """No &id anchors: a schema reused in two places is written out twice, as people read it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100)


HEADER = "# Generated by `make crds` from operator/sundial/*models.py. Do not edit.\n"

CONNECTION_COLUMNS: list[dict[str, Any]] = [
    {"name": "Address", "type": "string", "jsonPath": ".spec.address"},
    {"name": "Temporal Namespace", "type": "string", "jsonPath": ".spec.namespace"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def connection_crd(*, cluster: bool) -> dict[str, Any]:
    """TemporalConnection or ClusterTemporalConnection: spec only (nothing is written back:
    the ScheduledJobs using one say in their status how it went)."""
    cm = connection_models
    model = cm.ClusterTemporalConnectionSpec if cluster else cm.TemporalConnectionSpec
    kind = cm.CLUSTER_CONNECTION_KIND if cluster else cm.CONNECTION_KIND
    plural = cm.CLUSTER_CONNECTION_PLURAL if cluster else cm.CONNECTION_PLURAL
    spec = structural(model.model_json_schema(by_alias=True))
    spec["description"] = (model.__doc__ or "").strip() or (
        "How the operator reaches one Temporal namespace, and with which credentials."
    )
    scope_note = (
        "Usable by ScheduledJobs in the namespaces its namespaceSelector admits; its Secrets "
        "are in the operator's cluster resource namespace."
        if cluster
        else "Usable by the ScheduledJobs of its own namespace; its Secrets are there too."
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{models.GROUP}"},
        "spec": {
            "group": models.GROUP,
            "scope": "Cluster" if cluster else "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": ["ctc"] if cluster else ["tc"],
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": CONNECTION_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": f"A connection to Temporal. {scope_note}",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                            },
                        }
                    },
                }
            ],
        },
    }


def render() -> str:
    return HEADER + _dump(crd())


def render_all() -> dict[str, str]:
    """Every CRD, by the file name it is committed under in crds/."""
    files = {f"{models.PLURAL}.{models.GROUP}.yaml": render()}
    for cluster in (False, True):
        document = connection_crd(cluster=cluster)
        text = HEADER + _dump(document)
        files[f"{document['metadata']['name']}.yaml"] = text
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sundial.api.crdgen")
    parser.add_argument("directory", type=Path, help="where the CRDs are written (crds/)")
    parser.add_argument("--check", action="store_true", help="only say whether it is fresh")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render_all().items():
        path = args.directory / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale in {args.directory}: {', '.join(stale)}: run 'make crds'", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
