"""The sample service's entrypoint: MODE=cron CRON_JOB=<name> runs that one job once, with
sundial-cron (lib/sundial-cron), from the env Sundial renders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from images import REPO
from sundial.api.models import ScheduledJob
from sundial.planning.cronjob import cronjob_manifest, requested_job

SERVICE = REPO / "examples" / "service"


def run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service"],
        cwd=SERVICE,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_named_job_runs_once_and_succeeds() -> None:
    done = run(MODE="cron", CRON_JOB="hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("hello job ran") == 1


def test_a_job_that_raises_exits_non_zero() -> None:
    done = run(MODE="cron", CRON_JOB="fail")
    assert done.returncode == 1
    assert "the fail job failed" in done.stderr


def test_an_unknown_job_is_refused_with_the_known_names() -> None:
    done = run(MODE="cron", CRON_JOB="nope")
    assert done.returncode == 2
    assert "no job named 'nope'" in done.stderr
    assert "fail, hello, sleep, tally" in done.stderr


def test_a_missing_job_name_is_refused() -> None:
    done = run(MODE="cron", CRON_JOB="")
    assert done.returncode == 2
    assert "MODE=cron needs CRON_JOB=<job name>" in done.stderr


def test_an_unknown_mode_is_refused() -> None:
    done = run(MODE="batch")
    assert done.returncode == 2
    assert "unknown MODE 'batch'" in done.stderr


def test_sleep_sleeps_sleep_seconds() -> None:
    done = run(MODE="cron", CRON_JOB="sleep", SLEEP_SECONDS="0.01")
    assert done.returncode == 0, done.stderr
    assert "sleeping 0.01s" in done.stdout


SLOT = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)


def rendered(cron_job: str) -> dict[str, Any]:
    scheduledjob = ScheduledJob.model_validate(
        {
            "metadata": {"name": "greet", "namespace": "default", "uid": "u-1"},
            "spec": {
                "schedule": "*/5 * * * *",
                "job": {"image": "localhost/sundial/example-service:dev", "cronJob": cron_job},
            },
        }
    )
    return cronjob_manifest(scheduledjob)


def pod_env(job_template: dict[str, Any], job_name: str) -> dict[str, str]:
    """The container's env as the kubelet gives it: the downward API's Job name resolved."""
    (container,) = job_template["spec"]["template"]["spec"]["containers"]
    assert "command" not in container  # the image's own entrypoint dispatches
    env: dict[str, str] = {}
    for item in container["env"]:
        field = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if field is not None:
            assert field == "metadata.labels['batch.kubernetes.io/job-name']"
            env[item["name"]] = job_name
        else:
            env[item["name"]] = item["value"]
    return env


def test_the_env_of_sundials_shorthand_runs_the_named_job_for_its_slot(tmp_path: Path) -> None:
    """The contract between `job.cronJob` and the image: the rendered env is all it needs,
    and the slot the job reports is the one the CronJob controller named its Job for."""
    job_name = f"greet-{int(SLOT.timestamp()) // 60}"
    message = tmp_path / "termination-log"
    env = pod_env(rendered("hello")["spec"]["jobTemplate"], job_name)
    done = run(**env, SUNDIAL_TERMINATION_MESSAGE_PATH=str(message))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("hello job ran") == 1
    summary = json.loads(message.read_text())
    assert (summary["slot"], summary["message"]) == (
        "2026-12-01T10:05:00Z",
        "hello for slot 2026-12-01T10:05:00Z",
    )


def test_a_backfill_job_sundial_makes_runs_for_its_slot(tmp_path: Path) -> None:
    cronjob = rendered("hello")
    cronjob["metadata"]["uid"] = "cj-1"
    job = requested_job(cronjob, "greet-r123456789", SLOT, "Backfill/june")
    message = tmp_path / "termination-log"
    done = run(**pod_env(job, "greet-r123456789"), SUNDIAL_TERMINATION_MESSAGE_PATH=str(message))
    assert done.returncode == 0, done.stderr
    summary = json.loads(message.read_text())
    assert (summary["slot"], summary["requested"]) == ("2026-12-01T10:05:00Z", "Backfill/june")


def test_tally_upserts_by_slot_so_running_twice_has_the_same_outcome(tmp_path: Path) -> None:
    store = tmp_path / "tally.json"
    outcomes = []
    for _ in range(2):
        done = run(MODE="cron", CRON_JOB="tally", SUNDIAL_SLOT="2026-12-01T10:00:00Z",
                   TALLY_STORE=str(store))  # fmt: skip
        assert done.returncode == 0, done.stderr
        outcomes.append(json.loads(store.read_text()))
    assert outcomes[0] == outcomes[1]
    assert list(outcomes[1]) == ["tally@2026-12-01T10:00:00Z"]
    assert "job tally succeeded" in done.stdout
    assert "updated the row of tally@2026-12-01T10:00:00Z" in done.stdout


def test_tally_without_a_slot_fails_rather_than_guess() -> None:
    done = run(MODE="cron", CRON_JOB="tally", SUNDIAL_SLOT="")
    assert done.returncode == 1
    assert "RuntimeError: no slot" in done.stderr
