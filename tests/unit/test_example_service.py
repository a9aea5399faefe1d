"""The sample service's entrypoint: MODE=cron CRON_JOB=<name> runs that one job once."""

from __future__ import annotations

import os
import subprocess
import sys

from images import REPO
from sundial.api.models import ScheduledJob
from sundial.planning.cronjob import cronjob_manifest

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
    assert "fail, hello, sleep" in done.stderr


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


def test_the_env_of_sundials_shorthand_runs_the_named_job() -> None:
    """The contract between `job.cronJob` and the image: the rendered env is all it needs."""
    scheduledjob = ScheduledJob.model_validate(
        {
            "metadata": {"name": "greet", "namespace": "default", "uid": "u-1"},
            "spec": {
                "schedule": "*/5 * * * *",
                "job": {"image": "localhost/sundial/example-service:dev", "cronJob": "hello"},
            },
        }
    )
    pod = cronjob_manifest(scheduledjob)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "command" not in container  # the image's own entrypoint dispatches
    done = run(**{item["name"]: item["value"] for item in container["env"]})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("hello job ran") == 1
