"""Issue 14.7: while a spec change cannot be applied, the CronJob already in place keeps
running, so its slots keep being judged: fixing the spec after days floods no misses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sundial.kubernetes_backend import KubernetesBackend
from sundial.missed import timetable_hash
from sundial.models import ScheduledJob, ScheduledJobSpec
from sundial.watchcache import WatchCache

NOW = datetime(2026, 12, 4, 10, 0, 30, tzinfo=UTC)
STUCK_SINCE = NOW - timedelta(days=2)
OWNER = ("shop", "invoices")
LABELS = {"sundial.dev/scheduledjob": "invoices", "app.kubernetes.io/managed-by": "sundial"}


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def accepted_hash() -> str:
    """The accounting was last moved for the spec the CronJob in place was made from."""
    return timetable_hash(
        ScheduledJobSpec.model_validate(
            {"schedule": "* * * * *", "timeZone": "UTC", "job": {"image": "app:1"}}
        )
    )


def scheduledjob(schedule: str) -> ScheduledJob:
    return ScheduledJob.model_validate(
        {
            "metadata": {"name": "invoices", "namespace": "shop", "uid": "u1", "generation": 2},
            "spec": {"schedule": schedule, "timeZone": "UTC", "job": {"image": "app:2"}},
            "status": {
                "runAccounting": {"accountedUntil": iso(STUCK_SINCE), "specHash": accepted_hash()}
            },
        }
    )


def running_cronjob(schedule: str, last_slot: datetime) -> dict[str, Any]:
    return {
        "metadata": {"name": "invoices", "namespace": "shop", "labels": LABELS,
                     "creationTimestamp": iso(STUCK_SINCE - timedelta(days=1))},
        "spec": {"schedule": schedule, "timeZone": "UTC", "concurrencyPolicy": "Allow",
                 "suspend": False, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                 "jobTemplate": {"spec": {"ttlSecondsAfterFinished": 3600}}},
        "status": {"lastScheduleTime": iso(last_slot)},
    }  # fmt: skip


def job_for(slot: datetime) -> dict[str, Any]:
    return {
        "metadata": {"name": f"invoices-{int(slot.timestamp()) // 60}", "namespace": "shop",
                     "labels": LABELS, "creationTimestamp": iso(slot + timedelta(seconds=1)),
                     "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp":
                                     iso(slot)}},
        "status": {"startTime": iso(slot + timedelta(seconds=1)),
                   "completionTime": iso(slot + timedelta(seconds=5)),
                   "conditions": [{"type": "Complete", "status": "True"}]},
    }  # fmt: skip


def test_the_cronjob_in_place_is_judged_by_its_own_schedule_while_the_spec_is_stuck() -> None:
    last_slot = NOW.replace(second=0)
    cache = WatchCache()
    # The operator restarted a moment ago: the slots before are known from the CronJob's
    # lastScheduleTime and its history (three Jobs kept), not from watching.
    cache.watching_since = NOW - timedelta(seconds=150)
    cache.put_cronjob(running_cronjob("* * * * *", last_slot))
    for minutes in range(0, 3):
        cache.put_job(job_for(last_slot - timedelta(minutes=minutes)))
    backend = KubernetesBackend(kube=None, cache=cache, events=None)  # type: ignore[arg-type]
    # The new spec changed the schedule too: the CronJob in place still runs the old one.
    sj = scheduledjob("*/5 * * * *")
    new_runs = []
    for _ in range(3):  # a backlog of two days takes two passes (2000 slots per pass)
        outcome = backend.judge_running(OWNER, sj, NOW)
        assert outcome is not None
        new_runs += outcome.new_runs
        sj = sj.model_copy(update={"status": outcome.status})
    accounting = outcome.status.run_accounting
    assert accounting is not None
    # Slots before the Jobs it still has are judged too: the controller ran them (history
    # limits removed their Jobs), so none of them is missed, and the watermark moves.
    assert accounting.accounted_until == last_slot
    assert new_runs == []


def test_nothing_is_judged_when_no_cronjob_is_in_place() -> None:
    backend = KubernetesBackend(kube=None, cache=WatchCache(), events=None)  # type: ignore[arg-type]
    assert backend.judge_running(OWNER, scheduledjob("* * * * *"), NOW) is None


def test_a_schedule_change_first_judges_the_old_schedule_up_to_the_change() -> None:
    """Issue 14.13: the slots the old schedule made before the change are not dropped."""
    cache = WatchCache()
    cache.watching_since = STUCK_SINCE
    last_slot = NOW.replace(second=0) - timedelta(minutes=3)
    cache.put_cronjob(running_cronjob("* * * * *", last_slot))
    cache.put_job(job_for(last_slot))
    backend = KubernetesBackend(kube=None, cache=cache, events=None)  # type: ignore[arg-type]
    document = scheduledjob("*/5 * * * *").model_dump(by_alias=True, mode="json")
    document["status"]["runAccounting"]["accountedUntil"] = iso(last_slot)
    sj = ScheduledJob.model_validate(document)
    before, carried = backend.judge_before_change(OWNER, sj, NOW)
    # 10:58 and 10:59 had no Job and are certain (the next slot passed); 11:00 is not yet.
    assert [(r.scheduled_time, r.reason) for r in carried] == [
        (last_slot + timedelta(minutes=1), "ControllerDown"),
        (last_slot + timedelta(minutes=2), "ControllerDown"),
    ]
    assert before.status.missed_runs == 2
    # Without a change of schedule there is nothing to judge first.
    unchanged = scheduledjob("* * * * *")
    assert backend.judge_before_change(OWNER, unchanged, NOW)[1] == []
