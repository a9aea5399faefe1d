"""The schedules Sundial made for an object, wherever they were made: where status says
(`MadeSchedule`), how to tell one is Sundial's (the memo, `made_for`), and how one is
reached and deleted over the connection it was made with (`Removal`: the finalizer, a
switch to kubernetes, and a move between connections use it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from temporalio.client import ScheduleDescription

from sundial.api import reasons
from sundial.api.models import BackendRef, ConnectionRef, ScheduledJob
from sundial.backends.temporal.client import Connection, Temporal
from sundial.backends.temporal.connections import ConnectionResolver
from sundial.errors import Retry, SpecProblem, TemporalRejected, TemporalUnavailable
from sundial.events import EventRecorder
from sundial.planning.temporal_schedule import (
    SCHEDULEDJOB_MEMO_KEY,
    SCHEDULEDJOB_UID_MEMO_KEY,
    SPEC_HASH_MEMO_KEY,
)

log = logging.getLogger(__name__)

# The escape hatch for a schedule Sundial can no longer reach (its Temporal is gone for
# good, or its connection's Secrets went with a deleted namespace while the operator was
# down): with this annotation set to "true", the finalizer and a move of the schedule give
# up on it, with a Warning Event naming what may be left to delete by hand.
ABANDON_ANNOTATION = "sundial.dev/abandon-schedule"


@dataclass(frozen=True)
class MadeSchedule:
    """A schedule Sundial may have made for an object: where it is, and over what."""

    ref: ConnectionRef
    schedule_id: str
    address: str | None = None  # None: wherever the connection points now
    namespace: str | None = None

    def describe(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        at = f" at {self.address}" if self.address else ""
        return f"{self.schedule_id}{where}{at} (over {self.ref.kind} {self.ref.name})"


@dataclass
class Removal:
    """Deletes schedules Sundial made, over the connection each was made with (as last
    read, if the connection or its Secrets are gone meanwhile)."""

    temporal: Temporal
    connections: ConnectionResolver
    events: EventRecorder

    async def remove(
        self, sj: ScheduledJob, made: MadeSchedule, now: datetime, *, moving: bool,
        why: str = "",
    ) -> None:  # fmt: skip
        """Delete one schedule Sundial made for `sj`, over the connection it was made with
        (as last read, if the connection or its Secrets are gone meanwhile)."""
        connection = await self.reach(sj, made, now, moving=moving)
        if connection is not None:
            await self.delete(sj, made, connection, now, moving=moving, why=why)

    async def reach(
        self, sj: ScheduledJob, made: MadeSchedule, now: datetime, *, moving: bool
    ) -> Connection | None:
        """The connection `made` was made over, if a schedule Sundial made for `sj` is
        there; None if none is, or if Sundial gave up on it (ABANDON_ANNOTATION)."""
        try:
            resolved = await self.connections.resolve(sj, made.ref, deleting=True)
            connection = replace(
                resolved.connection,
                address=made.address or resolved.connection.address,
                namespace=made.namespace or resolved.connection.namespace,
            )
            description = await self.temporal.describe(connection, made.schedule_id)
        except (SpecProblem, TemporalRejected, Retry) as error:
            # (Retry: the connection cannot be read, say its namespace's Role is gone, and
            # was not read since the operator started.)
            await self._unreachable(sj, made, error, now, moving=moving)
            return None
        if description is None:
            return None
        if not await made_for(sj, description):
            log.info("left Temporal schedule %s alone: not made for %s/%s",
                     made.describe(), *(sj.metadata.namespace, sj.metadata.name))  # fmt: skip
            return None
        return connection

    async def delete(
        self,
        sj: ScheduledJob,
        made: MadeSchedule,
        connection: Connection,
        now: datetime,
        *,
        moving: bool,
        moved_to: str = "",
        why: str = "",
    ) -> None:
        """`why` the moved schedule goes, if not because `moved_to` accepted it first."""
        try:
            await self.temporal.delete(connection, made.schedule_id)
        except (TemporalRejected, TemporalUnavailable) as error:
            await self._unreachable(sj, made, error, now, moving=moving)
            return
        log.info("deleted Temporal schedule %s", made.describe())
        if moving:
            await self.events.record(
                sj, "Normal", "ScheduleMoved",
                f"deleted Temporal schedule {made.describe()}: "
                + (why or "the connection or schedule id changed, and "
                   f"{moved_to or 'the new place'} accepted the schedule first"),
                now=now,
            )  # fmt: skip

    async def _unreachable(
        self,
        sj: ScheduledJob,
        made: MadeSchedule,
        error: SpecProblem | TemporalRejected | Retry,
        now: datetime,
        *,
        moving: bool,
    ) -> None:
        """A schedule Sundial made cannot be looked at or deleted: given up on, with a
        Warning Event, if ABANDON_ANNOTATION says so; else raised (an outage or a refused
        read of the connection as it is, retried with backoff; anything else as
        ScheduleUnreachable)."""
        if sj.metadata.annotations.get(ABANDON_ANNOTATION) == "true":
            await self.events.record(
                sj, "Warning", "ScheduleAbandoned",
                f"gave up on Temporal schedule {made.describe()} ({ABANDON_ANNOTATION}): "
                f"{error}; if it still exists, delete it by hand", now=now,
            )  # fmt: skip
            return
        if isinstance(error, Retry):
            raise error  # transient: retried with backoff, nothing is given up
        message = error.message if isinstance(error, SpecProblem) else str(error)
        verb = "moved" if moving else "deleted"
        raise SpecProblem(
            reasons.SCHEDULE_UNREACHABLE,
            f"the Temporal schedule {made.describe()} must be deleted before this "
            f"ScheduledJob can be {verb}, and cannot be: {message}. Restore the "
            f"connection, or delete the schedule by hand and `kubectl annotate "
            f"scheduledjob {sj.metadata.name} {ABANDON_ANNOTATION}=true`",
            retry_after=30.0,
        ) from None


def keeps_running(previous: MadeSchedule) -> str:
    return (
        f"the Temporal schedule {previous.describe()} keeps running until the new "
        "connection accepts the schedule"
    )


def previous_schedule(ref: BackendRef | None, current: ConnectionRef) -> MadeSchedule | None:
    """The schedule status says Sundial made (a status from before connections were
    recorded names none: it was made over the connection in use now)."""
    if ref is None or ref.kind != "TemporalSchedule" or not ref.schedule_id:
        return None
    return MadeSchedule(ref.connection or current, ref.schedule_id, ref.address, ref.namespace)


def same_place(a: MadeSchedule, b: MadeSchedule) -> bool:
    """Unknown parts (None) are taken as equal: only a known difference is a move."""
    return (
        a.ref == b.ref
        and a.schedule_id == b.schedule_id
        and (a.address is None or b.address is None or a.address == b.address)
        and (a.namespace is None or b.namespace is None or a.namespace == b.namespace)
    )


async def made_for(sj: ScheduledJob, description: ScheduleDescription) -> bool:
    """Sundial created this schedule for this object: its memo names the object (and its
    uid; a schedule from before uids were written names only the object)."""
    try:
        memo = await description.memo()
    except Exception:  # a memo Sundial cannot decode is not Sundial's
        return False
    if memo.get(SCHEDULEDJOB_MEMO_KEY) != "/".join((sj.metadata.namespace, sj.metadata.name)):
        return False
    uid = memo.get(SCHEDULEDJOB_UID_MEMO_KEY)
    return uid is None or uid == sj.metadata.uid


def memo(sj: ScheduledJob, spec_hash: str) -> dict[str, str]:
    """What marks a schedule as made by Sundial for this object (read by made_for)."""
    return {
        SPEC_HASH_MEMO_KEY: spec_hash,
        SCHEDULEDJOB_MEMO_KEY: "/".join((sj.metadata.namespace, sj.metadata.name)),
        SCHEDULEDJOB_UID_MEMO_KEY: sj.metadata.uid,
    }
