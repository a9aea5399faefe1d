"""Golden files of what Sundial renders: the CronJob of a kubernetes-backed ScheduledJob and
the Schedule of a temporal-backed one, for a handful of realistic specs (as gafaelfawr and
crate-operator keep theirs). A change of rendering is then a reviewed diff of
tests/unit/golden/, not a surprise on a cluster: after a deliberate change, write the files
anew with SUNDIAL_UPDATE_GOLDEN=1 and read the diff."""

from __future__ import annotations

import dataclasses
import enum
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from sundial.api.models import ScheduledJob
from sundial.backends.temporal.schedule import temporal_schedule
from sundial.planning.cronjob import cronjob_manifest

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SUNDIAL_UPDATE_GOLDEN") == "1"
META = {"name": "invoices", "namespace": "billing", "uid": "4f1c-uid", "generation": 3}

CRONJOB_SPECS: dict[str, dict[str, Any]] = {
    "shorthand": {
        "schedule": "*/5 * * * *",
        "job": {"image": "registry.example/billing:1.2", "cronJob": "send-invoices"},
    },
    "shorthand-with-everything": {
        "schedule": "30 2 * * 1-5",
        "timeZone": "Europe/Berlin",
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": 120,
        "suspend": True,
        "successfulRunsHistoryLimit": 5,
        "failedRunsHistoryLimit": 2,
        "job": {
            "image": "registry.example/billing:1.2",
            "cronJob": "nightly-report",
            "env": [{"name": "LOG_LEVEL", "value": "debug"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "ttlSecondsAfterFinished": 3600,
            "serviceAccountName": "billing-jobs",
            "nodeSelector": {"pool": "batch"},
        },
    },
    "full-template": {
        "schedule": "@hourly",
        "concurrencyPolicy": "Replace",
        "job": {
            "template": {
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "serviceAccountName": "reports",
                            "containers": [{
                                "name": "report",
                                "image": "registry.example/reports:7",
                                "args": ["--since", "1h"],
                            }],
                        }
                    },
                }
            }
        },
    },
}  # fmt: skip

SCHEDULE_SPECS: dict[str, dict[str, Any]] = {
    "cron": {
        "schedule": "0 6 * * *",
        "workflow": {"type": "Billing", "taskQueue": "billing"},
    },
    "interval-with-everything": {
        "interval": {"every": "15m", "offset": "2m"},
        "timeZone": "America/New_York",
        "jitter": "30s",
        "concurrencyPolicy": "BufferOne",
        "startingDeadlineSeconds": 600,
        "suspend": True,
        "workflow": {
            "type": "Reconcile",
            "taskQueue": "ledger",
            "args": [{"account": "all"}],
            "executionTimeout": "10m",
            "retryPolicy": {"maximumAttempts": 3, "initialInterval": "5s"},
            "memo": {"team": "ledger"},
        },
    },
}


def scheduledjob(backend: str, spec: dict[str, Any]) -> ScheduledJob:
    return ScheduledJob.model_validate({"metadata": META, "spec": {"backend": backend, **spec}})


def plain(value: Any) -> Any:
    """The SDK's Schedule (dataclasses, enums, durations) as plain YAML-able data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.name.startswith("_")
                and getattr(value, f.name) not in (None, [], {}, (), "")}  # fmt: skip
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value


def matches_golden(name: str, rendered: Any, golden: Path = GOLDEN, update: bool = UPDATE) -> None:
    path = golden / f"{name}.yaml"
    text = yaml.safe_dump(rendered, sort_keys=True, default_flow_style=False)
    if update:
        path.write_text(text)
    assert path.exists(), f"{path} missing: write it with SUNDIAL_UPDATE_GOLDEN=1"
    assert yaml.safe_load(path.read_text()) == yaml.safe_load(text), (
        f"{name} renders differently from {path}: if meant, SUNDIAL_UPDATE_GOLDEN=1 and "
        "review the diff"
    )


@pytest.mark.parametrize("case", sorted(CRONJOB_SPECS))
def test_the_rendered_cronjob_is_the_golden_one(case: str) -> None:
    rendered = cronjob_manifest(scheduledjob("kubernetes", CRONJOB_SPECS[case]))
    matches_golden(f"cronjob-{case}", rendered)


@pytest.mark.parametrize("case", sorted(SCHEDULE_SPECS))
def test_the_rendered_schedule_is_the_golden_one(case: str) -> None:
    identity, schedule, spec_hash = temporal_schedule(
        scheduledjob("temporal", SCHEDULE_SPECS[case]), "sundial/"
    )
    matches_golden(f"schedule-{case}", {"id": identity, "specHash": spec_hash,
                                        "schedule": plain(schedule)})  # fmt: skip


def test_a_changed_rendering_fails_its_golden_file(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(yaml.safe_dump({"schedule": "*/5 * * * *"}))
    matches_golden("x", {"schedule": "*/5 * * * *"}, tmp_path, update=False)
    with pytest.raises(AssertionError, match="renders differently"):
        matches_golden("x", {"schedule": "*/6 * * * *"}, tmp_path, update=False)
