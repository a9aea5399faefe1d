"""Run outcomes, durations, lateness and the failing/recovering streaks (runs.py), and the
conditions built from them (status.py). Pure: `now` is passed in."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sundial.api.models import ScheduledJob, ScheduledJobStatus
from sundial.planning import status as st
from sundial.planning.missed import JobRecord
from sundial.planning.runs import (
    MAX_COUNTED_RUNS,
    Limits,
    ObservedRun,
    RunHistory,
    job_run,
    limits,
    pod_span,
    record,
    run_history,
    unseen_actions,
    workflow_run,
)

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def at(minutes: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def job(
    minute: int, *, ok: bool | None = None, reason: str | None = None, took: float = 5.0,
    deleted: bool = False,
) -> JobRecord:  # fmt: skip
    """The Job of the slot `minute` minutes after T0, started 2 s late."""
    start = at(minute, 2)
    return JobRecord(
        scheduled_time=at(minute),
        created=at(minute, 1),
        start_time=start,
        finished_at=start + timedelta(seconds=took) if ok is not None else None,
        succeeded=ok is True,
        failed=ok is False,
        name=f"nightly-{minute}",
        reason=reason if ok is False else None,
        message="boom" if ok is False else None,
        deleted=deleted,
    )


def sj(**spec: Any) -> ScheduledJob:
    spec.setdefault("schedule", "* * * * *")
    spec.setdefault("job", {"image": "busybox"})
    return ScheduledJob.model_validate(
        {"metadata": {"name": "nightly", "namespace": "team", "generation": 1}, "spec": spec}
    )


def passes(
    jobs_per_pass: list[list[JobRecord]], run_limits: Limits | None = None, *, start: float = 10
) -> tuple[ScheduledJobStatus, list[RunHistory]]:
    """Each pass sees the Jobs given (what the watch cache holds then), a minute apart,
    with the previous pass's status."""
    status = ScheduledJobStatus()
    histories = []
    for index, jobs in enumerate(jobs_per_pass):
        history = run_history(
            status, [job_run(j) for j in jobs], run_limits or Limits(), at(start + index),
            complete=True,
        )  # fmt: skip
        histories.append(history)
        status = status.model_copy(
            update={
                "recent_runs": history.recent_runs,
                "consecutive_failures": history.consecutive_failures,
                "consecutive_successes": history.consecutive_successes,
                "last_successful_time": history.last_successful_time,
                "last_failed_time": history.last_failed_time,
                "counted_runs": history.counted_runs,
                "counted_since": history.counted_since,
            }
        )
    return status, histories


def test_a_job_becomes_a_run_with_its_result_and_reason() -> None:
    assert job_run(job(0, ok=True)).result == "Succeeded"
    failed = job_run(job(0, ok=False, reason="BackoffLimitExceeded"))
    assert (failed.result, failed.reason, failed.message) == ("Failed", "BackoffLimitExceeded",
                                                              "boom")  # fmt: skip
    # activeDeadlineSeconds is the backend's own run timeout.
    assert job_run(job(0, ok=False, reason="DeadlineExceeded")).result == "TimedOut"
    assert job_run(job(0)).result == "Running"
    cancelled = job_run(job(0, deleted=True))
    assert (cancelled.result, cancelled.reason) == ("Cancelled", "JobDeleted")
    # A Job deleted after it ended (TTL, history limits) keeps its result.
    assert job_run(job(0, ok=True, deleted=True)).result == "Succeeded"


def test_durations_and_lateness_come_from_the_run_times() -> None:
    run = record(job_run(job(3, ok=True, took=42.5)), Limits(), at(10))
    assert run.start_time == at(3, 2)
    assert run.completion_time == at(3, 44.5)
    assert run.duration_seconds == 42.5
    assert run.start_delay_seconds == 2.0
    assert run.late is None
    strict = Limits(start_grace=timedelta(seconds=1))
    assert record(job_run(job(3, ok=True)), strict, at(10)).late is True


def test_a_run_past_max_run_duration_is_timed_out_while_it_runs_and_after() -> None:
    run_limits = Limits(max_run_duration=timedelta(seconds=30))
    within = record(job_run(job(0)), run_limits, at(0, 2 + 29))
    assert within.result == "Running"
    going = record(job_run(job(0)), run_limits, at(0, 2 + 31))
    assert (going.result, going.reason, going.completion_time) == (
        "TimedOut", "MaxRunDurationExceeded", None)  # fmt: skip
    assert "has been running longer" in (going.message or "")
    ended = record(job_run(job(0, ok=True, took=45)), run_limits, at(5))
    assert (ended.result, ended.duration_seconds) == ("TimedOut", 45.0)
    # A failure stays a failure, whatever its length.
    assert record(job_run(job(0, ok=False, took=45)), run_limits, at(5)).result == "Failed"


def test_runs_stay_listed_after_their_jobs_are_gone_newest_first_within_the_limit() -> None:
    status, _ = passes(
        [[job(0, ok=True)], [job(1, ok=True)], [job(2, ok=False)], [job(3)]],
        Limits(recent_runs=3),
    )
    assert [r.scheduled_time for r in status.recent_runs] == [at(3), at(2), at(1)]
    assert [r.result for r in status.recent_runs] == ["Running", "Failed", "Succeeded"]


def test_each_ended_run_moves_the_streaks_once() -> None:
    # The same failed Job seen in three passes (kept by failedJobsHistoryLimit) counts once.
    status, histories = passes(
        [[job(0, ok=False)], [job(0, ok=False)], [job(0, ok=False), job(1, ok=False)]]
    )
    assert status.consecutive_failures == 2
    assert [len(h.newly_finished) for h in histories] == [1, 0, 1]
    assert status.last_failed_time == at(1, 7)
    status, _ = passes([[job(0, ok=False)], [job(0, ok=False), job(1, ok=True)]])
    assert (status.consecutive_failures, status.consecutive_successes) == (0, 1)
    assert status.last_successful_time == at(1, 7)


def test_an_old_job_that_fell_off_the_list_is_not_counted_again() -> None:
    # recentRunsLimit 1: the failed Job of minute 0 is still kept by the history limits
    # but no longer listed; it ended before what was counted since, so it is old news.
    status, histories = passes(
        [[job(0, ok=False)], [job(0, ok=False), job(1, ok=True)], [job(0, ok=False),
                                                                   job(1, ok=True)]],
        Limits(recent_runs=1),
    )  # fmt: skip
    assert [len(h.newly_finished) for h in histories] == [1, 1, 0]
    assert (status.consecutive_failures, status.consecutive_successes) == (0, 1)


def test_a_run_that_ended_before_one_already_counted_is_still_counted_once() -> None:
    # Under Allow runs end out of order: minute 1's Job (5 s) is seen ended first, then
    # minute 0's (a long one that ended before it) shows up ended in a later pass, off
    # the list (recentRunsLimit 1). It was never counted: it counts, once.
    long_one = job(0, ok=False, took=60)  # ended at 01:02
    late_seen = job(1, ok=True, took=65)  # ended at 02:07
    status, histories = passes(
        [[late_seen], [long_one, late_seen], [long_one, late_seen], [long_one]],
        Limits(recent_runs=1),
    )
    assert [len(h.newly_finished) for h in histories] == [1, 1, 0, 0]
    assert (status.consecutive_failures, status.consecutive_successes) == (1, 0)
    assert status.last_failed_time == at(1, 2)
    assert status.last_successful_time == at(2, 7)


def test_the_counted_runs_memory_is_bounded_and_its_floor_keeps_old_ends_counted() -> None:
    # Sixty runs seen in one pass, sixty more in the next: each counts once, the memory
    # keeps the latest ends only, and a run ending at or before what it let go is old news.
    first = [job(minute, ok=True) for minute in range(60)]
    both = first + [job(minute, ok=True) for minute in range(60, 120)]
    status, histories = passes([first, both, both], Limits(recent_runs=3))
    assert [len(h.newly_finished) for h in histories] == [60, 60, 0]
    assert status.consecutive_successes == 120
    assert len(status.counted_runs) == MAX_COUNTED_RUNS
    assert status.counted_since == job(119 - MAX_COUNTED_RUNS, ok=True).finished_at


def test_a_status_from_before_the_counted_runs_memory_keeps_the_watermark() -> None:
    # Written by an older operator: no countedRuns; a Job ended before the watermark and
    # not listed was counted then (the old rule), and is not counted again.
    status, _ = passes([[job(0, ok=False)], [job(0, ok=False), job(1, ok=True)]],
                       Limits(recent_runs=1))  # fmt: skip
    legacy = status.model_copy(update={"counted_runs": [], "counted_since": None})
    history = run_history(legacy, [job_run(job(0, ok=False)), job_run(job(1, ok=True))],
                          Limits(recent_runs=1), at(20), complete=True)  # fmt: skip
    assert history.newly_finished == []
    assert history.counted_since == status.last_successful_time


def test_a_listed_run_whose_job_vanished_unseen_is_unknown_not_guessed() -> None:
    status, _ = passes([[job(0)], []])
    assert status.recent_runs[0].result == "Unknown"
    assert status.recent_runs[0].reason == "NotObserved"
    # The temporal backend looks runs up within a budget: what it did not look up stays.
    history = run_history(status.model_copy(update={"recent_runs": [
        status.recent_runs[0].model_copy(update={"result": "Running"})]}), [], Limits(),
        at(5), complete=False)  # fmt: skip
    assert history.recent_runs[0].result == "Running"


def test_a_run_going_on_wakes_the_pass_just_after_it_crosses_max_run_duration() -> None:
    history = run_history(ScheduledJobStatus(), [job_run(job(0))],
                          Limits(max_run_duration=timedelta(seconds=30)), at(0, 10),
                          complete=True)  # fmt: skip
    assert history.wake_at is not None
    assert at(0, 32) < history.wake_at <= at(0, 34)
    assert history.running == 1


def test_workflow_statuses_map_to_the_same_results() -> None:
    def result(status: str | None, **extra: Any) -> ObservedRun:
        return workflow_run("wf-1", at(0), status=status, start_time=at(0, 1),
                            close_time=at(0, 9), **extra)  # fmt: skip

    assert result("COMPLETED").result == "Succeeded"
    failed = result("FAILED", failure_type="PaymentDeclined", failure_message="card expired")
    assert (failed.result, failed.reason, failed.message) == ("Failed", "PaymentDeclined",
                                                              "card expired")  # fmt: skip
    timed_out = result("TIMED_OUT")
    assert (timed_out.result, timed_out.reason) == ("TimedOut", "WorkflowTimedOut")
    assert result("TERMINATED").result == "Terminated"
    assert result("CANCELED").result == "Cancelled"
    assert result("RUNNING").completion_time is None
    assert (result(None).result, result(None).reason) == ("Unknown", "NotFound")


def test_limits_default_per_backend_and_read_the_spec() -> None:
    assert limits(sj().spec) == Limits()
    jittered = sj(backend="temporal", jitter="30s", workflow={"type": "T", "taskQueue": "q"},
                  job=None)  # fmt: skip
    assert limits(jittered.spec).start_grace == timedelta(seconds=90)
    custom = sj(monitoring={"startGrace": "5s", "maxRunDuration": "2m", "failureThreshold": 3,
                            "recoveryThreshold": 2, "recentRunsLimit": 4})  # fmt: skip
    assert limits(custom.spec) == Limits(timedelta(seconds=5), timedelta(minutes=2), 3, 2, 4)


def failing_condition(outcomes: list[bool], run_limits: Limits) -> list[tuple[str, str]]:
    """RunsFailing (status, reason) after each run of `outcomes` (True: it succeeded), one
    run per pass, each pass seeing the last three Jobs and the previous status."""
    status, conditions = ScheduledJobStatus(), []
    seen: list[JobRecord] = []
    after: list[tuple[str, str]] = []
    for minute, ok in enumerate(outcomes):
        seen.append(job(minute, ok=ok))
        now = at(minute + 1)
        history = run_history(status, [job_run(j) for j in seen[-3:]], run_limits, now,
                              complete=True)  # fmt: skip
        made = st.runs_failing(conditions, history, now=now, generation=1)
        conditions = st.with_condition(conditions, made)
        status = status.model_copy(update={
            "recent_runs": history.recent_runs,
            "consecutive_failures": history.consecutive_failures,
            "consecutive_successes": history.consecutive_successes,
            "last_successful_time": history.last_successful_time,
            "last_failed_time": history.last_failed_time,
        })  # fmt: skip
        after.append((made.status, made.reason))
    return after


def test_runs_failing_needs_failure_threshold_failures_and_recovery_threshold_successes() -> None:
    thresholds = Limits(failure_threshold=2, recovery_threshold=2)
    assert failing_condition([False, True, False, False, True, False, True, True], thresholds) == [
        ("False", "BelowThreshold"),  # one failure: under the threshold
        ("False", "NoFailures"),
        ("False", "BelowThreshold"),
        ("True", "ConsecutiveFailures"),  # two in a row
        ("True", "ConsecutiveFailures"),  # one success is not a recovery
        ("True", "ConsecutiveFailures"),  # a failure again: still failing
        ("True", "ConsecutiveFailures"),
        ("False", "Recovered"),  # two successes in a row
    ]
    # The defaults: one failure fails, one success recovers.
    assert [s for s, _ in failing_condition([False, True], Limits())] == ["True", "False"]


def test_the_failing_message_names_the_latest_failure_and_its_reason() -> None:
    history = run_history(ScheduledJobStatus(), [job_run(job(0, ok=False,
                                                             reason="BackoffLimitExceeded"))],
                          Limits(), at(2), complete=True)  # fmt: skip
    made = st.runs_failing([], history, now=at(2), generation=1)
    assert "2026-12-01T10:00:00Z" in made.message
    assert "Failed (BackoffLimitExceeded): boom" in made.message


def test_run_too_long_is_true_while_a_run_overruns_and_until_a_later_one_is_within() -> None:
    run_limits = Limits(max_run_duration=timedelta(seconds=30))

    def too_long(observed: list[JobRecord], now: datetime) -> tuple[str, str] | None:
        history = run_history(ScheduledJobStatus(), [job_run(j) for j in observed], run_limits,
                              now, complete=True)  # fmt: skip
        made = st.run_too_long([], history, now=now, generation=1)
        return None if made is None else (made.status, made.reason)

    assert too_long([job(0)], at(0, 20)) == ("False", "WithinMaxRunDuration")
    assert too_long([job(0)], at(0, 40)) == ("True", "RunningTooLong")
    assert too_long([job(0, ok=True, took=45)], at(2)) == ("True", "LastRunTooLong")
    assert too_long([job(0, ok=True, took=45), job(1, ok=True, took=5)], at(2)) == (
        "False", "WithinMaxRunDuration")  # fmt: skip
    # No maxRunDuration, no condition.
    history = run_history(ScheduledJobStatus(), [job_run(job(0))], Limits(), at(5),
                          complete=True)  # fmt: skip
    assert st.run_too_long([], history, now=at(5), generation=1) is None


def test_last_result_is_the_newest_run_or_suspended() -> None:
    history = run_history(ScheduledJobStatus(), [job_run(job(0, ok=False)), job_run(job(1))],
                          Limits(), at(2), complete=True)  # fmt: skip
    assert st.last_result(sj(), history.recent_runs) == "Running"
    assert st.last_result(sj(suspend=True), history.recent_runs) == "Suspended"
    assert st.last_result(sj(), []) is None


def test_a_jobs_pods_give_the_span_it_really_ran() -> None:
    def pod(start: str, *finished: str) -> dict[str, Any]:
        return {"status": {"startTime": start, "containerStatuses": [
            {"state": {"terminated": {"finishedAt": f}}} for f in finished]}}  # fmt: skip

    first = pod("2026-12-01T10:00:03Z", "2026-12-01T10:00:05Z")
    retry = pod("2026-12-01T10:00:15Z", "2026-12-01T10:00:20Z", "2026-12-01T10:00:19Z")
    retried = [first, retry]
    assert pod_span(retried) == (at(0, 3), at(0, 20))
    assert pod_span([]) is None  # gone with the Job (a TTL of 0): the Job's times stand
    assert pod_span([{"status": {"startTime": "2026-12-01T10:00:03Z"}}]) is None


def test_an_ended_runs_record_is_final() -> None:
    first = run_history(ScheduledJobStatus(), [job_run(job(0, ok=True))], Limits(), at(2),
                        complete=True)  # fmt: skip
    pods_times = first.recent_runs[0].model_copy(update={"duration_seconds": 4.0})
    status = ScheduledJobStatus(recent_runs=[pods_times],
                                last_successful_time=first.last_successful_time)  # fmt: skip
    again = run_history(status, [job_run(job(0, ok=True))], Limits(), at(3), complete=True)
    assert again.recent_runs[0].duration_seconds == 4.0
    assert again.newly_finished == []


def test_a_run_now_that_waited_by_the_policy_is_late_only_by_its_own_start() -> None:
    """Issue 25, item 17: under Forbid a run now waits while a run is going. Received at
    10:01:00 while the slot's run of 10:00 went on until 10:03:00, its Job started at
    10:03:04: it could start at 10:03:00, and was 4 s late, not 124 s (the wait is the
    policy at work). Without a wait (Allow, or nothing running) it is late from when it was
    received."""
    slot_run = job(0, ok=True, took=178)  # 10:00:02 to 10:03:00
    requested = ObservedRun(
        scheduled_time=at(1), result="Running", start_time=at(3, 4), job_name="nightly-r1",
        requested="RunNow/deploy-1",
    )  # fmt: skip

    def delay(spec: dict[str, Any], runs: list[ObservedRun]) -> tuple[float | None, bool | None]:
        history = run_history(ScheduledJobStatus(), runs, limits(sj(**spec).spec), at(4),
                              complete=True)  # fmt: skip
        listed = next(r for r in history.recent_runs if r.requested == "RunNow/deploy-1")
        return listed.start_delay_seconds, listed.late

    assert delay({"concurrencyPolicy": "Forbid"}, [job_run(slot_run), requested]) == (4.0, None)
    assert delay({"concurrencyPolicy": "Replace"}, [job_run(slot_run), requested]) == (4.0, None)
    # Allow: it never waits, so a slow start is its own.
    assert delay({"concurrencyPolicy": "Allow"}, [job_run(slot_run), requested]) == (124.0, True)
    # Nothing ended while it waited: late from its request.
    assert delay({"concurrencyPolicy": "Forbid"}, [requested]) == (124.0, True)
    # Once its run is listed, a later pass (the Job that ran before gone) keeps the figure.
    forbid = limits(sj(concurrencyPolicy="Forbid").spec)
    history = run_history(ScheduledJobStatus(), [job_run(slot_run), requested], forbid, at(4),
                          complete=True)  # fmt: skip
    status = ScheduledJobStatus(recent_runs=history.recent_runs)
    ended = replace(requested, result="Succeeded", completion_time=at(3, 9))
    later = run_history(status, [ended], forbid, at(5), complete=True)
    listed = next(r for r in later.recent_runs if r.requested == "RunNow/deploy-1")
    assert (listed.start_delay_seconds, listed.late) == (4.0, None)


def test_runs_the_backend_could_not_see_are_stated_not_dropped() -> None:
    # Jobs deleted before a pass read them, beyond what the cache keeps: counted apart.
    history = run_history(ScheduledJobStatus(unseen_runs=2), [job_run(job(0, ok=True))],
                          Limits(), at(5), complete=True, unseen=3)  # fmt: skip
    assert (history.unseen_runs, history.unseen_added) == (5, 3)
    assert history.consecutive_successes == 1


def test_temporal_actions_whose_runs_temporal_no_longer_has_are_stated_not_dropped() -> None:
    # Temporal took 15 actions since status.seenActions (5 -> 20) and still has 10 of the
    # schedule's executions: the other 5 went past its retention before a pass saw them.
    assert unseen_actions(5, 20, kept=10) == 5
    # Everything still there (old executions pad the count): no gap claimed.
    assert unseen_actions(5, 20, kept=15) == 0
    assert unseen_actions(5, 20, kept=400) == 0
    # No baseline (a status from before seenActions) or a count that went back (a new
    # schedule): nothing claimed.
    assert unseen_actions(None, 20, kept=0) == 0
    assert unseen_actions(30, 4, kept=0) == 0
    # Stated once: the next pass starts from the count written with it.
    assert unseen_actions(20, 20, kept=10) == 0
    status = ScheduledJobStatus(unseen_runs=1)
    history = run_history(status, [], Limits(), at(5), complete=False,
                          unseen=unseen_actions(5, 20, kept=10))  # fmt: skip
    assert (history.unseen_runs, history.unseen_added) == (6, 5)
    assert (history.consecutive_successes, history.consecutive_failures) == (0, 0)
