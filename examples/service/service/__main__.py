"""One image, several ways to run it, chosen by MODE.

MODE=cron CRON_JOB=<name>   run that one job once: exit 0 on success, 1 on failure,
                            2 for a name the service does not know
MODE=serve (default)        the long-running service (here: a heartbeat)
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from service.jobs import JOBS


def run_cron_job(name: str) -> int:
    job = JOBS.get(name)
    if job is None:
        known = ", ".join(sorted(JOBS)) or "none"
        print(f"error: no job named {name!r} (CRON_JOB); known jobs: {known}", file=sys.stderr)
        return 2
    print(f"running job {name}", flush=True)
    try:
        job()
    except Exception:
        traceback.print_exc()
        print(f"job {name} failed", file=sys.stderr)
        return 1
    print(f"job {name} succeeded", flush=True)
    return 0


def main() -> int:
    mode = os.environ.get("MODE", "serve")
    if mode == "cron":
        name = os.environ.get("CRON_JOB", "")
        if not name:
            print("error: MODE=cron needs CRON_JOB=<job name>", file=sys.stderr)
            return 2
        return run_cron_job(name)
    if mode == "serve":
        while True:
            print("serving", flush=True)
            time.sleep(60)
    print(f"error: unknown MODE {mode!r}: use cron or serve", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
