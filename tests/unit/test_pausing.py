"""planning/pausing.py: which pause holds a ScheduledJob (spec.suspend, a maintenance
window, the failure policy), what trips the failure policy, and every way its pause lifts.
Pure: `now` is passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sundial.api import reasons
from sundial.api.models import PauseStatus, ScheduledJob, ScheduledJobStatus
from sundial.planning import pausing
from sundial.planning.schedule import iso
from sundial.planning.status import find_condition
from sundial.planning.temporal_schedule import is_suspend_note, suspend_note

NOW = datetime(2026, 12, 6, 5, 0, tzinfo=UTC)
SLOT = NOW - timedelta(minutes=1)


def scheduledjob(
    *, generation: int = 4, annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None, created: datetime = NOW - timedelta(days=30),
    **spec: Any,
) -> ScheduledJob:  # fmt: skip
    return ScheduledJob.model_validate({
        "metadata": {"name": "invoices", "namespace": "shop", "generation": generation,
                     "annotations": annotations or {}, "creationTimestamp": iso(created)},
        "spec": {"schedule": "* * * * *", "job": {"image": "registry.example/a:1"}, **spec},
        "status": status or {},
    })  # fmt: skip


def judged(failures: int, successes: int = 0, *, ready: str = "True") -> ScheduledJobStatus:
    """The status a backend's pass built: the streaks, the newest failed run, Ready."""
    runs = [{"scheduledTime": iso(SLOT), "result": "Failed", "completionTime": iso(NOW)}]
    return ScheduledJobStatus.model_validate({
        "consecutiveFailures": failures, "consecutiveSuccesses": successes,
        "recentRuns": runs if failures else [], "lastResult": "Failed" if failures else None,
        "nextRunTimes": [iso(NOW + timedelta(minutes=1))],
        "conditions": [{"type": reasons.READY, "status": ready, "reason": reasons.RECONCILED,
                        "message": "CronJob is in step with the spec",
                        "lastTransitionTime": iso(NOW)}],
    })  # fmt: skip


def tripped(sj: ScheduledJob, failures: int) -> pausing.Verdict:
    return pausing.after_runs(sj, pausing.in_force(sj, NOW), judged(failures), NOW)


def paused_status(pause: PauseStatus, failures: int = 3, successes: int = 0) -> dict[str, Any]:
    return {"pause": pause.model_dump(mode="json", by_alias=True, exclude_none=True),
            "consecutiveFailures": failures, "consecutiveSuccesses": successes}  # fmt: skip


def test_nothing_holds_a_job_without_suspend_window_or_policy() -> None:
    verdict = pausing.in_force(scheduledjob(), NOW)
    assert verdict.pause is None
    assert verdict.wake_at is None
    assert pausing.held(scheduledjob(), None).spec.suspend is False


def test_the_failure_policy_trips_at_pause_after_consecutive_failures_not_before() -> None:
    sj = scheduledjob(failurePolicy={"pauseAfter": 3})
    assert not tripped(sj, 2).tripped
    verdict = tripped(sj, 3)
    assert verdict.tripped
    assert verdict.pause is not None
    assert verdict.pause.reason == "FailurePolicy"
    assert verdict.pause.tripped_by == SLOT
    assert verdict.pause.failures == 3
    assert verdict.pause.generation == 4
    assert verdict.pause.until is None
    assert iso(SLOT) in verdict.pause.message
    assert "kubectl sundial resume" in verdict.pause.message


def test_without_a_policy_no_number_of_failures_pauses() -> None:
    assert not tripped(scheduledjob(), 50).tripped


def test_resume_after_sets_when_the_pause_lifts_by_itself() -> None:
    verdict = tripped(scheduledjob(failurePolicy={"pauseAfter": 1, "resumeAfter": "30m"}), 1)
    assert verdict.pause is not None
    assert verdict.pause.until == NOW + timedelta(minutes=30)
    assert verdict.wake_at == NOW + timedelta(minutes=30)


def test_a_failure_pause_holds_the_backend_as_suspend_would_with_its_own_note() -> None:
    sj = scheduledjob(failurePolicy={"pauseAfter": 1})
    pause = tripped(sj, 1).pause
    paused = scheduledjob(failurePolicy={"pauseAfter": 1}, status=paused_status(pause, 1))
    verdict = pausing.in_force(paused, NOW + timedelta(minutes=5))
    assert verdict.pause == pause
    assert verdict.lifted is None
    run_as = pausing.held(paused, verdict.pause)
    assert run_as.spec.suspend is True
    note = suspend_note(run_as.spec)
    assert note.startswith("Paused by Sundial: failurePolicy: paused after 1 consecutive")
    assert is_suspend_note(note)  # Sundial's own pause: lifted by Sundial when it ends
    assert not is_suspend_note("paused by hand: failurePolicy: x")


def test_the_pause_says_so_in_last_result_ready_and_next_runs_once_the_backend_holds() -> None:
    sj = scheduledjob(failurePolicy={"pauseAfter": 2})
    verdict = tripped(sj, 2)
    # The pass that trips it has not paused the backend yet: only status.pause says so.
    first = pausing.settled(sj, judged(2), verdict, NOW)
    assert first.pause == verdict.pause
    assert first.last_result == "Failed"
    ready = find_condition(first.conditions, reasons.READY)
    assert ready is not None
    assert ready.reason == reasons.RECONCILED
    # The next pass holds the backend (suspended, paused): now they say so.
    assert verdict.pause is not None
    paused = scheduledjob(failurePolicy={"pauseAfter": 2}, status=paused_status(verdict.pause, 2))
    held = pausing.after_runs(paused, pausing.in_force(paused, NOW), judged(2), NOW)
    status = pausing.settled(paused, judged(2), held, NOW)
    ready = find_condition(status.conditions, reasons.READY)
    assert status.last_result == reasons.PAUSED_BY_FAILURE_POLICY
    assert ready is not None
    assert ready.reason == reasons.PAUSED_BY_FAILURE_POLICY
    assert ready.status == "True"
    assert status.next_run_times == []
    assert status.pause == verdict.pause


def _lifted(sj_args: dict[str, Any], *, now: datetime = NOW, **status: Any) -> pausing.Verdict:
    pause = tripped(scheduledjob(failurePolicy={"pauseAfter": 3}), 3).pause
    assert pause is not None
    sj = scheduledjob(failurePolicy={"pauseAfter": 3}, **sj_args,
                      status=paused_status(pause, **status))  # fmt: skip
    return pausing.in_force(sj, now)


def test_a_spec_change_lifts_the_failure_pause() -> None:
    verdict = _lifted({"generation": 5})
    assert verdict.pause is None
    assert verdict.lifted == "the spec changed"
    assert verdict.failures_before_resume == 3


def test_resume_naming_the_pause_lifts_it_and_a_stale_one_does_not() -> None:
    verdict = _lifted({"annotations": {pausing.RESUME_ANNOTATION: iso(NOW)}})
    assert verdict.pause is None
    assert verdict.lifted is not None
    stale = _lifted({"annotations": {pausing.RESUME_ANNOTATION: iso(NOW - timedelta(days=1))}})
    assert stale.pause is not None
    assert stale.lifted is None


def test_a_run_now_that_succeeds_lifts_it_as_recovery() -> None:
    verdict = _lifted({}, failures=0, successes=1)
    assert verdict.pause is None
    assert verdict.lifted is not None
    assert "succeeded" in verdict.lifted
    assert verdict.failures_before_resume is None


def test_resume_after_lifts_it_when_its_time_comes() -> None:
    pause = tripped(scheduledjob(failurePolicy={"pauseAfter": 1, "resumeAfter": "1h"}), 1).pause
    assert pause is not None
    sj = scheduledjob(failurePolicy={"pauseAfter": 1, "resumeAfter": "1h"},
                      status=paused_status(pause, 1))  # fmt: skip
    assert pausing.in_force(sj, NOW + timedelta(minutes=59)).pause is not None
    assert pausing.in_force(sj, NOW + timedelta(hours=1)).pause is None


def test_after_a_resume_it_takes_pause_after_new_failures_to_pause_again() -> None:
    verdict = _lifted({"generation": 5})
    sj = scheduledjob(generation=5, failurePolicy={"pauseAfter": 3})
    assert not pausing.after_runs(sj, verdict, judged(5), NOW).tripped
    again = pausing.after_runs(sj, verdict, judged(6), NOW)
    assert again.tripped
    assert again.pause is not None
    assert again.pause.failures == 3


def test_a_success_after_the_resume_ends_the_set_aside_streak() -> None:
    verdict = _lifted({"generation": 5})
    sj = scheduledjob(generation=5, failurePolicy={"pauseAfter": 3})
    after_success = pausing.after_runs(sj, verdict, judged(0, 1), NOW)
    assert after_success.failures_before_resume is None
    assert pausing.after_runs(sj, after_success, judged(3), NOW).tripped


def test_a_maintenance_window_holds_until_its_time_then_lets_go() -> None:
    until = NOW + timedelta(hours=2)
    sj = scheduledjob(suspendUntil=iso(until), suspendNote="db migration")
    verdict = pausing.in_force(sj, NOW)
    assert verdict.pause is not None
    assert verdict.pause.reason == "MaintenanceWindow"
    assert verdict.pause.until == until
    assert verdict.wake_at == until
    run_as = pausing.held(sj, verdict.pause)
    assert run_as.spec.suspend
    assert run_as.spec.suspend_note == f"suspendUntil {iso(until)}: db migration"
    assert (
        suspend_note(run_as.spec) == f"Paused by Sundial: suspendUntil {iso(until)}: db migration"
    )
    assert pausing.in_force(sj, until).pause is None


def test_a_window_keeps_its_start_across_passes() -> None:
    until = NOW + timedelta(hours=2)
    first = pausing.in_force(scheduledjob(suspendUntil=iso(until)), NOW).pause
    assert first is not None
    status = {"pause": first.model_dump(mode="json", by_alias=True, exclude_none=True)}
    later = pausing.in_force(scheduledjob(suspendUntil=iso(until), status=status),
                             NOW + timedelta(minutes=7)).pause  # fmt: skip
    assert later == first


def test_a_window_made_with_the_object_holds_from_its_creation_however_late_the_pass() -> None:
    """The object came with its window (generation 1): no backend ran a slot between its
    creation and the operator's first pass, so the window held them, whatever delayed the
    pass (an operator down, a long queue). A window added later begins at the pass that
    sees it: until then the backend ran the slots as usual."""
    created = NOW - timedelta(minutes=3)
    until = NOW + timedelta(hours=2)
    new = scheduledjob(generation=1, created=created, suspendUntil=iso(until))
    pause = pausing.in_force(new, NOW).pause
    assert pause is not None
    assert pause.since == created
    added = scheduledjob(generation=2, created=created, suspendUntil=iso(until))
    pause = pausing.in_force(added, NOW).pause
    assert pause is not None
    assert pause.since == NOW


def test_a_window_already_over_has_no_effect_and_ready_says_when_it_ended() -> None:
    sj = scheduledjob(suspendUntil=iso(NOW - timedelta(minutes=1)))
    verdict = pausing.in_force(sj, NOW)
    assert verdict.pause is None
    ready = find_condition(pausing.settled(sj, judged(0), verdict, NOW).conditions, reasons.READY)
    assert ready is not None
    assert "maintenance window ended at" in ready.message


def test_suspend_is_its_own_pause_and_the_backend_needs_no_held_spec() -> None:
    sj = scheduledjob(suspend=True, suspendNote="ask #data")
    verdict = pausing.in_force(sj, NOW)
    assert verdict.pause is not None
    assert verdict.pause.reason == "Suspended"
    assert "ask #data" in verdict.pause.message
    assert pausing.held(sj, verdict.pause) is sj


def test_while_held_no_number_of_failures_trips_the_policy() -> None:
    sj = scheduledjob(suspendUntil=iso(NOW + timedelta(hours=1)), failurePolicy={"pauseAfter": 1})
    verdict = pausing.after_runs(sj, pausing.in_force(sj, NOW), judged(4), NOW)
    assert not verdict.tripped
    assert verdict.pause is not None
    assert verdict.pause.reason == "MaintenanceWindow"


def test_a_run_now_that_succeeds_lifts_the_pause_in_the_pass_that_sees_it() -> None:
    """The pass that judges the successful run lifts the pause at once (no later event need
    come: a paused job has no next slot to wake it)."""
    pause = tripped(scheduledjob(failurePolicy={"pauseAfter": 2}), 2).pause
    assert pause is not None
    sj = scheduledjob(failurePolicy={"pauseAfter": 2}, status=paused_status(pause, 2))
    held = pausing.in_force(sj, NOW)
    assert held.pause is not None
    verdict = pausing.after_runs(sj, held, judged(0, 1), NOW)
    assert verdict.pause is None
    assert verdict.recovered
    assert verdict.lifted is not None
    assert "succeeded" in verdict.lifted
    still = pausing.after_runs(sj, held, judged(3), NOW)
    assert still.pause == pause
    assert not still.recovered
