"""A run's times come from its Pods, read once when it ends (backends.kubernetes.backend): not again
on later passes, whether the run is still listed in status or has fallen off the list."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from test_kubernetes_stuck import (
    LABELS,
    NOW,
    OWNER,
    iso,
    job_for,
    running_cronjob,
    scheduledjob,
)

from sundial.api.models import ScheduledJob
from sundial.backends.kubernetes.backend import KubernetesBackend
from sundial.watchcache import WatchCache


class CountingKube:
    """Nothing beyond the watch cache, and a count of the Pod listings asked for."""

    def __init__(self) -> None:
        self.pod_listings: list[str] = []

    async def list_all(self, *_: object) -> list[dict[str, Any]]:
        return []

    async def cronjob_event_messages(self, *_: object) -> list[str]:
        return []

    async def list_pods(self, _namespace: str, selector: str) -> list[dict[str, Any]]:
        self.pod_listings.append(selector)
        return []


def test_an_ended_runs_pods_are_listed_once_even_after_it_falls_off_the_list() -> None:
    last_slot = NOW.replace(second=0)
    cache = WatchCache()
    cache.watching_since = NOW - timedelta(days=1)
    cache.put_cronjob(running_cronjob("* * * * *", last_slot))
    for minutes in range(3):  # kept by successfulJobsHistoryLimit 3
        cache.put_job(job_for(last_slot - timedelta(minutes=minutes)))
    kube = CountingKube()
    backend = KubernetesBackend(kube=kube, cache=cache, events=None)  # type: ignore[arg-type]
    document = scheduledjob("* * * * *").model_dump(by_alias=True, mode="json")
    document["spec"]["monitoring"] = {"recentRunsLimit": 1}
    sj = ScheduledJob.model_validate(document)
    for _ in range(3):
        outcome = asyncio.run(backend.judge_running(OWNER, sj, NOW))
        assert outcome is not None
        sj = sj.model_copy(update={"status": outcome.status})
    # Each Job once, on the pass that first saw it ended; none on the passes after.
    names = [job_for(last_slot - timedelta(minutes=m))["metadata"]["name"] for m in range(3)]
    assert sorted(kube.pod_listings) == sorted(f"batch.kubernetes.io/job-name={n}" for n in names)
    assert len(sj.status.recent_runs) == 1


def ended_pod(
    job: dict[str, Any], name: str, started: datetime, finished: datetime
) -> dict[str, Any]:
    """A Pod of `job` as the Pod watch delivers it: ended, with its container's times."""
    return {
        "metadata": {"name": name, "namespace": job["metadata"]["namespace"],
                     "labels": {**LABELS, "batch.kubernetes.io/job-name": job["metadata"]["name"]}},
        "status": {"phase": "Succeeded", "startTime": iso(started),
                   "containerStatuses": [{"state": {"terminated": {"finishedAt": iso(finished)}}}]},
    }  # fmt: skip


def judged_once(cache: WatchCache, kube: CountingKube) -> ScheduledJob:
    backend = KubernetesBackend(kube=kube, cache=cache, events=None)  # type: ignore[arg-type]
    sj = scheduledjob("* * * * *")
    outcome = asyncio.run(backend.judge_running(OWNER, sj, NOW))
    assert outcome is not None
    return sj.model_copy(update={"status": outcome.status})


def cache_with_ended_job(slot: datetime, **pod_counts: int) -> tuple[WatchCache, dict[str, Any]]:
    """A minute CronJob in place and its Job for `slot`, ended with these Pod counts."""
    cache = WatchCache()
    cache.watching_since = NOW - timedelta(days=1)
    cache.put_cronjob(running_cronjob("* * * * *", slot))
    job = job_for(slot)
    job["status"] |= pod_counts
    cache.put_job(job)
    return cache, job


def test_an_ended_runs_times_come_from_its_watched_pods_without_a_listing() -> None:
    slot = NOW.replace(second=0)
    cache, job = cache_with_ended_job(slot, succeeded=1)
    cache.put_pod(ended_pod(job, "p1", slot + timedelta(seconds=3), slot + timedelta(seconds=4)))
    kube = CountingKube()
    sj = judged_once(cache, kube)
    assert kube.pod_listings == []
    run = sj.status.recent_runs[0]
    assert (run.start_time, run.completion_time) == (
        slot + timedelta(seconds=3), slot + timedelta(seconds=4))  # fmt: skip


def test_a_run_with_more_ended_pods_than_the_watch_delivered_lists_them() -> None:
    """Two Pods failed (a retry), the watch has shown one so far: the listing decides."""
    slot = NOW.replace(second=0)
    cache, job = cache_with_ended_job(slot, succeeded=1, failed=1)
    cache.put_pod(ended_pod(job, "p2", slot + timedelta(seconds=9), slot + timedelta(seconds=10)))
    kube = CountingKube()
    judged_once(cache, kube)
    assert kube.pod_listings == [f"batch.kubernetes.io/job-name={job['metadata']['name']}"]


def test_a_deleted_pods_times_stay_while_its_job_is_cached_and_go_with_it() -> None:
    slot = NOW.replace(second=0)
    cache = WatchCache()
    job = job_for(slot)
    job["status"]["succeeded"] = 1
    cache.put_job(job)
    pod = ended_pod(job, "p1", slot + timedelta(seconds=3), slot + timedelta(seconds=4))
    cache.put_pod(pod)
    cache.remove_pod(pod)  # a TTL of 0 takes the Pods as the Job ends
    name = job["metadata"]["name"]
    assert cache.pod_span("shop", name) == (
        slot + timedelta(seconds=3),
        slot + timedelta(seconds=4),
    )
    cache.remove_job(job)
    assert cache.pod_span("shop", name) is None
    # A Pod of a Job the cache does not hold is dropped with the Pod: nothing lingers.
    cache.put_pod(pod)
    cache.remove_pod(pod)
    assert cache.pod_count() == 0


def test_a_listing_of_the_ended_pods_drops_the_times_of_pods_it_lacks_without_a_job() -> None:
    """A deletion the Pod watch missed: the next listing drops that Pod's times, unless its
    Job is cached (then they go with the Job), and only within the namespace listed."""
    slot = NOW.replace(second=0)
    cache = WatchCache()
    cached = job_for(slot)
    cached["status"]["succeeded"] = 1
    cache.put_job(cached)
    uncached = {**job_for(slot + timedelta(minutes=1))}
    elsewhere = {**uncached, "metadata": {**uncached["metadata"], "namespace": "other"}}
    span = (slot + timedelta(seconds=3), slot + timedelta(seconds=4))
    for job, pod in ((cached, "p1"), (uncached, "p2"), (elsewhere, "p3")):
        cache.put_pod(ended_pod(job, pod, *span))
    cache.prune_pods(set(), "shop")
    assert cache.pod_span("shop", cached["metadata"]["name"]) == span
    assert cache.pod_count() == 2, "p2 dropped; p3 is in a namespace not listed"
