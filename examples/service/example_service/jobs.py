"""The registry of named one-shot jobs this image can run.

A job is a function taking the process environment; it succeeds by returning and fails by
raising. Register one with ``@job("name")``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

Job = Callable[[Mapping[str, str]], None]

JOBS: dict[str, Job] = {}


def job(name: str) -> Callable[[Job], Job]:
    def register(function: Job) -> Job:
        if name in JOBS:
            raise ValueError(f"job {name!r} is registered twice")
        JOBS[name] = function
        return function

    return register


@job("hello")
def hello(env: Mapping[str, str]) -> None:
    print("hello from the example service's job 'hello'", flush=True)


@job("fail")
def fail(env: Mapping[str, str]) -> None:
    raise RuntimeError("job 'fail' fails on purpose")


@job("sleep")
def sleep(env: Mapping[str, str]) -> None:
    seconds = float(env.get("SLEEP_SECONDS", "10"))
    print(f"job 'sleep': sleeping {seconds:g}s", flush=True)
    time.sleep(seconds)
    print("job 'sleep': done", flush=True)
