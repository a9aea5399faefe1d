"""The service's named one-shot jobs: the registry `MODE=cron CRON_JOB=<name>` runs from
(sundial-cron, lib/sundial-cron; docs/cron-library.md)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sundial_cron import Registry, RunContext, Summary

jobs = Registry()


@jobs.job(schedule="*/5 * * * *")
def hello(run: RunContext) -> Summary:
    """Says hello, and for which slot."""
    print("hello job ran", flush=True)
    slot = run.slot.isoformat().replace("+00:00", "Z") if run.slot else "none"
    return Summary(f"hello for slot {slot}", {"greetings": 1})


@jobs.job
def fail() -> None:
    """Always fails."""
    raise RuntimeError("the fail job failed, as it always does")


@jobs.job
def sleep() -> None:
    """Sleeps SLEEP_SECONDS (30); SIGTERM stops it (exit 143)."""
    seconds = float(os.environ.get("SLEEP_SECONDS", "30"))
    print(f"sleep job: sleeping {seconds:g}s", flush=True)
    time.sleep(seconds)
    print("sleep job done", flush=True)


@jobs.job(schedule="0 * * * *")
def tally(run: RunContext) -> Summary:
    """Upserts one row per slot into TALLY_STORE (a JSON file): run twice, the same outcome.

    The row's key is the slot (run.dedupe_key), not the time it runs: a retry, a rerun or
    a backfill of the same slot rewrites its row instead of adding one."""
    if run.dedupe_key is None:
        raise RuntimeError("no slot: run it from Sundial, or set SUNDIAL_SLOT")
    store = Path(os.environ.get("TALLY_STORE", "/tmp/tally.json"))
    rows = json.loads(store.read_text()) if store.exists() else {}
    verb = "updated" if run.dedupe_key in rows else "inserted"
    rows[run.dedupe_key] = {"slot": str(run.slot), "requested": run.requested}
    store.write_text(json.dumps(rows, indent=1, sort_keys=True))
    return Summary(f"{verb} the row of {run.dedupe_key}", {"rows": len(rows)})
