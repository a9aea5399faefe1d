"""One run of one job: its context set, SIGTERM turned into a clean stop, its outcome as an
exit code, a line on every path, and its summary in the container's termination message."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from types import FrameType
from typing import Any, TextIO

from sundial_cron.context import (
    RunContext,
    Summary,
    UsageError,
    _current,
    context_from_env,
    format_time,
)
from sundial_cron.registry import Job, Registry

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143, as a shell reports a SIGTERM'd process

# Where the kubelet reads a container's termination message (its terminationMessagePath
# default); SUNDIAL_TERMINATION_MESSAGE_PATH for a container that sets another path.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
ENV_TERMINATION_MESSAGE_PATH = "SUNDIAL_TERMINATION_MESSAGE_PATH"
# Kubernetes keeps at most 4096 bytes of one container's termination message.
TERMINATION_MESSAGE_LIMIT = 4096
# A long message and error are cut to this many characters before counts are dropped.
MESSAGE_FLOOR = 256
# SUNDIAL_LOG_FORMAT=json: one JSON line per event; otherwise lines for people.
ENV_LOG_FORMAT = "SUNDIAL_LOG_FORMAT"
SUMMARY_VERSION = 1


class Terminated(BaseException):
    """Raised in a sync job when SIGTERM arrives (a deadline, Replace, a drained node).
    A BaseException, as KeyboardInterrupt, so `except Exception` does not swallow it; a
    job's `finally` blocks still run."""


@dataclass(frozen=True)
class Outcome:
    result: str  # succeeded, failed, terminated, unknown-job, usage
    exit_code: int
    message: str
    error: str | None = None


def run(
    registry: Registry,
    name: str,
    environ: Mapping[str, str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Runs job `name` of `registry` once; returns the exit code (0 succeeded, 1 failed,
    2 unknown job or malformed env, 143 stopped by SIGTERM)."""
    env = os.environ if environ is None else environ
    out = out or sys.stdout
    err = err or sys.stderr
    log = EventLog(env, out)
    started = time.monotonic()
    job = registry.get(name)
    if job is None:
        message = f"no job named {name!r}; known jobs: {registry.known()}"
        print(f"error: {message}", file=err, flush=True)
        return finish(
            env,
            log,
            RunContext(job=name),
            Outcome("unknown-job", EXIT_USAGE, message),
            started,
            err,
        )
    try:
        ctx = context_from_env(name, env)
    except UsageError as error:
        print(f"error: job {name}: {error}", file=err, flush=True)
        return finish(
            env, log, RunContext(job=name), Outcome("usage", EXIT_USAGE, str(error)), started, err
        )
    log.start(ctx)
    stop = _Stop()
    token = _current.set(ctx)
    # Installed until the summary is written: a SIGTERM after the job ended changes nothing.
    with stop.installed():
        try:
            outcome = _outcome(job, ctx, err, stop)
        finally:
            _current.reset(token)
        return finish(env, log, ctx, outcome, started, err)


def _outcome(job: Job, ctx: RunContext, err: TextIO, stop: _Stop) -> Outcome:
    try:
        try:
            returned = _call(job, ctx, stop)
        finally:
            stop.done = True
        if stop.requested:  # it caught the stop and returned: still a stopped run
            raise Terminated
    except (Terminated, asyncio.CancelledError) as error:
        if not stop.requested and isinstance(error, asyncio.CancelledError):
            return _failed(ctx, error, err)
        return Outcome(
            "terminated",
            EXIT_TERMINATED,
            _said("terminated (SIGTERM): the Pod is being stopped", ctx),
        )
    except SystemExit as error:
        if error.code in (None, 0):
            return Outcome("succeeded", EXIT_SUCCEEDED, ctx.summary.message or "succeeded")
        return _failed(ctx, error, err)
    except BaseException as error:  # every failure is reported, then exits 1
        return _failed(ctx, error, err)
    _take(returned, ctx.summary)
    return Outcome("succeeded", EXIT_SUCCEEDED, ctx.summary.message or "succeeded")


def _failed(ctx: RunContext, error: BaseException, err: TextIO) -> Outcome:
    traceback.print_exception(type(error), error, error.__traceback__, file=err)
    described = f"{type(error).__name__}: {error}".rstrip(": ")
    print(f"job {ctx.job} failed: {described}", file=err, flush=True)
    return Outcome("failed", EXIT_FAILED, _said(f"failed: {described}", ctx), described)


def _said(what: str, ctx: RunContext) -> str:
    """`what` happened, and what the job had said so far."""
    return f"{what}; {ctx.summary.message}" if ctx.summary.message else what


def _take(returned: Any, summary: Summary) -> None:
    """A job's return value into its summary: a Summary, a message, or None (as filled)."""
    if isinstance(returned, Summary):
        summary.message = returned.message or summary.message
        summary.counts.update(returned.counts)
    elif isinstance(returned, str):
        summary.message = returned


def _call(job: Job, ctx: RunContext, stop: _Stop) -> Any:
    arguments = (ctx,) if job.takes_context else ()
    if inspect.iscoroutinefunction(job.function):
        return asyncio.run(_cancellable(lambda: job.function(*arguments), stop))
    returned = job.function(*arguments)
    if inspect.isawaitable(returned):  # a partial of a coroutine function, say
        awaitable = returned
        return asyncio.run(_cancellable(lambda: awaitable, stop))
    return returned


async def _cancellable(start: Callable[[], Awaitable[Any]], stop: _Stop) -> Any:
    """Awaits the job; SIGTERM cancels it (CancelledError inside the job)."""
    task = asyncio.current_task()
    assert task is not None
    with stop.cancelling(task):
        return await start()


class _Stop:
    """SIGTERM during the run: raises Terminated in a sync job, cancels an async one; after
    the job ended (`done`), only noted. Only the main thread receives signals: elsewhere
    nothing is installed."""

    def __init__(self) -> None:
        self.requested = False
        self.done = False
        self._task: asyncio.Task[Any] | None = None

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        if self.requested or self.done:
            return  # once: a second SIGTERM does not interrupt the cleanup
        self.requested = True
        if self._task is not None:
            self._task.get_loop().call_soon_threadsafe(self._task.cancel)
            return
        raise Terminated

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGTERM, self._on_signal)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    @contextmanager
    def cancelling(self, task: asyncio.Task[Any]) -> Iterator[None]:
        self._task = task
        try:
            yield
        finally:
            self._task = None


# ---- what a run leaves behind ------------------------------------------------------------


def finish(
    env: Mapping[str, str],
    log: EventLog,
    ctx: RunContext,
    outcome: Outcome,
    started: float,
    err: TextIO,
) -> int:
    duration = round(time.monotonic() - started, 3)
    document = summary_document(ctx, outcome, duration)
    log.end(ctx, outcome, duration)
    write_termination_message(env, termination_message(document), err)
    return outcome.exit_code


def summary_document(ctx: RunContext, outcome: Outcome, duration: float) -> dict[str, Any]:
    """The run's summary as the termination message holds it (docs/cron-library.md)."""
    document: dict[str, Any] = {
        "sundial": SUMMARY_VERSION,
        "job": ctx.job,
        "result": outcome.result,
        "exitCode": outcome.exit_code,
        "message": outcome.message,
        "counts": dict(ctx.summary.counts),
        "slot": format_time(ctx.slot) if ctx.slot is not None else None,
        "requested": ctx.requested,
        "attempt": ctx.attempt,
        "pod": ctx.pod,
        "durationSeconds": duration,
    }
    if outcome.error is not None:
        document["error"] = outcome.error
    return document


def _dumps(document: Mapping[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"), default=str)


def _size(document: Mapping[str, Any]) -> int:
    return len(_dumps(document).encode())


def termination_message(document: Mapping[str, Any], limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
    """`document` as JSON of at most `limit` bytes (UTF-8), still valid JSON: the message
    and the error are cut to MESSAGE_FLOOR characters first (ending in '…'), then counts
    dropped from the last, then the two cut further, then all but the result dropped;
    `"truncated": true` says something was cut."""
    capped = dict(document)
    if _size(capped) <= limit:
        return _dumps(capped)
    capped["truncated"] = True

    def cut(floor: int) -> None:
        for key in ("error", "message"):
            while isinstance(capped.get(key), str) and _size(capped) > limit:
                text = capped[key].removesuffix("…")
                keep = max(floor, len(text) - (_size(capped) - limit) - 1)
                if keep >= len(text):
                    break
                capped[key] = text[:keep] + "…" if keep else ""

    cut(MESSAGE_FLOOR)
    counts = dict(capped.get("counts") or {})
    while counts and _size(capped) > limit:
        counts.popitem()
        capped["counts"] = counts
    cut(0)
    if _size(capped) > limit:
        capped = {key: capped.get(key) for key in ("sundial", "result", "exitCode", "truncated")}
    return _dumps(capped)


def write_termination_message(env: Mapping[str, str], text: str, err: TextIO) -> None:
    """Into the termination message file: the path SUNDIAL_TERMINATION_MESSAGE_PATH names,
    else /dev/termination-log when it exists (in a Pod: the kubelet mounts it); outside a
    Pod there is nowhere to write, and that is no error."""
    path = env.get(ENV_TERMINATION_MESSAGE_PATH) or TERMINATION_MESSAGE_PATH
    if ENV_TERMINATION_MESSAGE_PATH not in env and not os.path.exists(path):
        return
    try:
        with open(path, "w", encoding="utf-8") as sink:
            sink.write(text)
    except OSError as error:
        print(f"warning: could not write the summary to {path}: {error}", file=err, flush=True)


class EventLog:
    """A line when the run starts and one when it ends: for people by default, one JSON
    object a line with SUNDIAL_LOG_FORMAT=json (job, slot, attempt, result, duration)."""

    def __init__(self, env: Mapping[str, str], out: TextIO) -> None:
        self.json = env.get(ENV_LOG_FORMAT, "").strip().lower() == "json"
        self.out = out

    def start(self, ctx: RunContext) -> None:
        if self.json:
            self._event("start", ctx)
            return
        where = f" for slot {format_time(ctx.slot)}" if ctx.slot is not None else ""
        asked = f" ({ctx.requested})" if ctx.requested else ""
        print(f"running job {ctx.job}{where}{asked}", file=self.out, flush=True)

    def end(self, ctx: RunContext, outcome: Outcome, duration: float) -> None:
        if self.json:
            self._event(
                "end",
                ctx,
                result=outcome.result,
                exitCode=outcome.exit_code,
                durationSeconds=duration,
                message=outcome.message,
            )
            return
        print(
            f"job {ctx.job} {outcome.result} in {duration:.3f}s: {outcome.message}",
            file=self.out,
            flush=True,
        )

    def _event(self, event: str, ctx: RunContext, **fields: Any) -> None:
        line = {
            "time": format_time(datetime.now(timezone.utc)),
            "event": event,
            "job": ctx.job,
            "slot": format_time(ctx.slot) if ctx.slot is not None else None,
            "requested": ctx.requested,
            "attempt": ctx.attempt,
            "pod": ctx.pod,
            **fields,
        }
        print(_dumps(line), file=self.out, flush=True)
