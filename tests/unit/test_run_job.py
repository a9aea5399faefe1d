"""A container job on temporal, as pure decisions (planning/run_job.py): which runs the
worker may act on, the Job it makes, what a Job's end means, the runs the operator shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sundial.api.models import ScheduledJob, ScheduledJobStatus
from sundial.planning import run_job as rj
from sundial.planning.runs import ObservedRun, limits, run_history
from sundial.planning.summaries import PodsEnded
from sundial.planning.temporal_schedule import desired_definition, run_job_timeout

SLOT = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)
PREFIX = "sundial/"


def scheduledjob(uid: str = "u1", **spec: Any) -> ScheduledJob:
    spec.setdefault("backend", "temporal")
    spec.setdefault("job", {"image": "reports:1", "cronJob": "nightly"})
    return ScheduledJob.model_validate({
        "metadata": {"name": "reports", "namespace": "shop", "uid": uid},
        "spec": {"schedule": "0 2 * * *", **spec},
    })  # fmt: skip


REFERENCE = rj.JobReference("shop", "reports", "u1", "h")
OWN = "sundial/shop/reports"


@pytest.mark.parametrize(
    ("sj", "scheduled_by", "reason"),
    [
        (scheduledjob(), OWN, None),
        (scheduledjob(), None, rj.NOT_SCHEDULED_BY_SUNDIAL),  # started by hand
        (scheduledjob(), "sundial/shop/other", rj.NOT_SCHEDULED_BY_SUNDIAL),
        (scheduledjob(), "other-cluster/shop/reports", rj.NOT_SCHEDULED_BY_SUNDIAL),
        (None, OWN, rj.SCHEDULEDJOB_GONE),
        (scheduledjob(uid="u2"), OWN, rj.SCHEDULEDJOB_GONE),  # deleted and made again
        (scheduledjob(backend="kubernetes"), OWN, rj.NOT_A_JOB_ON_TEMPORAL),  # switched away
        (scheduledjob(job=None, workflow={"type": "W", "taskQueue": "q"}), OWN,
         rj.NOT_A_JOB_ON_TEMPORAL),
        # With a workflow of the user's own beside it, the workflow runs, not the job.
        (scheduledjob(workflow={"type": "W", "taskQueue": "q"}), OWN, rj.NOT_A_JOB_ON_TEMPORAL),
    ],
)  # fmt: skip
def test_which_runs_the_worker_acts_on(
    sj: ScheduledJob | None, scheduled_by: str | None, reason: str | None
) -> None:
    refusal = rj.refusal(REFERENCE, sj, scheduled_by=scheduled_by, prefix=PREFIX)
    assert (refusal.reason if refusal else None) == reason


def test_the_input_is_a_reference_never_a_pod_template() -> None:
    sj = scheduledjob()
    job = desired_definition(sj, PREFIX)["job"]
    assert job["input"] == {"namespace": "shop", "name": "reports", "uid": "u1",
                            "jobHash": rj.job_hash(sj)}  # fmt: skip
    assert job["taskQueue"] == "sundial/jobs"
    assert rj.JobReference.from_input(job["input"]) == rj.JobReference(
        "shop", "reports", "u1", rj.job_hash(sj))  # fmt: skip
    with pytest.raises(ValueError, match="no 'uid'"):
        rj.JobReference.from_input({"namespace": "shop", "name": "reports"})


def test_a_runs_job_name_is_fixed_by_the_run() -> None:
    first = rj.run_job_name("reports", "sundial/shop/reports-2026-12-06T02:00:00Z", "run-1")
    assert first == rj.run_job_name("reports", "sundial/shop/reports-2026-12-06T02:00:00Z",
                                    "run-1")  # fmt: skip
    assert first.startswith("reports-t")
    assert len(first) == len("reports-") + 10
    # A backfill of the same slot is another run, so another Job.
    assert first != rj.run_job_name("reports", "sundial/shop/reports-2026-12-06T02:00:00Z",
                                    "run-2")  # fmt: skip


def test_the_job_is_the_objects_own_owned_by_it_and_marked_with_its_slot_and_run() -> None:
    sj = scheduledjob(job={"image": "reports:1", "activeDeadlineSeconds": 600})
    job = rj.run_job_manifest(sj, "reports-tabc", SLOT, "wf", "run-1")
    meta = job["metadata"]
    assert (meta["name"], meta["namespace"]) == ("reports-tabc", "shop")
    assert meta["labels"]["sundial.dev/scheduledjob"] == "reports"
    assert meta["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] == (
        "2026-12-06T02:00:00Z")  # fmt: skip
    assert meta["annotations"][rj.WORKFLOW_ID_ANNOTATION] == "wf"
    assert meta["ownerReferences"] == [{
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob", "name": "reports",
        "uid": "u1", "controller": True, "blockOwnerDeletion": True,
    }]  # fmt: skip
    assert job["spec"]["activeDeadlineSeconds"] == 600
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "SUNDIAL_SLOT", "value": "2026-12-06T02:00:00Z"} in env
    # The workflow outlives the Job's deadline by the start allowance, no more.
    assert run_job_timeout(sj) == timedelta(seconds=600) + timedelta(minutes=10)
    assert run_job_timeout(scheduledjob()) is None


def condition(kind: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"status": {"conditions": [
        {"type": kind, "status": "True", "reason": reason, "message": message}]}}  # fmt: skip


def test_what_a_jobs_end_means_for_the_workflow() -> None:
    assert rj.job_end({"status": {"active": 1}}, None) is None
    assert rj.job_end(condition("Complete"), "3 reports") == rj.JobEnd(True, None, "3 reports")
    failed = rj.job_end(condition("Failed", "BackoffLimitExceeded", "Job has reached the "
                                  "specified backoff limit"), "no input")  # fmt: skip
    assert failed == rj.JobEnd(False, "BackoffLimitExceeded", "no input")
    # Without the container's words, the Job controller's.
    deadline = rj.job_end(condition("Failed", "DeadlineExceeded", "Job was active longer"),
                          None)  # fmt: skip
    assert deadline == rj.JobEnd(False, "DeadlineExceeded", "Job was active longer")


def test_the_operator_shows_each_runs_job_with_its_pods_own_times() -> None:
    ran = ObservedRun(scheduled_time=SLOT, result="Succeeded", start_time=SLOT,
                      completion_time=SLOT + timedelta(seconds=40), workflow_id="wf",
                      run_id="r1")  # fmt: skip
    going = ObservedRun(scheduled_time=SLOT, result="Running", workflow_id="wf2", run_id="r2")
    name = rj.run_job_name("reports", "wf", "r1")
    pods = {name: PodsEnded(SLOT + timedelta(seconds=5), SLOT + timedelta(seconds=31), "done")}
    going_job = rj.run_job_name("reports", "wf2", "r2")
    shown = rj.with_jobs("reports", [ran, going], pods.get, made={name, going_job},
                         start_grace=timedelta(seconds=60), now=SLOT)  # fmt: skip
    assert [run.job_name for run in shown] == [name, going_job]
    assert (shown[0].start_time, shown[0].completion_time, shown[0].message) == (
        SLOT + timedelta(seconds=5), SLOT + timedelta(seconds=31), "done")  # fmt: skip
    assert shown[1].start_time is None  # a running one keeps what its workflow says


def test_a_run_no_worker_took_up_within_the_start_grace_says_so() -> None:
    started = SLOT + timedelta(seconds=2)
    going = ObservedRun(scheduled_time=SLOT, result="Running", start_time=started,
                        workflow_id="wf", run_id="r1")  # fmt: skip
    grace = timedelta(seconds=60)

    def shown(now: datetime, made: set[str]) -> ObservedRun:
        return rj.with_jobs("reports", [going], lambda _: None, made=made, start_grace=grace,
                            now=now)[0]  # fmt: skip

    assert shown(started + grace, set()).reason is None  # within the grace
    late = shown(started + grace + timedelta(seconds=1), set())
    assert (late.result, late.reason) == ("Running", "WorkerUnavailable")
    # Its Job made: a worker has it, however long it runs.
    made = {rj.run_job_name("reports", "wf", "r1")}
    assert shown(started + timedelta(hours=1), made).reason is None


@pytest.mark.parametrize(
    ("reason", "result"),
    [("DeadlineExceeded", "TimedOut"), ("JobDeleted", "Cancelled"),
     ("BackoffLimitExceeded", "Failed"), ("WorkerUnavailable", "Cancelled")],
)  # fmt: skip
def test_a_failed_runs_result_is_read_as_a_cronjobs_job_would_be(reason: str, result: str) -> None:
    failed = ObservedRun(scheduled_time=SLOT, result="Failed", reason=reason, workflow_id="wf",
                         run_id="r1", start_time=SLOT, completion_time=SLOT)  # fmt: skip
    shown = rj.with_jobs("reports", [failed], lambda _: None, made=set(),
                         start_grace=timedelta(seconds=60), now=SLOT)[0]  # fmt: skip
    assert (shown.result, shown.reason) == (result, reason)


def test_the_workers_jobs_are_told_from_the_cronjobs_and_requested_ones() -> None:
    name = rj.run_job_name("reports", "wf", "r1")
    assert rj.is_run_job("reports", name)
    assert not rj.is_run_job("reports", "reports-29012345")  # the CronJob controller's
    assert not rj.is_run_job("reports", "reports-r0123456789"[:18])  # a run-now's
    assert not rj.is_run_job("other", name)


def test_a_run_no_worker_took_up_within_the_catchup_window_is_not_run() -> None:
    """The window is startingDeadlineSeconds (Temporal's catch-up window), counted from
    when Temporal started the run, not from its slot: a backfill of last week starts now."""
    started = SLOT + timedelta(seconds=3)
    windowed = scheduledjob(startingDeadlineSeconds=60)
    assert rj.too_late(windowed, started, started + timedelta(seconds=60)) is None
    late = rj.too_late(windowed, started, started + timedelta(seconds=61))
    assert late is not None
    assert late.reason == "WorkerUnavailable"
    assert "startingDeadlineSeconds: 60s" in late.message
    assert "waited 61s" in late.message
    # No window set: Temporal's own default (a year), as the schedule has.
    assert rj.too_late(scheduledjob(), started, started + timedelta(days=364)) is None
    assert rj.too_late(scheduledjob(), started, started + timedelta(days=366)) is not None


def test_a_run_not_taken_up_in_time_is_its_slot_missed_once() -> None:
    """What the operator records: the run, Cancelled with the worker's reason (no failure
    streak), and its slot missed with that reason; an ordinary cancel is no miss."""
    dropped = ObservedRun(scheduled_time=SLOT, result="Failed", reason="WorkerUnavailable",
                          message="no Sundial worker took this run up", workflow_id="wf",
                          run_id="r1", start_time=SLOT, completion_time=SLOT)  # fmt: skip
    cancelled = ObservedRun(scheduled_time=SLOT + timedelta(days=1), result="Failed",
                            reason="JobDeleted", workflow_id="wf2", run_id="r2",
                            start_time=SLOT, completion_time=SLOT)  # fmt: skip
    shown = rj.with_jobs("reports", [dropped, cancelled], lambda _: None, made=set(),
                         start_grace=timedelta(seconds=60), now=SLOT)  # fmt: skip
    history = run_history(ScheduledJobStatus(), shown, limits(scheduledjob().spec), SLOT,
                          complete=False)  # fmt: skip
    assert history.consecutive_failures == 0
    misses = rj.worker_misses(history.newly_finished)
    assert [(m.scheduled_time, m.reason) for m in misses] == [(SLOT, "WorkerUnavailable")]
    # The next pass: the run is settled, nothing newly finished, no second miss.
    again = run_history(ScheduledJobStatus(recentRuns=history.recent_runs), shown,
                        limits(scheduledjob().spec), SLOT, complete=False)  # fmt: skip
    assert rj.worker_misses(again.newly_finished) == []


def test_a_run_whose_job_ended_before_its_workflow_is_looked_at_again_soon() -> None:
    """Its Job's end is the last event the object gets; the workflow ends a poll later."""
    going = ObservedRun(scheduled_time=SLOT, result="Running", workflow_id="wf", run_id="r1",
                        job_name=rj.run_job_name("reports", "wf", "r1"))  # fmt: skip
    ended = ObservedRun(scheduled_time=SLOT, result="Succeeded", workflow_id="wf", run_id="r1",
                        job_name=going.job_name)  # fmt: skip
    assert going.job_name is not None
    assert rj.waiting_for_workflow_end([going], {going.job_name})
    assert not rj.waiting_for_workflow_end([going], set())  # its Job still runs
    assert not rj.waiting_for_workflow_end([ended], {going.job_name})  # both ended
    assert rj.WORKFLOW_END_RECHECK.total_seconds() < 60


def test_a_run_waiting_for_a_worker_is_looked_at_again_when_its_grace_ends() -> None:
    """Nothing else wakes the object then (the run's start was its last news): without this
    look, WorkerUnavailable waited for the next resync, minutes away."""
    started = SLOT + timedelta(seconds=2)
    grace = timedelta(seconds=10)
    going = ObservedRun(scheduled_time=SLOT, result="Running", start_time=started,
                        workflow_id="wf", run_id="r1",
                        job_name=rj.run_job_name("reports", "wf", "r1"))  # fmt: skip
    assert rj.worker_grace_ends([going], set(), grace, started) == started + grace + timedelta(
        seconds=1
    )
    # Once past it (said), with its Job made, or ended: nothing to wake for.
    assert rj.worker_grace_ends([going], set(), grace, started + grace * 2) is None
    assert going.job_name is not None
    assert rj.worker_grace_ends([going], {going.job_name}, grace, started) is None
    done = ObservedRun(scheduled_time=SLOT, result="Succeeded", start_time=started,
                       workflow_id="wf", run_id="r1", job_name=going.job_name)  # fmt: skip
    assert rj.worker_grace_ends([done], set(), grace, started) is None
