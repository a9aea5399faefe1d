"""The temporal backend: keeps one Temporal Schedule in step, holds the finalizer that takes
the schedule along when the ScheduledJob goes, and judges the schedule's slots."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

from temporalio.client import (
    Schedule,
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
)
from sundial.backends.protocol import (
    DAY_SEMANTICS_NOTE,
    Cache,
    ConfirmExists,
    Key,
    Outcome,
    Pass,
)
from sundial.backends.temporal.client import (
    Connection,
    Temporal,
)
from sundial.backends.temporal.connections import ConnectionResolver, connection_key
from sundial.backends.temporal.digests import description_digest, schedule_fingerprint
from sundial.backends.temporal.made import (
    MadeSchedule,
    Removal,
    keeps_running,
    made_for,
    memo,
    previous_schedule,
    same_place,
)
from sundial.backends.temporal.requests import handle_requests
from sundial.backends.temporal.revoked import Revocations
from sundial.backends.temporal.runs import observe_all_runs
from sundial.backends.temporal.schedule import judge, schedule_view, temporal_schedule
from sundial.backends.temporal.watch import ScheduleWatch
from sundial.config import OperatorConfig
from sundial.errors import Retry, SpecProblem, TemporalRejected, TemporalUnavailable, api_retry
from sundial.events import EventRecorder
from sundial.kube import ApiException, KubeClient
from sundial.planning import ownership
from sundial.planning import status as st
from sundial.planning.missed import (
    temporal_requeue,
)
from sundial.planning.ownership import Ownership
from sundial.planning.run_job import (
    WORKFLOW_END_RECHECK,
    is_run_job,
    runs_on_worker,
    waiting_for_workflow_end,
    with_jobs,
    worker_grace_ends,
    worker_misses,
)
from sundial.planning.runs import limits, run_history
from sundial.planning.schedule import both_days_restricted, jitter
from sundial.planning.temporal_schedule import (
    MOVE_NOTE,
    READMITTED_NOTE,
    RESUME_NOTE,
    SWITCH_NOTE,
    is_revoked_note,
    is_suspend_note,
    schedule_id,
    suspend_note,
)

log = logging.getLogger(__name__)

# Held while a Temporal schedule may exist, so deleting the ScheduledJob deletes it too.
TEMPORAL_FINALIZER = "sundial.dev/temporal-schedule"
# A move the new connection refuses (a Temporal namespace that is not there) is fixed on
# the connection, which wakes nothing: looked at again this often, as connection problems.
MOVE_RETRY_SECONDS = 30.0
# Why a pending place the spec moved away from is emptied (its create was never recorded).
UNRECORDED_NOTE = (
    "a schedule made there was never recorded in backendRef (its status write was lost), "
    "and the spec now points elsewhere"
)


@dataclass(frozen=True)
class Prepared:
    """Temporal answered for this object: where, and what it holds now (None: nothing).
    `unrecorded`: the place is named in neither status.backendRef nor
    status.pendingBackendRef, and Temporal was not asked: the pass records it first."""

    connection: Connection
    ref: ConnectionRef
    schedule_id: str
    description: ScheduleDescription | None
    unrecorded: BackendRef | None = None

    @property
    def place(self) -> BackendRef:
        """The schedule's place, as status records it."""
        return BackendRef(
            kind="TemporalSchedule",
            namespace=self.connection.namespace,
            schedule_id=self.schedule_id,
            address=self.connection.address,
            connection=self.ref,
        )


@dataclass
class TemporalBackend:
    """backend: temporal (protocol.Backend): one Temporal Schedule per object, and the
    finalizer that takes it along when the object goes. Its prepared value (`Prepared`)
    is where the schedule is and what Temporal holds there now."""

    name: ClassVar[str] = "temporal"
    kube: KubeClient
    temporal: Temporal
    events: EventRecorder
    config: OperatorConfig
    connections: ConnectionResolver
    # Wakes an object when the listing shows its schedule changed (None: no listing).
    watch: ScheduleWatch | None = None
    # The watch cache: a job on temporal's Jobs and their Pods' times (None: not shown).
    cache: Cache | None = None
    _removal: Removal = field(init=False)
    _revocations: Revocations = field(init=False)

    def __post_init__(self) -> None:
        self._removal = Removal(self.temporal, self.connections, self.events)
        self._revocations = Revocations(self.temporal, self.connections, self.config, self.watch)

    def forget(self, key: Key) -> None:
        """The object is gone or has left Temporal: its schedule is no longer watched."""
        if self.watch is not None:
            self.watch.forget(key)

    def lane(self, body: dict[str, Any] | None) -> Hashable | None:
        return temporal_lane(body, self.config.default_connection)

    def holds(self, p: Pass) -> bool:
        # Set before a schedule is first created, removed only once it is deleted.
        return TEMPORAL_FINALIZER in p.sj.metadata.finalizers

    def run_in_progress(self, key: Key) -> bool:
        """A job on temporal's run whose Job is still going (the CronJob of a switch to
        kubernetes waits for it under Forbid). A workflow of the user's own is not waited
        for: Sundial cannot tell what it runs."""
        if self.cache is None:
            return False
        return any(
            job.finished_at is None and is_run_job(key[1], job.name) for job in self.cache.jobs(key)
        )

    async def judge_running(self, p: Pass) -> Outcome | None:
        return None  # a schedule left running is judged where it is (SpecProblem.observed)

    async def prepare(self, p: Pass, confirm_exists: ConfirmExists) -> tuple[Pass, Prepared]:
        """The finalizer first, then `_prepare`. The object is confirmed to exist before
        the finalizer is first set, and before the first create of a schedule: a schedule
        made for a ghost would outlive it, with no finalizer left to delete it."""
        confirmed = TEMPORAL_FINALIZER not in p.sj.metadata.finalizers
        if confirmed:
            await confirm_exists()
        # A finalizer someone removed is put back before anything else can fail.
        sj = await self.keep_finalizer(p.sj, p.now)
        prepared = await self._prepare(sj, p.now)
        if prepared.description is None and not confirmed:  # a create or a record next
            await confirm_exists()
        return replace(p, sj=sj), prepared

    def unrecorded(self, prepared: Prepared) -> BackendRef | None:
        return prepared.unrecorded

    async def _prepare(self, sj: ScheduledJob, now: datetime) -> Prepared:
        """Everything that can fail before the kubernetes side is touched: the connection
        and its Secrets, one answer from Temporal, and the move of a schedule made at
        another place (a changed connection or id prefix: `_move`). A switch from
        kubernetes removes the CronJob only after this, so a bad Secret or an outage never
        leaves neither; a move deletes the old schedule only once the new place has
        accepted the schedule, so it never leaves two running, nor none."""
        try:
            resolved = await self.connections.resolve(sj)
        except SpecProblem as problem:
            raise await self._revocations.stop(sj, problem, now) from None
        identity = schedule_id(self.config.schedule_id_prefix, *_key(sj))
        desired = MadeSchedule(
            resolved.ref, identity, resolved.connection.address, resolved.connection.namespace
        )
        previous = previous_schedule(sj.status.backend_ref, resolved.ref)
        recorded = await self._recorded(sj, desired, previous, now)
        if previous is not None and same_place(previous, desired):
            previous = None  # nothing moves
        if previous is None and self._surely_new(sj, resolved.connection):
            prepared = Prepared(resolved.connection, resolved.ref, identity, None)
            return prepared if recorded else replace(prepared, unrecorded=prepared.place)
        keeps = "" if previous is None else f"; {keeps_running(previous)}"
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
        if not recorded:
            # The place answered; it is recorded before anything is made there (a move's
            # paused create included). A place that never answered is never recorded, so
            # a mistyped address is left behind by the next spec without a look back.
            return replace(prepared, unrecorded=prepared.place)
        if previous is not None:
            prepared = await self._move(sj, prepared, previous, now)
        return prepared

    async def _recorded(
        self, sj: ScheduledJob, desired: MadeSchedule, made: MadeSchedule | None, now: datetime
    ) -> bool:
        """Status names `desired` (backendRef or pendingBackendRef), so a schedule made
        there is never lost track of. A pending place the spec has moved away from (its
        create's record lost: a refused status write, a killed operator) is emptied first,
        as a move's old place is: the next record overwrites it."""
        pending = previous_schedule(sj.status.pending_backend_ref, desired.ref)
        if pending is not None and not any(
            known is not None and same_place(pending, known) for known in (desired, made)
        ):
            await self._removal.remove(sj, pending, now, moving=True, why=UNRECORDED_NOTE)
            pending = None
        return any(known is not None and same_place(known, desired) for known in (made, pending))

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
        old = await self._removal.reach(sj, previous, now, moving=True)
        if old is None:
            return prepared  # none of Sundial's there (or given up on): nothing to delete
        if (old.address, old.namespace, previous.schedule_id) == (
            prepared.connection.address, prepared.connection.namespace, prepared.schedule_id,
        ):  # fmt: skip
            return prepared  # one and the same schedule, reached over another connection
        prepared = await self._owned_or_adopted(sj, prepared, now)
        if prepared.description is None:
            prepared = await self._create_paused(
                sj, prepared, now, MOVE_NOTE, keeps_running(previous),
                retry_after=MOVE_RETRY_SECONDS,
            )  # fmt: skip
        to = MadeSchedule(prepared.ref, prepared.schedule_id, prepared.connection.address,
                          prepared.connection.namespace)  # fmt: skip
        await self._removal.delete(sj, previous, old, now, moving=True, moved_to=to.describe())
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

    async def reconcile(self, p: Pass, prepared: Prepared, *, hold: bool) -> Outcome:
        """`hold`: a run the CronJob started is still going and the policy is Forbid, so
        a schedule made for the switch stays paused until it ends."""
        sj, table, now = p.sj, p.table, p.now
        prepared = await self._owned_or_adopted(sj, prepared, now)
        try:
            description, spec_hash = await self._upsert(sj, prepared, now, hold=hold)
        except TemporalRejected as error:
            raise SpecProblem(error.reason, str(error)) from None
        judgement = judge(sj, table, description, now)
        observed, seen_actions, unseen = await observe_all_runs(
            self.temporal, sj, prepared.connection, description
        )
        ending = False
        grace_ends = None
        if runs_on_worker(sj) and self.cache is not None:
            cache = self.cache
            finished = {job.name for job in cache.jobs(_key(sj)) if job.finished_at is not None}
            made = set(cache.job_names(_key(sj)))
            start_grace = limits(sj.spec).start_grace
            observed = with_jobs(
                sj.metadata.name, observed,
                lambda job: cache.pods_ended(sj.metadata.namespace, job),
                made=made, start_grace=start_grace, now=now,
            )  # fmt: skip
            ending = waiting_for_workflow_end(observed, finished)
            grace_ends = worker_grace_ends(observed, made, start_grace, now)
        history = run_history(
            sj.status, observed, limits(sj.spec), now, complete=False, unseen=unseen
        )
        if dropped := worker_misses(history.newly_finished):
            new_runs = sorted([*judgement.new_runs, *dropped], key=lambda r: r.scheduled_time)
            judgement = replace(judgement, new_runs=new_runs)
        notes = [DAY_SEMANTICS_NOTE] if table.cron and both_days_restricted(table.cron) else []
        status = st.temporal_status(
            sj,
            schedule_view(description),
            judgement,
            history,
            ref=prepared.place,
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
        if ending:
            requeue = min(requeue, WORKFLOW_END_RECHECK.total_seconds())
        if grace_ends is not None:
            requeue = min(requeue, max((grace_ends - now).total_seconds(), 1.0))
        if self.watch is not None:
            self.watch.track(
                _key(sj), prepared.connection, prepared.schedule_id,
                description_digest(description),
            )  # fmt: skip
        return Outcome(status, requeue, judgement.new_runs, history)

    async def handle_requests(self, p: Pass, prepared: Prepared) -> list[RequestStatus]:
        """Run-now and backfill requests (requests.handle_requests)."""
        if prepared.description is None:
            return []
        return await handle_requests(
            self.temporal, p.sj, prepared.connection, prepared.schedule_id,
            prepared.description, p.table, p.now,
        )  # fmt: skip

    async def accept(self, p: Pass, prepared: Prepared) -> Prepared:
        """Switching from kubernetes: create the schedule paused, so Temporal's own verdict
        comes before the CronJob is retired; a refusal leaves the CronJob running."""
        sj, now = p.sj, p.now
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
        description = await self.temporal.describe_present(
            prepared.connection, prepared.schedule_id
        )
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
        identity, description = prepared.schedule_id, prepared.description
        decision = ownership.decide(
            sj, identity, exists=description is not None,
            made_for_this=description is not None and await made_for(sj, description),
        )  # fmt: skip
        if decision in (Ownership.ABSENT, Ownership.OWNED):
            return prepared
        if decision is Ownership.REFUSE:
            raise SpecProblem(
                reasons.SCHEDULE_EXISTS,
                ownership.refusal(
                    sj, "Temporal schedule", identity,
                    f"namespace {prepared.connection.namespace}", "Delete that schedule",
                    "it is then deleted and created again from this ScheduledJob; its "
                    "counters start afresh",
                ),
                retry_after=60.0,
            )  # fmt: skip
        await self.temporal.delete(prepared.connection, identity)
        await self.events.record(
            sj, "Normal", "Adopted",
            f"adopted the existing Temporal schedule {identity} "
            f"({ownership.ADOPT_ANNOTATION}): it was replaced by this ScheduledJob's", now=now,
        )  # fmt: skip
        return replace(prepared, description=None)

    async def retire(self, p: Pass) -> None:
        """Switching to kubernetes: the schedule goes before the CronJob comes."""
        sj, now = p.sj, p.now
        if TEMPORAL_FINALIZER not in sj.metadata.finalizers:
            return
        await self._remove_all(sj, now)
        await self.events.record(
            sj, "Normal", "BackendSwitched",
            "switched to backend kubernetes: the Temporal schedule was deleted", now=now,
        )  # fmt: skip

    async def finalize(self, p: Pass) -> None:
        """The object is being deleted: its schedules go, then the finalizer. Temporal's
        own errors become Retry, with what cannot be done yet (the deletion waits)."""
        try:
            await self._remove_all(p.sj, p.now)
        except TemporalUnavailable as error:
            raise Retry(f"cannot delete the Temporal schedule yet, retrying: {error}") from None
        except TemporalRejected as error:
            message = f"cannot delete the Temporal schedule, retrying: {error}"
            raise Retry(message, error.reason) from None

    async def _remove_all(self, sj: ScheduledJob, now: datetime) -> None:
        """Delete every schedule Sundial may have made for the object (where status says
        it made one, where it recorded it was about to, and where it would make one now),
        then let go of the object."""
        ref = self.connections.ref_of(sj)
        current = MadeSchedule(ref, schedule_id(self.config.schedule_id_prefix, *_key(sj)))
        recorded = (sj.status.backend_ref, sj.status.pending_backend_ref)
        places: list[MadeSchedule] = []
        for made in [*(previous_schedule(r, ref) for r in recorded), current]:
            if made is not None and not any(same_place(made, seen) for seen in places):
                places.append(made)
        for made in places:
            await self._removal.remove(sj, made, now, moving=False)
        self.forget(_key(sj))
        await self._set_finalizer(sj, present=False)

    async def keep_finalizer(self, sj: ScheduledJob, now: datetime) -> ScheduledJob:
        """The finalizer put back on an object whose status records a schedule Sundial made,
        after someone removed it: without it, deleting the object would leave the schedule
        firing for ever. Returns the object as it now is. (Called only for an object not
        being deleted, and confirmed to exist.)"""
        made = previous_schedule(sj.status.backend_ref, self.connections.ref_of(sj))
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

    async def _create(
        self, sj: ScheduledJob, prepared: Prepared, schedule: Schedule, spec_hash: str
    ) -> bool:
        """The finalizer comes right before the first create: an object that never
        reached Temporal has none, so deleting it never waits on a Temporal. False if a
        schedule of that id was there already."""
        if TEMPORAL_FINALIZER not in sj.metadata.finalizers:
            await self._set_finalizer(sj, present=True)
        return await self.temporal.create(
            prepared.connection, prepared.schedule_id, schedule, memo(sj, spec_hash)
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
            description = await self.temporal.describe_present(connection, identity)
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
                    description = await self.temporal.describe_present(connection, identity)
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
            description = await self.temporal.describe_present(connection, identity)
        # suspend pauses with Sundial's note, taking over a pause made by hand (so setting
        # suspend true and back to false clears it, as the PausedInTemporal advice says);
        # lifting it lifts only Sundial's own pause, never one by hand or pause-on-failure.
        state = description.schedule.state
        wanted_note = suspend_note(sj.spec)
        if sj.spec.suspend and not (state.paused and state.note == wanted_note):
            await self.temporal.set_paused(connection, identity, True, wanted_note)
            description = await self.temporal.describe_present(connection, identity)
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
            description = await self.temporal.describe_present(connection, identity)
        return description, spec_hash

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


def _key(sj: ScheduledJob) -> Key:
    return (sj.metadata.namespace, sj.metadata.name)
