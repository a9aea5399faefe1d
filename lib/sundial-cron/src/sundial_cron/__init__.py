"""sundial-cron: the service side of Sundial's `job.cronJob` (MODE=cron CRON_JOB=<name>).

    from sundial_cron import Registry, RunContext, Summary, main

    jobs = Registry()

    @jobs.job(schedule="*/5 * * * *")
    def send_invoices(run: RunContext) -> Summary:
        sent = send_due_invoices(until=run.slot)
        return Summary(f"sent {sent} invoices", {"sent": sent})

    if __name__ == "__main__":
        sys.exit(main(jobs))

docs/cron-library.md in Sundial's repository has the contract with the operator.
"""

from sundial_cron.check import check
from sundial_cron.cli import main
from sundial_cron.context import RunContext, Summary, UsageError, context
from sundial_cron.registry import Job, Registry
from sundial_cron.runner import (
    EXIT_FAILED,
    EXIT_SUCCEEDED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    Terminated,
    run,
)

__all__ = [
    "EXIT_FAILED",
    "EXIT_SUCCEEDED",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "Job",
    "Registry",
    "RunContext",
    "Summary",
    "Terminated",
    "UsageError",
    "check",
    "context",
    "main",
    "run",
]
