"""Issue 14.7: while a spec change cannot be applied, the CronJob already in place keeps
running, so its slots keep being judged: fixing the spec after days floods no misses."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from sundial.api.models import ScheduledJob, ScheduledJobSpec
from sundial.backends.kubernetes.backend import KubernetesBackend
from sundial.backends.protocol import Pass
from sundial.planning.missed import timetable_hash
from sundial.watchcache import WatchCache

NOW = datetime(2026, 12, 4, 10, 2, 30, tzinfo=UTC)
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
                     "ownerReferences": [{"kind": "ScheduledJob", "name": "invoices",
                                          "uid": "u1", "controller": True}],
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


class NothingMoreListed:
    """What the API returns beyond the watch cache in these cases: no other Job, no Event
    of the controller, no Pod. (The real listings are exercised against the apiserver.)"""

    async def list_all(self, *_: object) -> list[dict[str, Any]]:
        return []

    async def cronjob_event_messages(self, *_: object) -> list[str]:
        return []

    async def list_pods(self, *_: object) -> list[dict[str, Any]]:
        return []  # the Pods gone: the Job's own times stand


def backend_for(cache: WatchCache) -> KubernetesBackend:
    return KubernetesBackend(kube=NothingMoreListed(), cache=cache, events=None)  # type: ignore[arg-type]


def at_watermark(sj: ScheduledJob, watermark: datetime) -> ScheduledJob:
    document = sj.model_dump(by_alias=True, mode="json")
    document["status"]["runAccounting"]["accountedUntil"] = iso(watermark)
    return ScheduledJob.model_validate(document)


def test_the_cronjob_in_place_is_judged_by_its_own_schedule_while_the_spec_is_stuck() -> None:
    last_slot = NOW.replace(second=0)
    cache = WatchCache()
    cache.watching_since = STUCK_SINCE
    cache.put_cronjob(running_cronjob("* * * * *", last_slot))
    for minutes in range(0, 3):
        cache.put_job(job_for(last_slot - timedelta(minutes=minutes)))
    # The new spec changed the schedule too: the CronJob in place still runs the old one,
    # every minute, and its slots are judged by it (10:02 is no slot of */5).
    sj = at_watermark(scheduledjob("*/5 * * * *"), last_slot - timedelta(minutes=3))
    outcome = asyncio.run(backend_for(cache).judge_running(Pass(OWNER, sj, NOW)))
    assert outcome is not None
    accounting = outcome.status.run_accounting
    assert accounting is not None
    assert accounting.accounted_until == last_slot
    assert outcome.new_runs == []


def test_nothing_is_judged_when_no_cronjob_is_in_place() -> None:
    backend = backend_for(WatchCache())
    outcome = asyncio.run(backend.judge_running(Pass(OWNER, scheduledjob("* * * * *"), NOW)))
    assert outcome is None


def test_a_schedule_change_first_judges_the_old_schedule_up_to_the_change() -> None:
    """Issue 14.13: the slots the old schedule made before the change are not dropped."""
    cache = WatchCache()
    cache.watching_since = STUCK_SINCE
    last_slot = NOW.replace(second=0) - timedelta(minutes=3)
    cache.put_cronjob(running_cronjob("* * * * *", last_slot))
    cache.put_job(job_for(last_slot))
    backend = backend_for(cache)
    sj = at_watermark(scheduledjob("*/5 * * * *"), last_slot)
    before, carried = asyncio.run(backend.judge_before_change(OWNER, sj, NOW))
    # 10:00 and 10:01 had no Job and are certain (the next slot passed); 10:02 is not yet.
    assert [(r.scheduled_time, r.reason) for r in carried] == [
        (last_slot + timedelta(minutes=1), "ControllerDown"),
        (last_slot + timedelta(minutes=2), "ControllerDown"),
    ]
    assert before.status.missed_runs == 2
    # Without a change of schedule there is nothing to judge first.
    unchanged = at_watermark(scheduledjob("* * * * *"), last_slot)
    assert asyncio.run(backend.judge_before_change(OWNER, unchanged, NOW))[1] == []
