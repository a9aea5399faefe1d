"""A connection taken away: the schedule Sundial made over it must not go on starting
workflows with that connection's rights. `Revocations.stop` pauses it (with a note that
says why, lifted by `_upsert` once the connection admits the object again) and judges what
it did, for the status beside the problem."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime

from temporalio.client import ScheduleActionStartWorkflow, ScheduleDescription

from sundial.api.models import BackendRef, ConnectionRef, ScheduledJob
from sundial.backends.protocol import Outcome
from sundial.backends.temporal.client import (
    Connection,
    Temporal,
)
from sundial.backends.temporal.connections import ConnectionResolver
from sundial.backends.temporal.digests import description_digest, schedule_fingerprint
from sundial.backends.temporal.made import made_for, previous_schedule
from sundial.backends.temporal.runs import observe_all_runs
from sundial.backends.temporal.schedule import judge, schedule_view
from sundial.backends.temporal.watch import ScheduleWatch
from sundial.config import OperatorConfig
from sundial.errors import SpecProblem, TemporalRejected, TemporalUnavailable
from sundial.planning import status as st
from sundial.planning.missed import temporal_requeue
from sundial.planning.runs import limits, run_history
from sundial.planning.schedule import jitter, timetable
from sundial.planning.temporal_schedule import is_revoked_note, revoked_note

log = logging.getLogger(__name__)


@dataclass
class Revocations:
    temporal: Temporal
    connections: ConnectionResolver
    config: OperatorConfig
    watch: ScheduleWatch | None

    async def stop(self, sj: ScheduledJob, problem: SpecProblem, now: datetime) -> SpecProblem:
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
        made = previous_schedule(backend_ref, self.connections.ref_of(sj))
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
            if description is None or not await made_for(sj, description):
                return problem  # none of Sundial's is there: nothing runs for this object
            if await self._runs_by_right(sj, made.ref, description):
                return problem
            state = description.schedule.state
            if not state.paused:
                await self.temporal.set_paused(
                    connection, identity, True, revoked_note(problem.reason)
                )
                log.info("paused Temporal schedule %s: %s", made.describe(), problem.reason)
                description = await self.temporal.describe_present(connection, identity)
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
        judgement = judge(sj, timetable(sj.spec), description, now)
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
            self.watch.track(
                (sj.metadata.namespace, sj.metadata.name),
                connection,
                identity,
                description_digest(description),
            )
        return Outcome(status, requeue, judgement.new_runs, history)
