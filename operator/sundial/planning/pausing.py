"""Why a ScheduledJob's backend must schedule nothing now: spec.suspend, a maintenance
window (spec.suspendUntil) or its failure policy (spec.failurePolicy). Pure; `now` is
passed in. docs/policies.md has the rules for users.

A pass (reconcile.py) asks `in_force` before it brings the backend in step and gives the
backend the spec as it is to be run (`held`: suspend true, with the pause's note), so both
backends pause for a window or a failure policy exactly as they do for spec.suspend: the
CronJob suspended, the Temporal schedule paused with Sundial's note, the slots meanwhile
passed over (suspended, not missed). Once the backend's runs are judged, `after_runs` says
whether they trip the failure policy, and `settled` puts the verdict into status: this
module is the one place that computes status.pause and owns the PausedByFailurePolicy
reason.

A failure pause is state (it outlives the runs that tripped it), kept in status.pause; it
lifts when the spec changes (its generation), when `kubectl sundial resume` names it
(RESUME_ANNOTATION holds its `since`), when failurePolicy.resumeAfter has passed, or when
a run succeeds (a run now, allowed while paused) enough times to recover
(monitoring.recoveryThreshold). The failures it counted are then set aside
(failuresBeforeResume): pausing again takes failurePolicy.pauseAfter new ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sundial.api import reasons
from sundial.api.models import (
    MonitoringSpec,
    PauseStatus,
    ScheduledJob,
    ScheduledJobStatus,
)
from sundial.planning.schedule import iso, parse_duration
from sundial.planning.status import condition, find_condition, with_condition

# `kubectl sundial resume` lifts a failure pause by writing its status.pause.since here:
# naming the pause (not a time of its own) makes the request exact and safe to repeat.
RESUME_ANNOTATION = "sundial.dev/resume"
# The start of the note a held spec carries to the backend (and Temporal's pause note).
FAILURE_NOTE = "failurePolicy"
WINDOW_NOTE = "suspendUntil"
# LAST RESULT under a failure pause: the Ready reason, where a user looks first.
PAUSED_BY_FAILURE_POLICY_RESULT = reasons.PAUSED_BY_FAILURE_POLICY


@dataclass(frozen=True)
class Verdict:
    """What holds the backend this pass, and what changed about the failure pause."""

    pause: PauseStatus | None
    failures_before_resume: int | None
    # A failure pause lifted by this pass: why (for its Event).
    lifted: str | None = None
    # The failure policy tripped by this pass's runs (the backend pauses on the next pass).
    tripped: bool = False
    # Lifted by this pass's runs (a run now that succeeded): the backend resumes on the next.
    recovered: bool = False

    @property
    def wake_at(self) -> datetime | None:
        """When the pause lifts by itself: the pass that lifts it is due then."""
        return self.pause.until if self.pause is not None else None


def in_force(sj: ScheduledJob, now: datetime) -> Verdict:
    """The pause in force for this pass, from the spec and the last status."""
    spec, status = sj.spec, sj.status
    previous = status.pause
    baseline = status.failures_before_resume
    lifted = None
    if previous is not None and previous.reason == "FailurePolicy":
        lifted = _lift_reason(sj, previous, now)
        if lifted is None:
            return Verdict(previous, baseline)
        baseline = status.consecutive_failures or None

    def since(reason: str) -> datetime:
        """When a pause of this kind began: kept while it goes on (one status write)."""
        if previous is not None and previous.reason == reason and previous.since is not None:
            return previous.since
        created = sj.metadata.creation_timestamp
        if reason == "MaintenanceWindow" and previous is None and sj.metadata.generation == 1:
            # The window came with the object: no backend ran a slot between its creation
            # and this pass, however late the pass (an operator down, a long queue), so the
            # window held them. A window added later begins here: until this pass the
            # backend ran its slots as usual.
            return min(created or now, now)
        return now

    if spec.suspend:
        note = f": {spec.suspend_note}" if spec.suspend_note else ""
        pause = PauseStatus(
            reason="Suspended", message=f"spec.suspend is true{note}", since=since("Suspended")
        )
        return Verdict(pause, baseline, lifted)
    if spec.suspend_until is not None and now < spec.suspend_until:
        note = f": {spec.suspend_note}" if spec.suspend_note else ""
        pause = PauseStatus(
            reason="MaintenanceWindow",
            message=f"maintenance window until {iso(spec.suspend_until)}{note}",
            since=since("MaintenanceWindow"),
            until=spec.suspend_until,
        )
        return Verdict(pause, baseline, lifted)
    return Verdict(None, baseline, lifted)


def _lift_reason(sj: ScheduledJob, pause: PauseStatus, now: datetime) -> str | None:
    status = sj.status
    if pause.generation is not None and sj.metadata.generation != pause.generation:
        return "the spec changed"
    if pause.since is not None and sj.metadata.annotations.get(RESUME_ANNOTATION) == iso(
        pause.since
    ):
        return f"resumed ({RESUME_ANNOTATION})"
    if pause.until is not None and now >= pause.until:
        return f"failurePolicy.resumeAfter passed at {iso(pause.until)}"
    return _recovery(sj, status)


def _recovery(sj: ScheduledJob, status: ScheduledJobStatus) -> str | None:
    """Why the streak no longer holds the job: runs succeeded since (a run now, allowed
    while paused), as many in a row as monitoring.recoveryThreshold asks."""
    recovery = (sj.spec.monitoring or MonitoringSpec()).recovery_threshold
    if not status.consecutive_failures and (status.consecutive_successes or 0) >= recovery:
        return f"{status.consecutive_successes} run(s) succeeded since (a run now)"
    return None


def held(sj: ScheduledJob, pause: PauseStatus | None) -> ScheduledJob:
    """The ScheduledJob as its backend is to run it: suspended, with the pause's note, while
    a maintenance window or the failure policy holds it (spec.suspend already says so)."""
    if pause is None or pause.reason == "Suspended":
        return sj
    if pause.reason == "FailurePolicy":
        note = f"{FAILURE_NOTE}: {pause.message}"
    else:
        until = iso(pause.until) if pause.until else ""
        own = f": {sj.spec.suspend_note}" if sj.spec.suspend_note else ""
        note = f"{WINDOW_NOTE} {until}{own}"
    note = note[:256]
    spec = sj.spec.model_copy(update={"suspend": True, "suspend_note": note})
    return sj.model_copy(update={"spec": spec})


def is_held_note(note: str | None) -> bool:
    """The spec's suspendNote is one `held` wrote (a window or the failure policy)."""
    return bool(note) and str(note).startswith((f"{FAILURE_NOTE}: ", f"{WINDOW_NOTE} "))


def after_runs(
    sj: ScheduledJob, verdict: Verdict, judged: ScheduledJobStatus, now: datetime
) -> Verdict:
    """Whether the runs judged this pass (`judged`: the status they produced) trip the
    failure policy: pauseAfter consecutive failures since the last resume."""
    failures = judged.consecutive_failures or 0
    baseline = verdict.failures_before_resume
    if baseline is not None and failures < baseline:
        baseline = None  # a success ended the streak the resume set aside
    verdict = replace(verdict, failures_before_resume=baseline)
    pause = verdict.pause
    if pause is not None and pause.reason == "FailurePolicy":
        recovered = _recovery(sj, judged)
        if recovered is not None:
            return Verdict(None, None, recovered, recovered=True)
    policy = sj.spec.failure_policy
    if policy is None or pause is not None:
        return verdict
    counted = failures - (baseline or 0)
    if counted < policy.pause_after:
        return verdict
    failed = [r for r in judged.recent_runs if r.result in ("Failed", "TimedOut")]
    tripped_by = failed[0].scheduled_time if failed else None
    last = f", the last scheduled for {iso(tripped_by)}" if tripped_by else ""
    until = now + parse_duration(policy.resume_after) if policy.resume_after else None
    lifts = (
        f"resumes by itself at {iso(until)}" if until else "resume with `kubectl sundial resume`"
    )
    pause = PauseStatus(
        reason="FailurePolicy",
        message=f"paused after {counted} consecutive failed runs{last} "
        f"(failurePolicy.pauseAfter {policy.pause_after}); {lifts}, a spec change, or a run "
        "now that succeeds",
        since=now,
        until=until,
        tripped_by=tripped_by,
        failures=counted,
        generation=sj.metadata.generation,
    )
    return Verdict(pause, None, verdict.lifted, tripped=True)


def settled(
    sj: ScheduledJob, judged: ScheduledJobStatus, verdict: Verdict, now: datetime
) -> ScheduledJobStatus:
    """The status with the verdict in it: status.pause and the set-aside failures; under a
    failure pause the backend holds (from the pass after the trip, which pauses it), LAST
    RESULT and Ready's reason say so; a window already over says when it ended."""
    update: dict[str, object] = {
        "pause": verdict.pause,
        "failures_before_resume": verdict.failures_before_resume,
    }
    ready = find_condition(judged.conditions, reasons.READY)
    generation = sj.metadata.generation
    pause = verdict.pause
    if pause is not None and pause.reason == "FailurePolicy" and not verdict.tripped:
        update["last_result"] = PAUSED_BY_FAILURE_POLICY_RESULT
        update["next_run_times"] = []
        if ready is not None and ready.status == "True":
            paused = condition(
                sj.status.conditions, reasons.READY, "True", reasons.PAUSED_BY_FAILURE_POLICY,
                pause.message, now=now, generation=generation,
            )  # fmt: skip
            update["conditions"] = with_condition(judged.conditions, paused)
    elif pause is None and sj.spec.suspend_until is not None and ready is not None:
        ended = f"the maintenance window ended at {iso(sj.spec.suspend_until)} (spec.suspendUntil)"
        if ended not in ready.message:
            noted = ready.model_copy(update={"message": f"{ready.message}; {ended}"})
            update["conditions"] = with_condition(judged.conditions, noted)
    return judged.model_copy(update=update)
