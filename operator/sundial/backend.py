"""What a reconcile pass and the two backends share: the cache they read and what a backend
returns (their errors are errors.py's)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sundial.api.models import MissedRun, ScheduledJobStatus
from sundial.planning.missed import JobRecord
from sundial.planning.runs import RunHistory
from sundial.planning.summaries import PodsEnded

Key = tuple[str, str]

DAY_SEMANTICS_NOTE = (
    "both day-of-month and day-of-week are restricted: backend kubernetes runs when EITHER "
    "matches, backend temporal only when BOTH match"
)


class Cache(Protocol):
    """Read access to the watched objects (watchcache.WatchCache in production), and what
    a GET of a ScheduledJob found, ordered like any other update."""

    def scheduledjob(self, key: Key) -> dict[str, Any] | None: ...

    def put_scheduledjob(self, obj: dict[str, Any]) -> Key: ...

    def remove_scheduledjob(self, key: Key, resource_version: str | None = None) -> None: ...

    def cronjob(self, key: Key) -> dict[str, Any] | None: ...

    def scheduledjob_version(self, key: Key) -> int | None: ...

    def cronjob_version(self, key: Key) -> int | None: ...

    def jobs(self, key: Key) -> list[JobRecord]: ...

    def job_names(self, key: Key) -> list[str]: ...

    def seen_slots(self, key: Key) -> frozenset[datetime]: ...

    def departed_jobs(self, key: Key) -> list[JobRecord]: ...

    def unseen_runs(self, key: Key) -> int: ...

    def forget_departed(self, key: Key, names: set[str], unseen: int = 0) -> None: ...

    def forget_slots_before(self, key: Key, watermark: datetime) -> None: ...

    def pods_ended(self, namespace: str, job_name: str) -> PodsEnded | None: ...

    @property
    def watching_since(self) -> datetime: ...


@dataclass(frozen=True)
class Outcome:
    """A backend in step: the status it reports, when to look again, and runs newly judged
    missed or skipped."""

    status: ScheduledJobStatus
    requeue_after: float | None
    new_runs: list[MissedRun]
    # The runs' history this pass built (None: no backend in step to say).
    history: RunHistory | None = None
