"""The example service's entrypoint: MODE=cron runs exactly the job CRON_JOB names, once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from example_service.__main__ import main
from example_service.jobs import JOBS
from sundial.cronjob import cronjob_manifest
from sundial.models import ScheduledJob

SERVICE_DIR = Path(__file__).resolve().parents[2] / "examples" / "service"


def test_hello_runs_once_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main({"MODE": "cron", "CRON_JOB": "hello"}) == 0
    assert capsys.readouterr().out == "hello from the example service's job 'hello'\n"


def test_a_job_that_raises_exits_one_with_the_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main({"MODE": "cron", "CRON_JOB": "fail"}) == 1
    errors = capsys.readouterr().err
    assert "RuntimeError: job 'fail' fails on purpose" in errors
    assert "job 'fail' failed" in errors


def test_sleep_sleeps_sleep_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main({"MODE": "cron", "CRON_JOB": "sleep", "SLEEP_SECONDS": "0.01"}) == 0
    assert "sleeping 0.01s" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["nope", ""])
def test_an_unknown_or_missing_job_is_refused_naming_the_known_ones(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"MODE": "cron", "CRON_JOB": name} if name else {"MODE": "cron"}
    assert main(env) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"unknown job {name!r}" in captured.err
    assert "known jobs: fail, hello, sleep" in captured.err


def test_an_unknown_mode_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main({"MODE": "serve"}) == 2
    assert "unknown MODE 'serve'; known modes: cron, list" in capsys.readouterr().err


def test_list_prints_the_job_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main({"MODE": "list"}) == 0
    assert capsys.readouterr().out.split() == sorted(JOBS) == ["fail", "hello", "sleep"]


def test_the_env_sundials_shorthand_sets_runs_the_named_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
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
    env = {item["name"]: item["value"] for item in container["env"]}
    assert main(env) == 0
    assert "job 'hello'" in capsys.readouterr().out


@pytest.mark.parametrize(("name", "code"), [("hello", 0), ("fail", 1), ("nope", 2)])
def test_the_entrypoint_process_exits_with_the_jobs_outcome(name: str, code: int) -> None:
    """`python3 -m example_service`, as the image's ENTRYPOINT runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "example_service"],
        env={**os.environ, "PYTHONPATH": str(SERVICE_DIR), "MODE": "cron", "CRON_JOB": name},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stderr
