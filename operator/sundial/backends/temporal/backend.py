"""The temporal backend: keeps one Temporal Schedule in step, holds the finalizer that takes
the schedule along when the ScheduledJob goes, and judges the schedule's slots."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleState,
)

from sundial.api import reasons
from sundial.api.connection_models import CLUSTER_CONNECTION_KIND, CONNECTION_KIND
from sundial.api.models import (
    BackendRef,
    ConnectionRef,
    RequestStatus,
    ScheduledJob,
    TemporalCounters,
)
from sundial.backend import DAY_SEMANTICS_NOTE, Key, Outcome
from sundial.backends.temporal.client import (
    Connection,
    Temporal,
    TemporalRejected,
    TemporalUnavailable,
    description_digest,
    schedule_fingerprint,
)
from sundial.backends.temporal.connections import ConnectionResolver, connection_key
from sundial.backends.temporal.runs import handle_requests, observe_all_runs
from sundial.backends.temporal.schedule import schedule_view, temporal_schedule
from sundial.backends.temporal.watch import ScheduleWatch
from sundial.config import OperatorConfig
from sundial.errors import Retry, SpecProblem, api_retry
from sundial.events import EventRecorder
from sundial.kube import ApiException, KubeClient
from sundial.planning import status as st
from sundial.planning.cronjob import ADOPT_ANNOTATION, adoption_requested
from sundial.planning.missed import (
    Judgement,
    TemporalEvidence,
    judge_temporal,
    start_accounting,
    temporal_requeue,
    timetable_hash,
)
from sundial.planning.runs import limits, run_history
from sundial.planning.schedule import Timetable, both_days_restricted, jitter, timetable
from sundial.planning.temporal_schedule import (
    MOVE_NOTE,
    READMITTED_NOTE,
    RESUME_NOTE,
    SCHEDULEDJOB_MEMO_KEY,
    SCHEDULEDJOB_UID_MEMO_KEY,
    SPEC_HASH_MEMO_KEY,
    SWITCH_NOTE,
    is_revoked_note,
    is_suspend_note,
    revoked_note,
    schedule_id,
    suspend_note,
)

log = logging.getLogger(__name__)

# Held while a Temporal schedule may exist, so deleting the ScheduledJob deletes it too.
TEMPORAL_FINALIZER = "sundial.dev/temporal-schedule"
# The escape hatch for a schedule Sundial can no longer reach (its Temporal is gone for
# good, or its connection's Secrets went with a deleted namespace while the operator was
# down): with this annotation set to "true", the finalizer and a move of the schedule give
# up on it, with a Warning Event naming what may be left to delete by hand.
ABANDON_ANNOTATION = "sundial.dev/abandon-schedule"
# A move the new connection refuses (a Temporal namespace that is not there) is fixed on
# the connection, which wakes nothing: looked at again this often, as connection problems.
MOVE_RETRY_SECONDS = 30.0


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


@dataclass(frozen=True)
class Prepared:
    """Temporal answered for this object: where, and what it holds now (None: nothing)."""

    connection: Connection
    ref: ConnectionRef
    schedule_id: str
    description: ScheduleDescription | None


@dataclass
class TemporalBackend:
    kube: KubeClient
    temporal: Temporal
    events: EventRecorder
    config: OperatorConfig
    connections: ConnectionResolver
    # Wakes an object when the listing shows its schedule changed (None: no listing).
    watch: ScheduleWatch | None = None

    def forget(self, key: Key) -> None:
        """The object is gone or has left Temporal: its schedule is no longer watched."""
        if self.watch is not None:
            self.watch.forget(key)

    async def prepare(self, sj: ScheduledJob, now: datetime) -> Prepared:
        """Everything that can fail before the kubernetes side is touched: the connection
        and its Secrets, one answer from Temporal, and the move of a schedule made at
        another place (a changed connection or id prefix: `_move`). A switch from
        kubernetes removes the CronJob only after this, so a bad Secret or an outage never
        leaves neither; a move deletes the old schedule only once the new place has
        accepted the schedule, so it never leaves two running, nor none."""
        try:
            resolved = await self.connections.resolve(sj)
        except SpecProblem as problem:
            raise await self._stop_revoked(sj, problem, now) from None
        identity = schedule_id(self.config.schedule_id_prefix, *_key(sj))
        desired = MadeSchedule(
            resolved.ref, identity, resolved.connection.address, resolved.connection.namespace
        )
        previous = _previous_schedule(sj.status.backend_ref, resolved.ref)
        if previous is not None and _same_place(previous, desired):
            previous = None  # nothing moves
        if previous is None and self._surely_new(sj, resolved.connection):
            return Prepared(resolved.connection, resolved.ref, identity, None)
        keeps = "" if previous is None else f"; {_keeps_running(previous)}"
        try:
            description = await self.temporal.describe(resolved.connection, identity)
        except TemporalRejected as error:  # e.g. no such Temporal namespace, no permission
            retry_after = 60.0 if previous is None else MOVE_RETRY_SECONDS
            raise SpecProblem(error.reason, f"{error}{keeps}", retry_after) from None
        except TemporalUnavailable as error:
            if previous is None:
                raise
            raise TemporalUnavailable(f"{error}{keeps}") from None
        prepared = Prepared(resolved.connection, resolved.ref, identity, description)
        if previous is not None:
            prepared = await self._move(sj, prepared, previous, now)
        return prepared

    async def _stop_revoked(
        self, sj: ScheduledJob, problem: SpecProblem, now: datetime
    ) -> SpecProblem:
        """The object may not use its connection (`problem`). A schedule Sundial made for
        it over a connection it may no longer use (its namespace no longer admitted, the
        connection or its Secret deleted, its task queue no longer allowed) must not go on
        starting workflows with that connection's rights: it is paused, through the
        connection as last read (what the finalizer would delete it with), until the
        connection admits the object again (`_upsert` lifts the pause), and it is still
        watched and judged meanwhile. Returns the problem to report, with that paused
        schedule as observed. A schedule the object still runs by right (a move to a
        connection that refuses it, or a spec change refused while the running schedule
        is within the connection's rules) is left running, as any refused change is."""
        backend_ref = sj.status.backend_ref
        made = _previous_schedule(backend_ref, self.connections.ref_of(sj))
        if made is None or backend_ref is None:
            return problem  # nothing was made: nothing runs
        cannot = f"{problem.message}; the Temporal schedule {made.describe()} made over it"
        try:
            resolved = await self.connections.resolve(sj, made.ref, deleting=True)
        except SpecProblem as error:
            return SpecProblem(
                problem.reason,
                f"{cannot} could not be paused: {error.message} (not read since the "
                "operator started); restore the connection, or pause or delete the schedule "
                "in Temporal",
                problem.retry_after,
            )
        connection = replace(
            resolved.connection,
            address=made.address or resolved.connection.address,
            namespace=made.namespace or resolved.connection.namespace,
        )
        identity = made.schedule_id
        done = "is paused with the connection as last read"
        try:
            description = await self.temporal.describe(connection, identity)
            if description is None or not await _made_for(sj, description):
                return problem  # none of Sundial's is there: nothing runs for this object
            if await self._runs_by_right(sj, made.ref, description):
                return problem
            state = description.schedule.state
            if not state.paused:
                await self.temporal.set_paused(
                    connection, identity, True, revoked_note(problem.reason)
                )
                log.info("paused Temporal schedule %s: %s", made.describe(), problem.reason)
                description = await self._describe(connection, identity)
            elif not is_revoked_note(state.note):  # by hand, or spec.suspend: it stays so
                done = f"was paused already ({state.note or 'no note'}) and stays paused"
            observed = await self._observe(sj, connection, backend_ref, identity, description,
                                           now)  # fmt: skip
        except TemporalUnavailable as error:
            message = f"{cannot} must be paused and cannot be yet: {error}"
            raise TemporalUnavailable(message) from None
        except TemporalRejected as error:
            return SpecProblem(
                problem.reason, f"{cannot} could not be paused: {error}", problem.retry_after
            )
        message = (
            f"schedule paused: {problem.message}. The Temporal schedule {made.describe()} "
            f"{done}, so that nothing runs over a connection this ScheduledJob may no longer "
            "use; Sundial resumes it once the connection admits the ScheduledJob again"
        )
        return SpecProblem(problem.reason, message, problem.retry_after, observed=observed)

    async def _runs_by_right(
        self, sj: ScheduledJob, ref: ConnectionRef, description: ScheduleDescription
    ) -> bool:
        """The connection `ref` admits the schedule as it runs in Temporal (its task queue,
        not a new one the spec asks for)."""
        action = description.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow):
            return False
        running = sj
        if sj.spec.workflow is not None:
            workflow = sj.spec.workflow.model_copy(update={"task_queue": action.task_queue})
            running = sj.model_copy(
                update={"spec": sj.spec.model_copy(update={"workflow": workflow})}
            )
        try:
            await self.connections.resolve(running, ref)
        except SpecProblem:
            return False
        return True

    async def _observe(
        self,
        sj: ScheduledJob,
        connection: Connection,
        ref: BackendRef,
        identity: str,
        description: ScheduleDescription,
        now: datetime,
    ) -> Outcome:
        """What a schedule Sundial is not bringing in step shows: its slots judged, its
        runs recorded, its state; the spec hash and fingerprint of Sundial's last write
        stay as they were (the schedule was not written)."""
        judgement = self._judge(sj, timetable(sj.spec), description, now)
        runs, seen_actions, unseen = await observe_all_runs(
            self.temporal, sj, connection, description
        )
        history = run_history(sj.status, runs, limits(sj.spec), now, complete=False, unseen=unseen)
        status = st.temporal_status(
            sj, schedule_view(description), judgement, history, ref=ref,
            spec_hash=sj.status.spec_hash or "",
            fingerprint=sj.status.backend_fingerprint or schedule_fingerprint(description),
            now=now,
        ).model_copy(update={"seen_actions": seen_actions})  # fmt: skip
        requeue = temporal_requeue(
            status.next_run_times, jitter(sj.spec), now, self.config.temporal_resync_seconds
        )
        if self.watch is not None:
            self.watch.track(_key(sj), connection, identity, description_digest(description))
        return Outcome(status, requeue, judgement.new_runs, history)

    async def _move(
        self, sj: ScheduledJob, prepared: Prepared, previous: MadeSchedule, now: datetime
    ) -> Prepared:
        """Move the schedule from `previous` (where status says it was made) to where
        `prepared` is, which has answered a describe. The old one must be reachable and
        the new place must accept the schedule itself (a Temporal namespace that does
        not exist answers a describe with "not found", as if it merely had no schedule):
        the schedule is created there paused, as a switch from kubernetes does, and only
        then is the old one deleted; `_upsert` unpauses it. A refusal or an outage on
        either side leaves the old one running, and Ready says why."""
        old = await self._reach_made(sj, previous, now, moving=True)
        if old is None:
            return prepared  # none of Sundial's there (or given up on): nothing to delete
        if (old.address, old.namespace, previous.schedule_id) == (
            prepared.connection.address, prepared.connection.namespace, prepared.schedule_id,
        ):  # fmt: skip
            return prepared  # one and the same schedule, reached over another connection
        prepared = await self._owned_or_adopted(sj, prepared, now)
        if prepared.description is None:
            prepared = await self._create_paused(
                sj, prepared, now, MOVE_NOTE, _keeps_running(previous),
                retry_after=MOVE_RETRY_SECONDS,
            )  # fmt: skip
        to = MadeSchedule(prepared.ref, prepared.schedule_id, prepared.connection.address,
                          prepared.connection.namespace)  # fmt: skip
        await self._delete_made(sj, previous, old, now, moving=True, moved_to=to.describe())
        return prepared

    def _surely_new(self, sj: ScheduledJob, connection: Connection) -> bool:
        """An object that never reached Temporal (no schedule in its status, no finalizer),
        at a connection whose listing has just answered: its schedule is created without
        describing first, a third of the requests a new object costs (describe, create,
        describe). A create that finds the id taken describes it then and judges whose it
        is, as a describe-first pass would. The listing stands for the describe's other use:
        the address, credentials and namespace answer, so the finalizer set before the
        create does not hold a deletion on a Temporal that was refusing this object."""
        return (
            self.watch is not None
            and sj.status.backend_ref is None
            and TEMPORAL_FINALIZER not in sj.metadata.finalizers
            and self.watch.answered_lately(connection)
        )

    async def reconcile(
        self,
        sj: ScheduledJob,
        prepared: Prepared,
        table: Timetable,
        now: datetime,
        *,
        hold: bool = False,
    ) -> Outcome:
        """`hold`: a run the CronJob started is still going and the policy is Forbid, so
        a schedule made for the switch stays paused until it ends."""
        prepared = await self._owned_or_adopted(sj, prepared, now)
        try:
            description, spec_hash = await self._upsert(sj, prepared, now, hold=hold)
        except TemporalRejected as error:
            raise SpecProblem(error.reason, str(error)) from None
        judgement = self._judge(sj, table, description, now)
        observed, seen_actions, unseen = await observe_all_runs(
            self.temporal, sj, prepared.connection, description
        )
        history = run_history(
            sj.status, observed, limits(sj.spec), now, complete=False, unseen=unseen
        )
        notes = [DAY_SEMANTICS_NOTE] if table.cron and both_days_restricted(table.cron) else []
        status = st.temporal_status(
            sj,
            schedule_view(description),
            judgement,
            history,
            ref=BackendRef(
                kind="TemporalSchedule",
                namespace=prepared.connection.namespace,
                schedule_id=prepared.schedule_id,
                address=prepared.connection.address,
                connection=prepared.ref,
            ),
            spec_hash=spec_hash,
            fingerprint=schedule_fingerprint(description),
            now=now,
            notes=notes,
        ).model_copy(update={"seen_actions": seen_actions})
        requeue = temporal_requeue(
            status.next_run_times, jitter(sj.spec), now, self.config.temporal_resync_seconds
        )
        if history.wake_at is not None:
            requeue = min(requeue, max((history.wake_at - now).total_seconds(), 1.0))
        if self.watch is not None:
            self.watch.track(
                _key(sj), prepared.connection, prepared.schedule_id,
                description_digest(description),
            )  # fmt: skip
        return Outcome(status, requeue, judgement.new_runs, history)

    async def handle_requests(
        self, sj: ScheduledJob, prepared: Prepared, table: Timetable, now: datetime
    ) -> list[RequestStatus]:
        """Run-now and backfill requests (runs.handle_requests)."""
        if prepared.description is None:
            return []
        return await handle_requests(
            self.temporal, sj, prepared.connection, prepared.schedule_id,
            prepared.description, table, now,
        )  # fmt: skip

    async def stand_by(self, sj: ScheduledJob, prepared: Prepared, now: datetime) -> Prepared:
        """Switching from kubernetes: create the schedule paused, so Temporal's own verdict
        comes before the CronJob is retired; a refusal leaves the CronJob running."""
        prepared = await self._owned_or_adopted(sj, prepared, now)
        if prepared.description is not None:
            return prepared
        return await self._create_paused(
            sj, prepared, now, SWITCH_NOTE,
            "the CronJob keeps running until Temporal accepts the schedule",
        )  # fmt: skip

    async def _create_paused(
        self,
        sj: ScheduledJob,
        prepared: Prepared,
        now: datetime,
        note: str,
        meanwhile: str,
        *,
        retry_after: float | None = None,
    ) -> Prepared:
        """The schedule created paused with `note`: Temporal's own verdict on it, before
        what runs now is retired (`meanwhile` tells what runs until Temporal accepts)."""
        _, schedule, spec_hash = temporal_schedule(sj, self.config.schedule_id_prefix)
        schedule = replace(schedule, state=ScheduleState(paused=True, note=note))
        try:
            made = await self._create(sj, prepared, schedule, spec_hash)
        except TemporalRejected as error:
            raise SpecProblem(error.reason, f"{error}; {meanwhile}", retry_after) from None
        if made:
            log.info("created Temporal schedule %s paused (%s)", prepared.schedule_id, note)
        description = await self._describe(prepared.connection, prepared.schedule_id)
        if not made:  # one was there already: whose?
            return await self._owned_or_adopted(sj, replace(prepared, description=description),
                                                now)  # fmt: skip
        return replace(prepared, description=description)

    async def _owned_or_adopted(
        self, sj: ScheduledJob, prepared: Prepared, now: datetime
    ) -> Prepared:
        """A schedule under this id that Sundial did not create for this object is never
        written over, unless adoption was asked for. Temporal keeps a schedule's memo
        from its creation, so adopting means deleting it and creating Sundial's."""
        identity = prepared.schedule_id
        if prepared.description is None or await _made_for(sj, prepared.description):
            return prepared
        if not adoption_requested(sj, identity):
            raise SpecProblem(
                reasons.SCHEDULE_EXISTS,
                f"a Temporal schedule {identity} already exists in namespace "
                f"{prepared.connection.namespace} and was not created by this ScheduledJob; "
                "Sundial leaves it alone. Delete that schedule, or adopt it: `kubectl annotate "
                f"scheduledjob {sj.metadata.name} {ADOPT_ANNOTATION}={identity}` (it is then "
                "deleted and created again from this ScheduledJob; its counters start afresh)",
                retry_after=60.0,
            )
        await self.temporal.delete(prepared.connection, identity)
        await self.events.record(
            sj, "Normal", "Adopted",
            f"adopted the existing Temporal schedule {identity} ({ADOPT_ANNOTATION}): it was "
            "replaced by this ScheduledJob's", now=now,
        )  # fmt: skip
        return replace(prepared, description=None)

    async def retire(self, sj: ScheduledJob, now: datetime) -> None:
        """Switching to kubernetes: the schedule goes before the CronJob comes."""
        if TEMPORAL_FINALIZER not in sj.metadata.finalizers:
            return
        await self.finalize(sj, now)
        await self.events.record(
            sj, "Normal", "BackendSwitched",
            "switched to backend kubernetes: the Temporal schedule was deleted", now=now,
        )  # fmt: skip

    async def finalize(self, sj: ScheduledJob, now: datetime) -> None:
        """Delete every schedule Sundial made for the object (where status says it made
        one, and where it would make one now), then let go of the object."""
        ref = self.connections.ref_of(sj)
        current = MadeSchedule(ref, schedule_id(self.config.schedule_id_prefix, *_key(sj)))
        previous = _previous_schedule(sj.status.backend_ref, ref)
        for made in [current] if previous is None else [previous, current]:
            if made is current and previous is not None and _same_place(previous, current):
                continue
            await self._remove_made(sj, made, now, moving=False)
        self.forget(_key(sj))
        await self._set_finalizer(sj, present=False)

    async def keep_finalizer(self, sj: ScheduledJob, now: datetime) -> ScheduledJob:
        """The finalizer put back on an object whose status records a schedule Sundial made,
        after someone removed it: without it, deleting the object would leave the schedule
        firing for ever. Returns the object as it now is. (Called only for an object not
        being deleted, and confirmed to exist.)"""
        made = _previous_schedule(sj.status.backend_ref, self.connections.ref_of(sj))
        if made is None or TEMPORAL_FINALIZER in sj.metadata.finalizers:
            return sj
        await self._set_finalizer(sj, present=True)
        await self.events.record(
            sj, "Warning", "FinalizerRestored",
            f"the finalizer {TEMPORAL_FINALIZER} was removed while Temporal schedule "
            f"{made.describe()} exists; it is back, so that deleting this ScheduledJob "
            "deletes the schedule", now=now,
        )  # fmt: skip
        finalizers = [*sj.metadata.finalizers, TEMPORAL_FINALIZER]
        return sj.model_copy(
            update={"metadata": sj.metadata.model_copy(update={"finalizers": finalizers})}
        )

    async def _remove_made(
        self, sj: ScheduledJob, made: MadeSchedule, now: datetime, *, moving: bool
    ) -> None:
        """Delete one schedule Sundial made for `sj`, over the connection it was made with
        (as last read, if the connection or its Secrets are gone meanwhile)."""
        connection = await self._reach_made(sj, made, now, moving=moving)
        if connection is not None:
            await self._delete_made(sj, made, connection, now, moving=moving)

    async def _reach_made(
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
        if not await _made_for(sj, description):
            log.info("left Temporal schedule %s alone: not made for %s/%s",
                     made.describe(), *_key(sj))  # fmt: skip
            return None
        return connection

    async def _delete_made(
        self,
        sj: ScheduledJob,
        made: MadeSchedule,
        connection: Connection,
        now: datetime,
        *,
        moving: bool,
        moved_to: str = "",
    ) -> None:
        try:
            await self.temporal.delete(connection, made.schedule_id)
        except (TemporalRejected, TemporalUnavailable) as error:
            await self._unreachable(sj, made, error, now, moving=moving)
            return
        log.info("deleted Temporal schedule %s", made.describe())
        if moving:
            await self.events.record(
                sj, "Normal", "ScheduleMoved",
                f"deleted Temporal schedule {made.describe()}: the connection or schedule id "
                f"changed, and {moved_to or 'the new place'} accepted the schedule first",
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

    async def _create(
        self, sj: ScheduledJob, prepared: Prepared, schedule: Schedule, spec_hash: str
    ) -> bool:
        """The finalizer comes right before the first create: an object that never
        reached Temporal has none, so deleting it never waits on a Temporal. False if a
        schedule of that id was there already."""
        if TEMPORAL_FINALIZER not in sj.metadata.finalizers:
            await self._set_finalizer(sj, present=True)
        return await self.temporal.create(
            prepared.connection, prepared.schedule_id, schedule, _memo(sj, spec_hash)
        )

    async def _upsert(
        self, sj: ScheduledJob, prepared: Prepared, now: datetime, *, hold: bool = False
    ) -> tuple[ScheduleDescription, str]:
        """Create, update or leave the schedule; returns what the server then holds."""
        connection, identity = prepared.connection, prepared.schedule_id
        _, schedule, spec_hash = temporal_schedule(sj, self.config.schedule_id_prefix)
        description = prepared.description
        made = False
        if description is None:
            made = await self._create(sj, prepared, schedule, spec_hash)
            description = await self._describe(connection, identity)
            if made:
                log.info("created Temporal schedule %s", identity)
            else:
                # One was there already (made by a pass whose answer was lost, or by
                # someone else): never claimed unseen, adopted only on request.
                prepared = replace(prepared, description=description)
                if (await self._owned_or_adopted(sj, prepared, now)).description is None:
                    made = await self._create(sj, prepared, schedule, spec_hash)
                    if not made:
                        raise TemporalUnavailable(f"schedule {identity} reappeared at once")
                    description = await self._describe(connection, identity)
        if not made and (
            sj.status.spec_hash != spec_hash
            or sj.status.backend_fingerprint != schedule_fingerprint(description)
        ):
            if sj.status.spec_hash == spec_hash:
                await self.events.record(
                    sj, "Warning", "DriftCorrected",
                    f"Temporal schedule {identity} was changed outside Sundial; restored",
                    now=now,
                )  # fmt: skip
            await self.temporal.update(connection, identity, schedule, keep_state=True)
            log.info("updated Temporal schedule %s", identity)
            description = await self._describe(connection, identity)
        # suspend pauses with Sundial's note, taking over a pause made by hand (so setting
        # suspend true and back to false clears it, as the PausedInTemporal advice says);
        # lifting it lifts only Sundial's own pause, never one by hand or pause-on-failure.
        state = description.schedule.state
        wanted_note = suspend_note(sj.spec)
        if sj.spec.suspend and not (state.paused and state.note == wanted_note):
            await self.temporal.set_paused(connection, identity, True, wanted_note)
            description = await self._describe(connection, identity)
        elif (
            not sj.spec.suspend
            and state.paused
            and (
                is_suspend_note(state.note)
                or (state.note == SWITCH_NOTE and not hold)
                or state.note == MOVE_NOTE  # the old schedule is deleted: this one runs
                or is_revoked_note(state.note)  # the connection admits the object again
            )
        ):
            resumed = READMITTED_NOTE if is_revoked_note(state.note) else RESUME_NOTE
            await self.temporal.set_paused(connection, identity, False, resumed)
            description = await self._describe(connection, identity)
        return description, spec_hash

    async def _describe(self, connection: Connection, identity: str) -> ScheduleDescription:
        description = await self.temporal.describe(connection, identity)
        if description is None:
            raise TemporalUnavailable(f"schedule {identity} vanished while being written")
        return description

    @staticmethod
    def _judge(
        sj: ScheduledJob, table: Timetable, description: ScheduleDescription, now: datetime
    ) -> Judgement:
        info = description.info
        counters = TemporalCounters(
            missed_catchup_window=info.num_actions_missed_catchup_window,
            overlap_skipped=info.num_actions_skipped_overlap,
            buffer_dropped=description.raw_description.info.buffer_dropped,
        )
        accounting = start_accounting(
            sj.status.run_accounting, timetable_hash(sj.spec), now, since=info.created_at,
            keep_counters=sj.status.backend == "temporal",
        )  # fmt: skip
        if accounting.temporal_counters is None:
            # A fresh start: what the counters held before is not this schedule's news.
            accounting = accounting.model_copy(update={"temporal_counters": counters})
        evidence = TemporalEvidence(
            counters=counters,
            recent_scheduled=[a.scheduled_at for a in info.recent_actions],
            recent_started=[a.started_at for a in info.recent_actions],
            paused=description.schedule.state.paused,
            jitter=jitter(sj.spec),
        )
        return judge_temporal(table, accounting, evidence, now)

    async def _set_finalizer(self, sj: ScheduledJob, *, present: bool) -> None:
        finalizers = [f for f in sj.metadata.finalizers if f != TEMPORAL_FINALIZER]
        if present:
            finalizers.append(TEMPORAL_FINALIZER)
        try:
            # resourceVersion makes this a compare-and-swap: a concurrent change to the
            # list fails with a conflict and the pass is retried, nothing is lost.
            await self.kube.patch_scheduledjob_metadata(
                *_key(sj),
                {"finalizers": finalizers, "resourceVersion": sj.metadata.resource_version},
            )
        except ApiException as error:
            raise api_retry(error, "updating finalizers") from None


def temporal_lane(body: dict[str, Any] | None, default_connection: str) -> Hashable | None:
    """The work queue's lane of an object's passes: the Temporal connection it names, while
    it is on Temporal or leaving it (its finalizer is set); None when its passes make no
    Temporal call. Passes of one lane wait on the same Temporal; capping those in flight
    keeps them from holding every worker (workqueue.py)."""
    if body is None:
        return None
    spec = body.get("spec") or {}
    finalizers = (body.get("metadata") or {}).get("finalizers") or []
    if spec.get("backend") != "temporal" and TEMPORAL_FINALIZER not in finalizers:
        return None
    # Read from the cached object as it is (no model parsed per dequeue); the defaults are
    # ConnectionRef's and connections.connection_ref's (leaving Temporal, the connection
    # status says the schedule was made over).
    ref = spec.get("temporalConnectionRef")
    made = (body.get("status") or {}).get("backendRef") or {}
    if spec.get("backend") != "temporal" and made.get("kind") == "TemporalSchedule":
        ref = made.get("connection") or ref
    if ref is None:
        ref = {"kind": CLUSTER_CONNECTION_KIND, "name": default_connection}
    namespace = (body.get("metadata") or {}).get("namespace") or ""
    return connection_key(ref.get("kind", CONNECTION_KIND), ref["name"], namespace)


def _keeps_running(previous: MadeSchedule) -> str:
    return (
        f"the Temporal schedule {previous.describe()} keeps running until the new "
        "connection accepts the schedule"
    )


def _key(sj: ScheduledJob) -> Key:
    return (sj.metadata.namespace, sj.metadata.name)


def _previous_schedule(ref: BackendRef | None, current: ConnectionRef) -> MadeSchedule | None:
    """The schedule status says Sundial made (a status from before connections were
    recorded names none: it was made over the connection in use now)."""
    if ref is None or ref.kind != "TemporalSchedule" or not ref.schedule_id:
        return None
    return MadeSchedule(ref.connection or current, ref.schedule_id, ref.address, ref.namespace)


def _same_place(a: MadeSchedule, b: MadeSchedule) -> bool:
    """Unknown parts (None) are taken as equal: only a known difference is a move."""
    return (
        a.ref == b.ref
        and a.schedule_id == b.schedule_id
        and (a.address is None or b.address is None or a.address == b.address)
        and (a.namespace is None or b.namespace is None or a.namespace == b.namespace)
    )


async def _made_for(sj: ScheduledJob, description: ScheduleDescription) -> bool:
    """Sundial created this schedule for this object: its memo names the object (and its
    uid; a schedule from before uids were written names only the object)."""
    try:
        memo = await description.memo()
    except Exception:  # a memo Sundial cannot decode is not Sundial's
        return False
    if memo.get(SCHEDULEDJOB_MEMO_KEY) != "/".join(_key(sj)):
        return False
    uid = memo.get(SCHEDULEDJOB_UID_MEMO_KEY)
    return uid is None or uid == sj.metadata.uid


def _memo(sj: ScheduledJob, spec_hash: str) -> dict[str, str]:
    """What marks a schedule as made by Sundial for this object (read by _made_for)."""
    return {
        SPEC_HASH_MEMO_KEY: spec_hash,
        SCHEDULEDJOB_MEMO_KEY: "/".join(_key(sj)),
        SCHEDULEDJOB_UID_MEMO_KEY: sj.metadata.uid,
    }
