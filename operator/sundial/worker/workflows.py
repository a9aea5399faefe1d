"""The RunJob workflow: one run of a container job on temporal. Deterministic, no I/O:
everything it does goes through activities (activities.py), as Temporal's samples do.

Why a heartbeating activity waits for the Job, not a workflow loop of short polls: a wait
of hours is then two events in the workflow's history, not thousands, and an asyncio
activity that waits holds a coroutine, not a thread (the worker allows a thousand at
once). A worker that dies mid-wait stops heartbeating; after HEARTBEAT_TIMEOUT the wait is
retried on another worker (or this one, restarted) and resumes waiting on the same Job,
whose name the run fixes.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from sundial.planning.run_job import NOT_SCHEDULED_BY_SUNDIAL, JobReference, run_job_name
    from sundial.planning.temporal_schedule import RUN_JOB_WORKFLOW
    from sundial.worker.messages import JobOutcome, RunStart

SCHEDULED_BY_ID = SearchAttributeKey.for_keyword("TemporalScheduledById")
SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
HEARTBEAT_TIMEOUT = timedelta(seconds=30)
# Making the Job: retried (an apiserver blip), refusals are final (non-retryable).
START_TIMEOUT = timedelta(seconds=60)
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


@workflow.defn(name=RUN_JOB_WORKFLOW)
class RunJob:
    @workflow.run
    async def run(self, reference: dict[str, Any]) -> dict[str, Any]:
        info = workflow.info()
        try:
            JobReference.from_input(reference)
        except ValueError as error:
            raise ApplicationError(str(error), type=NOT_SCHEDULED_BY_SUNDIAL,
                                   non_retryable=True) from None  # fmt: skip
        attributes = info.typed_search_attributes
        start = RunStart(
            reference=reference,
            scheduled_by=attributes.get(SCHEDULED_BY_ID),
            scheduled_time=(
                attributes.get(SCHEDULED_START_TIME) or info.workflow_start_time
            ).isoformat(),
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            started_time=info.workflow_start_time.isoformat(),
        )
        namespace = reference["namespace"]
        # The Job's name is fixed by the run (run_job_name), so a cancelled run can delete
        # its Job whatever step the cancel met.
        job_name = run_job_name(reference["name"], info.workflow_id, info.run_id)
        try:
            outcome = await self._make_and_wait(start, namespace)
        except BaseException as error:
            if is_cancelled_exception(error):
                # Cancelled (by hand, an overlap policy): no Job outlives its run. The wait
                # deletes it itself; this also covers a cancel that came while it was made.
                await workflow.execute_activity(
                    "delete_job", [namespace, job_name],
                    start_to_close_timeout=START_TIMEOUT, retry_policy=RETRY,
                )  # fmt: skip
            raise
        if not outcome.succeeded:
            raise ApplicationError(
                outcome.message or outcome.reason or "the Job failed",
                {"jobName": job_name},
                type=outcome.reason or "JobFailed",
                non_retryable=True,
            )
        return {"jobName": job_name, "message": outcome.message}

    async def _make_and_wait(self, start: RunStart, namespace: str) -> JobOutcome:
        making = workflow.start_activity(
            "start_job", start, result_type=str,
            start_to_close_timeout=START_TIMEOUT, retry_policy=RETRY,
        )  # fmt: skip
        try:
            # Shielded: a cancel must not abandon an attempt that may still make the Job
            # (its create sent, the answer on the way); the run waits for it to end.
            job_name = await asyncio.shield(making)
        except asyncio.CancelledError:
            with contextlib.suppress(ActivityError):
                await making
            raise
        except ActivityError as error:
            # A refusal (non-retryable) is the run's own failure, with its reason as the
            # type: what the ScheduledJob's status and Temporal's UI show.
            cause = error.cause
            if isinstance(cause, ApplicationError) and cause.non_retryable:
                raise ApplicationError(cause.message, type=cause.type,
                                       non_retryable=True) from None  # fmt: skip
            raise
        outcome: JobOutcome = await workflow.execute_activity(
            "wait_for_job", [namespace, job_name], result_type=JobOutcome,
            # The workflow's own execution timeout bounds the wait (and the Job's deadline
            # the Job): no schedule-to-close of its own.
            start_to_close_timeout=timedelta(days=3650), heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            # A cancelled run ends once its Job is deleted, not before.
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )  # fmt: skip
        return outcome
