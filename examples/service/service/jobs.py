"""The service's named one-shot jobs: the registry the entrypoint dispatches into."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

JOBS: dict[str, Callable[[], None]] = {}


def job(function: Callable[[], None]) -> Callable[[], None]:
    """Registers a one-shot job under its function name, dashes for underscores."""
    JOBS[function.__name__.replace("_", "-")] = function
    return function


@job
def hello() -> None:
    print("hello job ran", flush=True)


@job
def fail() -> None:
    raise RuntimeError("the fail job failed, as it always does")


@job
def sleep() -> None:
    seconds = float(os.environ.get("SLEEP_SECONDS", "30"))
    print(f"sleep job: sleeping {seconds:g}s", flush=True)
    time.sleep(seconds)
    print("sleep job done", flush=True)
