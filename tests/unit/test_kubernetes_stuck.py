"""Issue 14.7: while a spec change cannot be applied, the CronJob already in place keeps
running, so its slots keep being judged: fixing the spec after days floods no misses. Judged
with what the kubernetes backend gathers (planning/cronjob_evidence), `now` passed in."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from cronjob_judging import judged
from sundial.api.models import ScheduledJob, ScheduledJobSpec
from sundial.backends.kubernetes.backend import KubernetesBackend
from sundial.events import EventRecorder
from sundial.kube import KubeClient
from sundial.planning.cronjob_evidence import running
from sundial.planning.missed import Judgement, timetable_hash
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


def judged_as_running(
    cache: WatchCache, sj: ScheduledJob, live: dict[str, Any] | None
) -> Judgement | None:
    """The slots of the CronJob in place judged as the kubernetes backend judges them while
    the spec is stuck: by the schedule that CronJob runs, from the watch cache; a slot that
    looks missed there after a look beyond it that finds nothing more (no other Job, no
    Event of the controller). None when nothing is in place to judge."""
    return judged(cache, sj, live, NOW, [], [])


def at_watermark(sj: ScheduledJob, watermark: datetime) -> ScheduledJob:
    document = sj.model_dump(by_alias=True, mode="json")
    document["status"]["runAccounting"]["accountedUntil"] = iso(watermark)
    return ScheduledJob.model_validate(document)


def test_the_cronjob_in_place_is_judged_by_its_own_schedule_while_the_spec_is_stuck() -> None:
    last_slot = NOW.replace(second=0)
    cache = WatchCache()
    cache.watching_since = STUCK_SINCE
    live = running_cronjob("* * * * *", last_slot)
    for minutes in range(0, 3):
        cache.put_job(job_for(last_slot - timedelta(minutes=minutes)))
    # The new spec changed the schedule too: the CronJob in place still runs the old one,
    # every minute, and its slots are judged by it (10:02 is no slot of */5).
    sj = at_watermark(scheduledjob("*/5 * * * *"), last_slot - timedelta(minutes=3))
    judgement = judged_as_running(cache, sj, live)
    assert judgement is not None
    assert judgement.accounting is not None
    assert judgement.accounting.accounted_until == last_slot
    assert judgement.new_runs == []


def test_nothing_is_judged_when_no_cronjob_of_this_object_is_in_place() -> None:
    sj = scheduledjob("* * * * *")
    assert judged_as_running(WatchCache(), sj, None) is None
    live = running_cronjob("* * * * *", NOW.replace(second=0))
    assert running(sj, live) is not None
    deleting = {**live, "metadata": {**live["metadata"], "deletionTimestamp": iso(NOW)}}
    assert running(sj, deleting) is None  # being deleted: inert
    theirs = {**live, "metadata": {**live["metadata"], "ownerReferences": []}}
    assert running(sj, theirs) is None  # not this object's runs


def test_a_schedule_change_first_judges_the_old_schedule_up_to_the_change() -> None:
    """Issue 14.13: the slots the old schedule made before the change are not dropped."""
    cache = WatchCache()
    cache.watching_since = STUCK_SINCE
    last_slot = NOW.replace(second=0) - timedelta(minutes=3)
    live = running_cronjob("* * * * *", last_slot)
    cache.put_job(job_for(last_slot))
    sj = at_watermark(scheduledjob("*/5 * * * *"), last_slot)
    judgement = judged_as_running(cache, sj, live)
    assert judgement is not None
    # 10:00 and 10:01 had no Job and are certain (the next slot passed); 10:02 is not yet.
    assert [(r.scheduled_time, r.reason) for r in judgement.new_runs] == [
        (last_slot + timedelta(minutes=1), "ControllerDown"),
        (last_slot + timedelta(minutes=2), "ControllerDown"),
    ]


def test_without_a_change_of_schedule_there_is_nothing_to_judge_first() -> None:
    """judge_before_change asks nobody when the accounting is for the schedule in force:
    the backend's client here reaches no server, and the CronJob in place is in the cache
    (had it judged, it would have looked beyond the cache and failed)."""
    cache = WatchCache()
    cache.watching_since = STUCK_SINCE
    last_slot = NOW.replace(second=0) - timedelta(minutes=3)
    cache.put_cronjob(running_cronjob("* * * * *", last_slot))
    nowhere = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    kube = KubeClient(nowhere)
    backend = KubernetesBackend(kube=kube, cache=cache, events=EventRecorder(kube))
    unchanged = at_watermark(scheduledjob("* * * * *"), last_slot)
    before, carried = asyncio.run(backend.judge_before_change(OWNER, unchanged, NOW))
    assert (before, carried) == (unchanged, [])
    nowhere.close()
