"""One image, several ways to run it, chosen by MODE.

MODE=cron CRON_JOB=<name>   run that one job once (sundial-cron): exit 0 on success, 1 on
                            failure, 2 for a name the service does not know, 143 on SIGTERM
MODE=serve (default)        the long-running service (here: a heartbeat)
run NAME | list | check PATH...   the same library's command line (check: CI)
"""

from __future__ import annotations

import os
import sys
import time

from sundial_cron import main as cron_main

from service.jobs import jobs


def main() -> int:
    mode = os.environ.get("MODE", "serve")
    if mode == "cron" or sys.argv[1:]:
        return cron_main(jobs)
    if mode == "serve":
        while True:
            print("serving", flush=True)
            time.sleep(60)
    print(f"error: unknown MODE {mode!r}: use cron or serve", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
