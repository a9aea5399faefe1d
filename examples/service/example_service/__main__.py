"""The image's entrypoint: what runs depends on MODE.

- ``MODE=cron``: run the job named by CRON_JOB once, as Sundial's ``job.cronJob: <name>``
  shorthand asks (it sets MODE=cron and CRON_JOB=<name>). Exit 0 when the job returns, 1 when it
  raises, 2 when the name is not a job of this image.
- ``MODE=list``: print the job names, one a line.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Mapping

from example_service.jobs import JOBS

EXIT_JOB_FAILED = 1
EXIT_USAGE = 2


def run_cron_job(env: Mapping[str, str]) -> int:
    name = env.get("CRON_JOB", "")
    job = JOBS.get(name)
    if job is None:
        known = ", ".join(sorted(JOBS))
        print(f"error: unknown job {name!r} (CRON_JOB); known jobs: {known}", file=sys.stderr)
        return EXIT_USAGE
    try:
        job(env)
    except Exception:
        traceback.print_exc()
        print(f"job {name!r} failed", file=sys.stderr)
        return EXIT_JOB_FAILED
    return 0


def list_jobs(env: Mapping[str, str]) -> int:
    for name in sorted(JOBS):
        print(name)
    return 0


MODES = {"cron": run_cron_job, "list": list_jobs}


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    mode = env.get("MODE", "")
    handler = MODES.get(mode)
    if handler is None:
        known = ", ".join(sorted(MODES))
        print(f"error: unknown MODE {mode!r}; known modes: {known}", file=sys.stderr)
        return EXIT_USAGE
    return handler(env)


if __name__ == "__main__":
    sys.exit(main())
