"""The seam between a reconcile pass and the ways a job can run: the `Backend` protocol
every backend implements with the same signatures, the `Pass` it is called with, the
`Outcome` it returns (the status is built from its own small view of its world), and the
watch cache both read. Errors are errors.py's.

A pass (reconcile.py) calls, for the backend `spec.backend` names:

    prepare -> [accept -> the others' retire] -> reconcile -> handle_requests

with the bracket taken while another backend still holds something for the object
(planning/switching.py says which phase the object is in), a pass ending after prepare
when that found a place to record before anything is made there (`unrecorded`),
`finalize` on deletion, and `judge_running` for the backend still running when the spec
cannot be acted on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Protocol, TypeVar

from sundial.api.models import (
    BackendRef,
    MissedRun,
    RequestStatus,
    ScheduledJob,
    ScheduledJobStatus,
)
from sundial.planning.missed import JobRecord
from sundial.planning.runs import RunHistory
from sundial.planning.schedule import Timetable, timetable
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

    def put_scheduledjob(self, obj: dict[str, Any], *, confirmed: bool = False) -> Key: ...

    def scheduledjob_confirmed(self, key: Key) -> bool: ...

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


@dataclass(frozen=True)
class Pass:
    """One reconcile pass's object: its key, the parsed ScheduledJob and the pass's clock
    reading (one `now` for every step)."""

    key: Key
    sj: ScheduledJob
    now: datetime

    @cached_property
    def table(self) -> Timetable:
        """The spec's timetable (ScheduleError if its schedule or time zone is invalid)."""
        return timetable(self.sj.spec)


# Makes sure the object still exists on the server (a GET) before a backend first makes
# something for it; raises to stop the pass if it is gone (reconcile._confirm_exists).
ConfirmExists = Callable[[], Awaitable[None]]

# What a backend's `prepare` found, handed back to its other steps (its own type).
Prepared = TypeVar("Prepared")


class Backend(Protocol[Prepared]):
    """One way a ScheduledJob's job can run. Each step raises SpecProblem (only a spec
    change helps: reported, not retried) or Retry (transient: retried with backoff)."""

    @property
    def name(self) -> str:
        """The value of spec.backend this backend runs."""
        ...

    def holds(self, p: Pass) -> bool:
        """Something this backend made for the object may still be in force (a CronJob in
        place, a schedule's finalizer): another backend must retire it before it runs."""
        ...

    def run_in_progress(self, key: Key) -> bool:
        """A run this backend started is still going (it outlives a switch)."""
        ...

    async def prepare(self, p: Pass, confirm_exists: ConfirmExists) -> tuple[Pass, Prepared]:
        """Everything that can fail before another backend is touched; returns the pass
        as it now is (a finalizer put back) and what the other steps need."""
        ...

    def unrecorded(self, prepared: Prepared) -> BackendRef | None:
        """Where this pass would make something that status names in neither backendRef
        nor pendingBackendRef; None if nothing. The pass then only records it (decide,
        record, then act), so a create whose record is lost is never lost track of."""
        ...

    async def accept(self, p: Pass, prepared: Prepared) -> Prepared:
        """Switching to this backend: its own verdict on the object (a dry run, a schedule
        created paused) before the old one is retired; a refusal leaves the old running."""
        ...

    async def reconcile(self, p: Pass, prepared: Prepared, *, hold: bool) -> Outcome:
        """Bring the backend in step and judge its slots. `hold`: a run the old backend
        started is still going under Forbid, so nothing new starts until it ends."""
        ...

    async def handle_requests(self, p: Pass, prepared: Prepared) -> list[RequestStatus]:
        """Act on the run-now and backfill requests not yet settled (planning/requests.py)."""
        ...

    async def retire(self, p: Pass) -> None:
        """Switching away: remove what this backend made (runs in flight finish)."""
        ...

    async def finalize(self, p: Pass) -> None:
        """The object is being deleted: remove what owner references cannot take along."""
        ...

    async def judge_running(self, p: Pass) -> Outcome | None:
        """What this backend, still running by the last accepted spec while the current
        one cannot be acted on, was seen to do; None if it runs nothing for the object."""
        ...

    def forget(self, key: Key) -> None:
        """The object is gone or has left this backend: drop what is remembered of it."""
        ...

    def lane(self, body: dict[str, Any] | None) -> Hashable | None:
        """The work queue's lane of the object's passes (a shared server they wait on),
        None if this backend's passes wait on nothing shared (workqueue.py)."""
        ...


def lane_of(backends: Sequence[Backend[Any]], body: dict[str, Any] | None) -> Hashable | None:
    """The work queue's lane of an object's passes: the first backend's that has one."""
    return next((lane for lane in (b.lane(body) for b in backends) if lane is not None), None)
