"""The run's context: which slot it runs for, whether somebody asked for it, which attempt;
read from the env Sundial gives every run's Pod (docs/cron-library.md has the contract)."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

# Set by Sundial on the Jobs it makes itself (run now, backfill): the slot, RFC 3339 UTC,
# and the request, RunNow/<id> or Backfill/<id>.
ENV_SLOT = "SUNDIAL_SLOT"
ENV_REQUEST = "SUNDIAL_REQUEST"
# Set on every Job's Pods: the Job's name (the downward API, from the Job controller's
# label) and the CronJob's. The CronJob controller names its Jobs
# `<cronjob>-<scheduled time in minutes since the epoch>`: the slot, without SUNDIAL_SLOT.
ENV_JOB_NAME = "SUNDIAL_JOB_NAME"
ENV_CRONJOB = "SUNDIAL_CRONJOB"
# Not set by Sundial (Kubernetes tells a non-indexed Job's Pod no attempt number): for
# whoever starts the run and knows it.
ENV_ATTEMPT = "SUNDIAL_ATTEMPT"
# The Pod's name, which the kubelet gives every container: one per attempt.
ENV_POD = "HOSTNAME"

REQUEST_KINDS = ("RunNow", "Backfill")


class UsageError(ValueError):
    """A run that cannot start as asked (its env is malformed): exit 2, the message says why."""


@dataclass
class Summary:
    """What a run did, in a line and a few counts: it reaches status.recentRuns[].message.
    A job returns one, or fills `context().summary` as it goes (kept if it then fails)."""

    message: str = ""
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, increment: int = 1) -> int:
        """Adds `increment` to the count `name`; returns the new count."""
        self.counts[name] = self.counts.get(name, 0) + increment
        return self.counts[name]


@dataclass(frozen=True)
class RunContext:
    """One run of one job. `slot` is the nominal time it runs for (None: run by hand, not by
    Sundial); `requested` is RunNow/<id> or Backfill/<id> for a run somebody asked for."""

    job: str
    slot: datetime | None = None
    requested: str | None = None
    attempt: int | None = None
    job_name: str | None = None  # the Kubernetes Job's
    pod: str | None = None  # one per attempt
    summary: Summary = field(default_factory=Summary)

    @property
    def request_kind(self) -> str | None:
        return self.requested.split("/", 1)[0] if self.requested else None

    @property
    def request_id(self) -> str | None:
        return self.requested.split("/", 1)[1] if self.requested else None

    @property
    def dedupe_key(self) -> str | None:
        """`<job>@<slot>`: the same for every attempt and every rerun of one slot (a
        backfill of it too), so an upsert keyed by it makes running twice harmless. None
        without a slot."""
        return f"{self.job}@{format_time(self.slot)}" if self.slot is not None else None


_current: contextvars.ContextVar[RunContext] = contextvars.ContextVar("sundial_cron_run")


def context() -> RunContext:
    """The running job's context, for a job that takes no argument. LookupError outside a run."""
    return _current.get()


def format_time(moment: datetime) -> str:
    """RFC 3339, UTC, with Z (as Kubernetes writes times)."""
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time with a zone (Z or an offset), as UTC; ValueError otherwise."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return value.astimezone(timezone.utc)


def slot_from_job_name(cronjob: str, job_name: str) -> datetime | None:
    """The slot the CronJob controller made Job `job_name` for: `<cronjob>-<minutes since
    the epoch>`; None for any other name (`kubectl create job --from`, a request's)."""
    prefix = f"{cronjob}-"
    minutes = job_name[len(prefix) :] if cronjob and job_name.startswith(prefix) else ""
    if not minutes.isdigit() or len(minutes) > 12:
        return None
    return datetime.fromtimestamp(int(minutes) * 60, timezone.utc)


def context_from_env(job: str, environ: Mapping[str, str]) -> RunContext:
    """The context of a run of `job` from its env; UsageError for a value Sundial would
    never write (a hand-made SUNDIAL_SLOT without a zone, say)."""
    slot: datetime | None = None
    raw_slot = environ.get(ENV_SLOT, "").strip()
    job_name = environ.get(ENV_JOB_NAME, "").strip() or None
    if raw_slot:
        try:
            slot = parse_time(raw_slot)
        except ValueError:
            raise UsageError(
                f"{ENV_SLOT}={raw_slot!r} is no RFC 3339 time with a zone "
                "(such as 2026-12-01T10:00:00Z)"
            ) from None
    elif job_name:
        slot = slot_from_job_name(environ.get(ENV_CRONJOB, "").strip(), job_name)
    requested = environ.get(ENV_REQUEST, "").strip() or None
    if requested is not None and (
        requested.split("/", 1)[0] not in REQUEST_KINDS or "/" not in requested
    ):
        raise UsageError(f"{ENV_REQUEST}={requested!r}: RunNow/<id> or Backfill/<id>")
    attempt: int | None = None
    raw_attempt = environ.get(ENV_ATTEMPT, "").strip()
    if raw_attempt:
        if not raw_attempt.isdigit() or int(raw_attempt) < 1:
            raise UsageError(f"{ENV_ATTEMPT}={raw_attempt!r}: a whole number from 1")
        attempt = int(raw_attempt)
    return RunContext(
        job=job,
        slot=slot,
        requested=requested,
        attempt=attempt,
        job_name=job_name,
        pod=environ.get(ENV_POD, "").strip() or None,
    )
