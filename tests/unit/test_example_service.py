"""The sample service's entrypoint: MODE=cron CRON_JOB=<name> runs that one job once."""

from __future__ import annotations

import os
import subprocess
import sys

from images import REPO

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
