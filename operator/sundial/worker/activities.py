"""The RunJob workflow's activities: all its I/O. `start_job` checks that the run may act
(planning/run_job.refusal, then Temporal's own record of the schedule's running actions,
then the object's connection admitting its namespace) and makes the Job; `wait_for_job`
waits for its end, heartbeating, and deletes it when the run is cancelled or terminated;
`delete_job` deletes the Job of a run cancelled at any step.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError
from temporalio import activity
from temporalio.client import ScheduleActionExecutionStartWorkflow
from temporalio.exceptions import ApplicationError

from sundial.api.models import ScheduledJob
from sundial.backends.temporal.client import Connection, Temporal
from sundial.backends.temporal.connections import ConnectionResolver
from sundial.errors import Retry, SpecProblem, TemporalRejected, TemporalUnavailable
from sundial.kube import KubeClient
from sundial.planning import run_job as rj
from sundial.planning.cronjob import JOB_NAME_LABEL
from sundial.planning.pod_times import listed_pods_ended
from sundial.planning.schedule import parse_time
from sundial.planning.temporal_schedule import schedule_id
from sundial.worker.messages import JobOutcome, RunStart

log = logging.getLogger(__name__)

# How often a running Job is looked at (and the wait heartbeats).
POLL_SECONDS = 5.0
# A run Temporal has not yet listed among the schedule's running actions is looked for
# again this many times (the schedule records a start right after making it) before the
# run is refused as not the schedule's.
LISTING_ATTEMPTS = 5


def _refused(reason: str, message: str) -> ApplicationError:
    log.warning("refused a run: %s", message)
    return ApplicationError(message, type=reason, non_retryable=True)


@dataclass
class RunJobActivities:
    kube: KubeClient
    temporal: Temporal
    connections: ConnectionResolver
    # The connection this worker serves: runs are taken up only for objects it admits.
    serving: Connection
    prefix: str

    @activity.defn(name="start_job")
    async def start_job(self, run: RunStart) -> str:
        try:
            reference = rj.JobReference.from_input(run.reference)
        except ValueError as error:
            raise _refused(rj.NOT_SCHEDULED_BY_SUNDIAL, str(error)) from None
        sj = await self._scheduledjob(reference)
        refusal = rj.refusal(reference, sj, scheduled_by=run.scheduled_by, prefix=self.prefix)
        if refusal is not None:
            raise _refused(refusal.reason, refusal.message)
        assert sj is not None
        await self._check_started_by_schedule(reference, run)
        await self._check_admitted(sj)
        name = rj.run_job_name(reference.name, run.workflow_id, run.run_id)
        await self._check_in_time(sj, run, name)
        scheduled = parse_time(run.scheduled_time)
        assert scheduled is not None
        job = rj.run_job_manifest(sj, name, scheduled, run.workflow_id, run.run_id)
        if await self.kube.create_job(job):
            log.info("created Job %s/%s for %s", reference.namespace, name, run.workflow_id)
        return name

    async def _scheduledjob(self, reference: rj.JobReference) -> ScheduledJob | None:
        body = await self.kube.read_scheduledjob(reference.namespace, reference.name)
        if body is None:
            return None
        try:
            return ScheduledJob.model_validate(body)
        except ValidationError:
            raise _refused(
                rj.NOT_A_JOB_ON_TEMPORAL,
                f"ScheduledJob {reference.namespace}/{reference.name} is not valid; nothing "
                "was created",
            ) from None

    async def _check_started_by_schedule(self, reference: rj.JobReference, run: RunStart) -> None:
        """Temporal's own record: the object's schedule lists this run among its running
        actions or its recent ones. The search attribute alone is the starter's word; this
        is the server's. A run under Allow taken up after ten newer actions of its
        schedule cannot be told from a forged one, and is refused."""
        identity = schedule_id(self.prefix, reference.namespace, reference.name)
        try:
            description = await self.temporal.describe(self.serving, identity)
        except TemporalRejected as error:
            raise _refused(rj.NOT_SCHEDULED_BY_SUNDIAL, f"schedule {identity}: {error}") from None
        # Running actions are the runs Temporal follows for the overlap policy; under Allow
        # it follows none, so the recent actions (the last ten started) count too.
        actions = [] if description is None else [
            *description.info.running_actions,
            *(result.action for result in description.info.recent_actions),
        ]  # fmt: skip
        started = {
            (action.workflow_id, action.first_execution_run_id)
            for action in actions
            if isinstance(action, ScheduleActionExecutionStartWorkflow)
        }
        if (run.workflow_id, run.run_id) in started:
            return
        if activity.info().attempt < LISTING_ATTEMPTS:
            raise ApplicationError(f"not yet among the running actions of {identity}")
        raise _refused(
            rj.NOT_SCHEDULED_BY_SUNDIAL,
            f"schedule {identity} does not list {run.workflow_id} among its running or its "
            "ten most recent actions; nothing was created",
        )

    async def _check_in_time(self, sj: ScheduledJob, run: RunStart, name: str) -> None:
        """A run taken up past the catch-up window is not run (run_job.too_late), unless an
        earlier attempt already made its Job: then that Job is the run's, waited on."""
        started = parse_time(run.started_time) if run.started_time else None
        late = rj.too_late(sj, started, datetime.now(UTC)) if started is not None else None
        if late is not None and await self.kube.read_job(sj.metadata.namespace, name) is None:
            raise _refused(late.reason, late.message)

    async def _check_admitted(self, sj: ScheduledJob) -> None:
        """The object's own connection admits its namespace, and is the one served here."""
        try:
            resolved = await self.connections.resolve(sj)
        except SpecProblem as problem:
            raise _refused(rj.CONNECTION_NOT_ALLOWED, problem.message) from None
        except Retry as retry:
            raise ApplicationError(str(retry)) from None  # retried
        connection = resolved.connection
        if (connection.address, connection.namespace) != (
            self.serving.address, self.serving.namespace,
        ):  # fmt: skip
            raise _refused(
                rj.CONNECTION_NOT_ALLOWED,
                f"ScheduledJob {sj.metadata.namespace}/{sj.metadata.name} uses "
                f"{connection.describe()}, not {self.serving.describe()} this worker serves",
            )

    @activity.defn(name="wait_for_job")
    async def wait_for_job(self, where: list[str]) -> JobOutcome:
        namespace, name = where
        try:
            while True:
                job = await self.kube.read_job(namespace, name)
                if job is None:
                    return JobOutcome(False, "JobDeleted",
                                      f"the Job {name} was deleted before it ended")  # fmt: skip
                if rj.job_end(job, None) is not None:
                    end = rj.job_end(job, await self._summary(namespace, name))
                    assert end is not None
                    return JobOutcome(end.succeeded, end.reason, end.message)
                activity.heartbeat()
                await asyncio.sleep(POLL_SECONDS)
        except asyncio.CancelledError:
            details = activity.cancellation_details()
            # Cancelled (by hand, an overlap policy): the Job goes too. "Not found" is
            # either the run's end (terminated, timed out) or only this attempt's, timed
            # out on the server while this worker could not heartbeat (a stall, a pause),
            # with a new attempt waiting on the same Job: Temporal's record of the run
            # tells which. A worker shutting down leaves the Job to the next attempt.
            if details is not None and (
                details.cancel_requested
                or (details.not_found and await asyncio.shield(self._run_over()))
            ):
                await asyncio.shield(self._delete(namespace, name))
            raise

    @activity.defn(name="delete_job")
    async def delete_job(self, where: list[str]) -> None:
        """A cancelled run's Job, deleted (gone already is done)."""
        namespace, name = where
        await self._delete(namespace, name)

    async def _run_over(self) -> bool:
        """Whether Temporal has the run this attempt works for as ended (or gone). Unknown
        (Temporal did not answer) keeps the Job: a run's Job deleted under a live run is a
        run lost, a Job left is bounded by its own deadline."""
        workflow_id = activity.info().workflow_id
        if workflow_id is None:  # not a workflow's activity: nothing to tell by
            return False
        try:
            found = await self.temporal.look_up_run(self.serving, workflow_id)
        except (TemporalUnavailable, TemporalRejected) as error:
            log.warning("kept the Job of %s: could not tell whether its run ended (%s)",
                        workflow_id, error)  # fmt: skip
            return False
        return found is None or found.status != "RUNNING"

    async def _delete(self, namespace: str, name: str) -> None:
        await asyncio.wait_for(self.kube.delete_job(namespace, name), timeout=30)
        log.info("deleted Job %s/%s: its run was cancelled", namespace, name)

    async def _summary(self, namespace: str, name: str) -> str | None:
        """The last ended Pod's termination message (the library's summary)."""
        ended = listed_pods_ended(await self.kube.list_pods(namespace, f"{JOB_NAME_LABEL}={name}"))
        return ended.summary if ended is not None else None
