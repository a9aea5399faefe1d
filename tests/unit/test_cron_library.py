"""sundial-cron (lib/sundial-cron), the service side of `job.cronJob`: the registry, every exit
path of a run, the run's context from the env Sundial sets, the summary in the termination
message and its cap, the event log, and a SIGTERM'd run in a real process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sundial_cron
from sundial_cron import EXIT_TERMINATED, Registry, RunContext, Summary, context, main, run
from sundial_cron.context import UsageError, context_from_env
from sundial_cron.runner import MESSAGE_FLOOR, TERMINATION_MESSAGE_LIMIT, termination_message

LIBRARY = Path(sundial_cron.__file__).resolve().parents[1]  # lib/sundial-cron/src
SLOT = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)
MINUTES = int(SLOT.timestamp()) // 60


@pytest.fixture
def message_file(tmp_path: Path) -> Path:
    return tmp_path / "termination-log"


class Ran:
    """One run in this process: its exit code, what it printed, what it left."""

    def __init__(self, registry: Registry, name: str, message_file: Path, **env: str) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()
        environ = {"SUNDIAL_TERMINATION_MESSAGE_PATH": str(message_file), **env}
        self.code = run(registry, name, environ, out=self.out, err=self.err)
        self.summary: dict[str, Any] = json.loads(message_file.read_text())


def registry() -> Registry:
    jobs = Registry()

    @jobs.job(schedule="*/5  * * * *")
    def send_invoices(run: RunContext) -> Summary:
        """Sends the invoices due by the slot."""
        return Summary(f"sent 3 invoices for {run.slot:%H:%M}", {"sent": 3})

    @jobs.job(name="async-one", description="an async job")
    async def anything() -> str:
        await asyncio.sleep(0)
        return f"async ran for {context().slot}"

    @jobs.job
    def broken(run: RunContext) -> None:
        run.summary.message = "sent 2 before it broke"
        run.summary.count("sent", 2)
        raise ValueError("no row for customer 7")

    @jobs.job
    async def broken_async() -> None:
        raise KeyError("missing")

    @jobs.job
    def exits(run: RunContext) -> None:
        raise SystemExit(int(run.requested == "RunNow/x"))

    return jobs


# ---- the registry --------------------------------------------------------------------


def test_the_decorator_names_describes_and_keeps_the_function() -> None:
    jobs = registry()
    assert list(jobs) == ["send-invoices", "async-one", "broken", "broken-async", "exits"]
    job = jobs["send-invoices"]
    assert (job.description, job.schedule) == ("Sends the invoices due by the slot.", "*/5 * * * *")
    assert job.takes_context
    assert not jobs["async-one"].takes_context
    assert jobs["async-one"].description == "an async job"


def test_the_seed_conventions_dict_is_a_registry() -> None:
    def hello() -> None: ...

    jobs = Registry.from_tasks(
        {
            "hello": {"task": hello, "description": "says hello", "schedule": "@hourly"},
            "bare": hello,
        }
    )
    assert (jobs["hello"].description, jobs["hello"].schedule) == ("says hello", "@hourly")
    assert jobs["bare"].function is hello


@pytest.mark.parametrize(
    ("tasks", "problem"),
    [
        ({"x": {"task": print, "schedule": "every day"}}, "has 2 fields"),
        ({"x": {"task": print, "schedule": "0 3 * * * *"}}, "has 6 fields"),
        ({"x": {"task": print, "schedule": "0 3 * * m@n"}}, "'m@n' is no cron field"),
        ({"x": {"description": "no task"}}, "an entry has 'task'"),
        ({"x": {"task": print, "when": "@daily"}}, "an entry has 'task'"),
        ({"-x": print}, "job name '-x'"),
        ({"x": "not callable"}, "is not callable"),
    ],
)
def test_a_registry_that_cannot_be_right_fails_at_import(
    tasks: dict[str, Any], problem: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=problem):
        Registry.from_tasks(tasks)


def test_a_name_registered_twice_is_refused() -> None:
    jobs = Registry()
    jobs.add("x", print)
    with pytest.raises(ValueError, match="registered twice"):
        jobs.add("x", print)


# ---- every exit path -------------------------------------------------------------------


def test_a_sync_job_that_succeeds_exits_0_with_its_summary(message_file: Path) -> None:
    ran = Ran(
        registry(),
        "send-invoices",
        message_file,
        SUNDIAL_JOB_NAME=f"billing-{MINUTES}",
        SUNDIAL_CRONJOB="billing",
        HOSTNAME="p-1",
    )
    assert ran.code == 0
    assert ran.summary == {
        "sundial": 1,
        "job": "send-invoices",
        "result": "succeeded",
        "exitCode": 0,
        "message": "sent 3 invoices for 10:05",
        "counts": {"sent": 3},
        "slot": "2026-12-01T10:05:00Z",
        "requested": None,
        "attempt": None,
        "pod": "p-1",
        "durationSeconds": ran.summary["durationSeconds"],
    }
    assert "running job send-invoices for slot 2026-12-01T10:05:00Z" in ran.out.getvalue()
    assert "job send-invoices succeeded in" in ran.out.getvalue()


def test_an_async_job_that_succeeds_exits_0(message_file: Path) -> None:
    ran = Ran(registry(), "async-one", message_file, SUNDIAL_SLOT="2026-12-01T10:05:00Z")
    assert ran.code == 0
    assert ran.summary["message"] == "async ran for 2026-12-01 10:05:00+00:00"


def test_a_job_that_raises_exits_1_keeping_the_exception_and_what_it_said(
    message_file: Path,
) -> None:
    ran = Ran(registry(), "broken", message_file)
    assert ran.code == 1
    assert ran.summary["result"] == "failed"
    assert ran.summary["error"] == "ValueError: no row for customer 7"
    assert ran.summary["message"] == (
        "failed: ValueError: no row for customer 7; sent 2 before it broke"
    )
    assert ran.summary["counts"] == {"sent": 2}
    assert "Traceback" in ran.err.getvalue()
    assert "job broken failed: ValueError: no row for customer 7" in ran.err.getvalue()


def test_an_async_job_that_raises_exits_1(message_file: Path) -> None:
    ran = Ran(registry(), "broken-async", message_file)
    assert (ran.code, ran.summary["error"]) == (1, "KeyError: 'missing'")


def test_sys_exit_in_a_job_is_its_outcome(message_file: Path) -> None:
    assert Ran(registry(), "exits", message_file).code == 0
    ran = Ran(registry(), "exits", message_file, SUNDIAL_REQUEST="RunNow/x")
    assert (ran.code, ran.summary["error"]) == (1, "SystemExit: 1")


def test_an_unknown_job_exits_2_with_the_known_names(message_file: Path) -> None:
    ran = Ran(registry(), "send-invoice", message_file)
    assert ran.code == 2
    known = "async-one, broken, broken-async, exits, send-invoices"
    said = f"no job named 'send-invoice'; known jobs: {known}"
    assert f"error: {said}" in ran.err.getvalue()
    assert (ran.summary["result"], ran.summary["message"]) == ("unknown-job", said)


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"SUNDIAL_SLOT": "2026-12-01 10:05"}, "SUNDIAL_SLOT='2026-12-01 10:05' is no RFC 3339"),
        ({"SUNDIAL_REQUEST": "Now/1"}, "RunNow/<id> or Backfill/<id>"),
        ({"SUNDIAL_ATTEMPT": "0"}, "a whole number from 1"),
    ],
)
def test_an_env_sundial_never_writes_exits_2(
    message_file: Path, env: dict[str, str], problem: str
) -> None:
    ran = Ran(registry(), "send-invoices", message_file, **env)
    assert ran.code == 2
    assert problem in ran.err.getvalue()
    assert ran.summary["result"] == "usage"


def test_main_reads_mode_and_cron_job() -> None:
    out, err = io.StringIO(), io.StringIO()
    env = {"MODE": "cron", "CRON_JOB": "async-one"}
    assert main(registry(), [], env, out=out, err=err) == 0
    assert main(registry(), [], {"MODE": "cron"}, out=out, err=err) == 2
    assert "MODE=cron needs CRON_JOB=<job name>; known jobs: async-one" in err.getvalue()
    assert main(registry(), [], {"MODE": "serve"}, out=out, err=err) == 2
    assert "MODE='serve'" in err.getvalue()


def test_main_takes_the_seed_conventions_dict_and_a_command_line() -> None:
    out, err = io.StringIO(), io.StringIO()
    tasks = {"hello": {"task": lambda: "hi", "description": "says hi", "schedule": "@daily"}}
    assert main(tasks, ["run", "hello"], {}, out=out, err=err) == 0
    assert "job hello succeeded" in out.getvalue()
    assert main(tasks, ["list"], {}, out=out, err=err) == 0
    assert "hello\t@daily\tsays hi" in out.getvalue()
    assert main(tasks, ["run", "nope"], {}, out=out, err=err) == 2
    assert main(tasks, ["frobnicate"], {}, out=out, err=err) == 2


# ---- the run's context -----------------------------------------------------------------


def test_a_cronjobs_job_name_gives_the_slot() -> None:
    env = {"SUNDIAL_JOB_NAME": f"nightly-report-{MINUTES}", "SUNDIAL_CRONJOB": "nightly-report"}
    ctx = context_from_env("report", env)
    assert (ctx.slot, ctx.requested, ctx.job_name) == (SLOT, None, f"nightly-report-{MINUTES}")
    assert ctx.dedupe_key == "report@2026-12-01T10:05:00Z"


@pytest.mark.parametrize(
    "job_name", ["nightly-report-now", "nightly-report-r0a1b2c3d4", f"other-{MINUTES}"]
)
def test_a_job_made_by_hand_has_no_slot(job_name: str) -> None:
    env = {"SUNDIAL_JOB_NAME": job_name, "SUNDIAL_CRONJOB": "nightly-report"}
    ctx = context_from_env("report", env)
    assert (ctx.slot, ctx.dedupe_key) == (None, None)


def test_a_requested_run_has_its_slot_and_request_as_values() -> None:
    env = {
        "SUNDIAL_SLOT": "2026-12-01T11:05:00+01:00",
        "SUNDIAL_REQUEST": "Backfill/june",
        "SUNDIAL_JOB_NAME": "nightly-report-r0a1b2c3d4",
        "SUNDIAL_CRONJOB": "nightly-report",
        "SUNDIAL_ATTEMPT": "2",
    }
    ctx = context_from_env("report", env)
    assert (ctx.slot, ctx.request_kind, ctx.request_id, ctx.attempt) == (
        SLOT,
        "Backfill",
        "june",
        2,
    )


def test_context_outside_a_run_is_an_error() -> None:
    with pytest.raises(LookupError):
        context()
    with pytest.raises(UsageError):
        context_from_env("x", {"SUNDIAL_SLOT": "yesterday"})


# ---- the termination message -------------------------------------------------------------


def test_a_long_summary_is_cut_to_kubernetes_4096_bytes_and_stays_json() -> None:
    document = {
        "sundial": 1,
        "result": "failed",
        "message": "é" * 5000,
        "error": "x" * 3000,
        "counts": {f"c{i}": i for i in range(400)},
    }
    text = termination_message(document)
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT
    capped = json.loads(text)
    assert capped["truncated"] is True
    assert capped["message"] == "" or capped["message"].endswith("…")
    assert capped["result"] == "failed"


def test_counts_go_last_and_only_as_far_as_needed() -> None:
    document = {"sundial": 1, "message": "ok", "counts": {f"count{i:04}": i for i in range(400)}}
    capped = json.loads(termination_message(document))
    assert capped["message"] == "ok"
    assert 0 < len(capped["counts"]) < 400
    assert next(iter(capped["counts"])) == "count0000"
    assert json.loads(termination_message({"message": "short"})) == {"message": "short"}
    # A long message is cut, as far as needed and down to MESSAGE_FLOOR, before a count goes.
    long = {"message": "m" * 5000, "counts": {"sent": 1, "failed": 2}}
    capped = json.loads(termination_message(long))
    assert capped["message"].endswith("…")
    assert capped["counts"] == {"sent": 1, "failed": 2}
    many = {"message": "m" * 5000, "counts": {f"count{i:04}": i for i in range(400)}}
    capped = json.loads(termination_message(many))
    assert len(capped["message"]) == MESSAGE_FLOOR + 1
    assert 0 < len(capped["counts"]) < 400


def test_a_summary_that_cannot_be_written_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    env = {"SUNDIAL_TERMINATION_MESSAGE_PATH": str(tmp_path / "missing" / "log")}
    assert run(registry(), "async-one", env, out=out, err=err) == 0
    assert "warning: could not write the summary" in err.getvalue()


def test_the_event_log_is_one_json_object_a_line_when_asked(message_file: Path) -> None:
    ran = Ran(
        registry(),
        "broken",
        message_file,
        SUNDIAL_LOG_FORMAT="json",
        SUNDIAL_SLOT="2026-12-01T10:05:00Z",
        SUNDIAL_ATTEMPT="1",
    )
    start, end = (json.loads(line) for line in ran.out.getvalue().splitlines())
    assert (start["event"], start["job"], start["slot"], start["attempt"]) == (
        "start",
        "broken",
        "2026-12-01T10:05:00Z",
        1,
    )
    assert (end["event"], end["result"], end["exitCode"]) == ("end", "failed", 1)
    assert end["durationSeconds"] >= 0


# ---- SIGTERM, in a real process -------------------------------------------------------------

SERVICE = """
import asyncio, sys, time
from sundial_cron import Registry, RunContext, main

jobs = Registry()

@jobs.job
def sync_sleep(run: RunContext) -> None:
    run.summary.message = "half done"
    try:
        print("started", flush=True)
        time.sleep(30)
    finally:
        print("cleaned up", flush=True)

@jobs.job
async def async_sleep() -> None:
    try:
        print("started", flush=True)
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        print("cancelled", flush=True)
        raise

@jobs.job
def swallows() -> str:
    try:
        print("started", flush=True)
        time.sleep(30)
    except BaseException:
        return "finished anyway"
    return "slept"

if __name__ == "__main__":
    sys.exit(main(jobs))
"""


def service(tmp_path: Path) -> Path:
    (tmp_path / "service_jobs.py").write_text(SERVICE)
    return tmp_path


def start(tmp_path: Path, *argv: str, **env: str) -> subprocess.Popen[str]:
    environ = {
        **os.environ,
        "PYTHONPATH": str(LIBRARY),
        "SUNDIAL_TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, *argv],
        cwd=service(tmp_path),
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("job", "said"),
    [("sync-sleep", "cleaned up"), ("async-sleep", "cancelled"), ("swallows", "")],
)
def test_sigterm_stops_the_job_and_exits_143(tmp_path: Path, job: str, said: str) -> None:
    process = start(tmp_path, "service_jobs.py", MODE="cron", CRON_JOB=job)
    assert process.stdout is not None
    assert process.stdout.readline() == f"running job {job}\n"
    assert process.stdout.readline() == "started\n"
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=20)
    assert process.returncode == EXIT_TERMINATED == 143, err
    assert time.monotonic() - started < 10, "stopped at once, not after the sleep"
    assert said in out
    summary = json.loads((tmp_path / "termination-log").read_text())
    assert summary["result"] == "terminated"
    assert "terminated" in summary["message"]
    if job == "sync-sleep":
        assert summary["message"].endswith("; half done")


def test_the_module_entrypoint_runs_lists_and_refuses(tmp_path: Path) -> None:
    listed = start(tmp_path, "-m", "sundial_cron", "--registry", "service_jobs", "list")
    out, _ = listed.communicate(timeout=20)
    assert (listed.returncode, out.split()[:2]) == (0, ["sync-sleep", "-"])
    unknown = start(tmp_path, "-m", "sundial_cron", "--registry", "service_jobs:jobs", "run", "x")
    _, err = unknown.communicate(timeout=20)
    assert unknown.returncode == 2
    assert "no job named 'x'; known jobs: async-sleep, swallows, sync-sleep" in err
    nowhere = start(tmp_path, "-m", "sundial_cron", "run", "x")
    _, err = nowhere.communicate(timeout=20)
    assert (nowhere.returncode, "which registry?" in err) == (2, True)
    missing = start(tmp_path, "-m", "sundial_cron", "--registry", "no_such_module", "list")
    _, err = missing.communicate(timeout=20)
    assert (missing.returncode, "ModuleNotFoundError" in err) == (2, True)


def python_3_10() -> str | None:
    """A Python 3.10 that runs: on PATH, or one pyenv installed (its shim may name none)."""
    found = [
        shutil.which("python3.10"),
        *map(str, Path.home().glob(".pyenv/versions/3.10*/bin/python3.10")),
    ]
    for candidate in filter(None, found):
        works = subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False)
        if works.returncode == 0:
            return candidate
    return None


def test_the_library_runs_on_python_3_10() -> None:
    """Its floor (pyproject's requires-python): no datetime.UTC, no tomllib, no 3.11 syntax."""
    python = python_3_10()
    if python is None:
        pytest.skip("no Python 3.10 here")
    code = textwrap.dedent("""
        import io, sundial_cron, sundial_cron.cli, sundial_cron.yamlish
        jobs = sundial_cron.Registry()
        jobs.add("x", lambda: sundial_cron.Summary("ok", {"n": 1}))
        raise SystemExit(sundial_cron.run(jobs, "x", {"SUNDIAL_SLOT": "2026-12-01T10:05:00Z"},
                         out=io.StringIO(), err=io.StringIO()))
    """)
    done = subprocess.run([python, "-c", code], env={**os.environ, "PYTHONPATH": str(LIBRARY)},
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
