"""The kubernetes backend's look beyond the watch cache (issue 25): after an outage of the
controller manager that the operator did not watch (it was down too), and for a Forbid skip
whose times round to the slot, the controller's Events and the Jobs the API keeps decide the
slots, as the pure judge says, given what the backend gathers (planning/cronjob_evidence)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cronjob_judging import judged as judged_by_backend
from sundial.api.models import ScheduledJob, ScheduledJobSpec
from sundial.planning.missed import timetable_hash
from sundial.watchcache import WatchCache

M0 = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
M1, M2 = M0 + timedelta(minutes=1), M0 + timedelta(minutes=2)
# The operator came back at 10:02:35, after the controller (10:02:20), and looks at 10:02:40.
RESTART = M2 + timedelta(seconds=35)
NOW = M2 + timedelta(seconds=40)
OWNER = ("shop", "invoices")
LABELS = {"sundial.dev/scheduledjob": "invoices", "app.kubernetes.io/managed-by": "sundial"}
SPEC = {"schedule": "* * * * *", "timeZone": "UTC", "job": {"image": "app:1"}}


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def minutes(slot: datetime) -> int:
    return int(slot.timestamp()) // 60


def scheduledjob() -> ScheduledJob:
    """Judged up to 10:00 before the operator was killed at 10:01:20."""
    spec_hash = timetable_hash(ScheduledJobSpec.model_validate(SPEC))
    return ScheduledJob.model_validate({
        "metadata": {"name": "invoices", "namespace": "shop", "uid": "u1", "generation": 1},
        "spec": SPEC,
        "status": {"runAccounting": {"accountedUntil": iso(M0), "specHash": spec_hash}},
    })  # fmt: skip


def cronjob(policy: str = "Allow") -> dict[str, Any]:
    return {
        "metadata": {"name": "invoices", "namespace": "shop", "labels": LABELS, "uid": "c1",
                     "ownerReferences": [{"kind": "ScheduledJob", "name": "invoices",
                                          "uid": "u1", "controller": True}],
                     "creationTimestamp": iso(M0 - timedelta(seconds=20))},
        "spec": {"schedule": "* * * * *", "timeZone": "UTC", "concurrencyPolicy": policy,
                 "suspend": False, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                 "jobTemplate": {"spec": {"ttlSecondsAfterFinished": 300}}},
        # The controller came back at 10:02:20 and started 10:02 only.
        "status": {"lastScheduleTime": iso(M2), "active": [{"name": f"invoices-{minutes(M2)}"}]},
    }  # fmt: skip


def running_job(slot: datetime, late: float, ended: datetime | None = None) -> dict[str, Any]:
    """A Job of the controller's, not ended (the Pods of this stack never run) unless
    `ended` says when it completed."""
    created = iso(slot + timedelta(seconds=late))
    status: dict[str, Any] = {"startTime": created, "active": 1}
    if ended is not None:
        status = {"startTime": created, "succeeded": 1, "completionTime": iso(ended),
                  "conditions": [{"type": "Complete", "status": "True"}]}  # fmt: skip
    return {
        "metadata": {"name": f"invoices-{minutes(slot)}", "namespace": "shop",
                     "labels": LABELS, "creationTimestamp": created,
                     "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp":
                                     iso(slot)},
                     "ownerReferences": [{"kind": "CronJob", "name": "invoices", "uid": "c1",
                                          "controller": True}]},
        "status": status,
    }  # fmt: skip


def judged(
    messages: list[str],
    jobs: list[dict[str, Any]] | None = None,
    policy: str = "Allow",
    watching_since: datetime = RESTART,
    *,
    cached: list[dict[str, Any]] | None = None,
    seen_then_gone: tuple[dict[str, Any], ...] = (),
) -> list[tuple[datetime, str]]:
    """The slots judged as the kubernetes backend judges them: by the watch cache (holding
    `cached`, by default the `jobs`, and having seen `seen_then_gone` made and deleted) and
    the live CronJob; a slot that looks missed there is judged again with what the API
    keeps beyond the cache (`jobs` listed, the controller's Event `messages`)."""
    jobs = jobs if jobs is not None else [running_job(M0, late=1), running_job(M2, late=20)]
    cache = WatchCache()
    cache.watching_since = watching_since  # the restart's listing
    cache.put_scheduledjob(scheduledjob().model_dump(by_alias=True, mode="json"))
    for job in [*seen_then_gone, *(jobs if cached is None else cached)]:
        cache.put_job(job)
    for job in seen_then_gone:
        cache.remove_job(job)
    judgement = judged_by_backend(cache, scheduledjob(), cronjob(policy), NOW, jobs, messages)
    assert judgement is not None
    return [(run.scheduled_time, run.reason) for run in judgement.new_runs]


def test_the_slot_the_controller_never_started_is_missed_by_its_own_events() -> None:
    """The controller's Events name the Jobs of 10:00 and 10:02, each in an Event of its
    own: a Job of 10:01 would have one too. 10:01 is ControllerDown, not Unknown."""
    messages = [
        f"Created job invoices-{minutes(M0)}",
        f"Created job invoices-{minutes(M2)}",
    ]
    assert judged(messages) == [(M1, "ControllerDown")]


def test_without_the_controllers_record_the_slot_stays_unknown() -> None:
    """Its Events gone (expired, or combined into one naming only the latest Job): there is
    no telling whether a Job of 10:01 was made and removed."""
    assert judged([]) == [(M1, "Unknown")]
    combined = [
        f"(combined from similar events): Created job invoices-{minutes(M2)}",
        f"Created job invoices-{minutes(M0)}",
    ]
    assert judged(combined) == [(M1, "Unknown")]


def test_a_forbid_skip_the_controller_reported_is_not_a_miss_when_the_times_round_to_it() -> None:
    """Issue 25, defect 8: the 10:00 run completed within the first second after 10:01 (its
    completionTime reads 10:01:00); the controller saw it running at the slot and said so
    (JobAlreadyActive). The operator watched throughout; no Job was made for 10:01."""
    jobs = [running_job(M0, late=1, ended=M1), running_job(M2, late=1)]
    messages = [
        f"Created job invoices-{minutes(M0)}",
        "Not starting job because prior execution is running and concurrency policy is Forbid",
        f"Saw completed job: invoices-{minutes(M0)}, condition: Complete",
        f"Created job invoices-{minutes(M2)}",
    ]
    watched = M0 - timedelta(minutes=5)
    assert judged(messages, jobs, "Forbid", watched) == [(M1, "OverlapSkipped")]


def test_a_run_only_the_listing_shows_running_across_a_forbid_slot_makes_it_a_skip() -> None:
    """The watch missed the 10:00 Job (a gap); listed beyond the cache, it ran until 10:01:30,
    across 10:01, under Forbid: 10:01 was skipped for overlap, though no Event says so."""
    jobs = [running_job(M0, late=1, ended=M1 + timedelta(seconds=30)), running_job(M2, late=1)]
    messages = [f"Created job invoices-{minutes(M2)}"]
    watched = M0 - timedelta(minutes=5)
    assert judged(messages, jobs, "Forbid", watched, cached=jobs[1:]) == [(M1, "OverlapSkipped")]


def test_a_slot_whose_job_the_watch_saw_made_ran_though_the_job_is_gone() -> None:
    """The 10:01 Job was seen made and then deleted (a TTL of seconds): neither the listing
    nor the controller's Events name it any more, and the slot still ran."""
    gone = running_job(M1, late=1, ended=M1 + timedelta(seconds=5))
    assert judged([], watching_since=M0 - timedelta(minutes=5), seen_then_gone=(gone,)) == []
