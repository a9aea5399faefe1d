"""A run's times come from its Pods, read once when it ends (planning.pod_times, as the
kubernetes backend's `_with_pod_times` uses it): from the Pod watch when it has shown all
the Job's ended Pods, else one LIST; not again on later passes, whether the run is still
listed in status or has fallen off the list. Pure: `now` is passed in, the cache is the
real WatchCache, and a listing is the Pods given."""

from __future__ import annotations

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

from sundial.api.models import ScheduledJobStatus
from sundial.planning.pod_times import listed_pods_ended, pod_times_needed, with_pod_times
from sundial.planning.runs import Limits, RunHistory, job_run, run_history
from sundial.planning.summaries import PodsEnded
from sundial.watchcache import WatchCache

MINUTE = timedelta(minutes=1)


def judged(
    cache: WatchCache,
    status: ScheduledJobStatus,
    run_limits: Limits | None = None,
    listing: dict[str, list[dict[str, Any]]] | None = None,
) -> tuple[RunHistory, list[str]]:
    """One pass's run history, built as KubernetesBackend._judge builds it: the runs the
    cache shows, those first seen ended with their Pods' times (pod_times); and the Jobs
    whose Pods had to be listed (a listing answers with `listing[job]`, else nothing)."""
    run_limits = run_limits or Limits()
    observed = [job_run(job) for job in [*cache.departed_jobs(OWNER), *cache.jobs(OWNER)]]
    history = run_history(status, observed, run_limits, NOW, complete=True)
    ended = {run.job_name for run in history.newly_finished if run.job_name}
    needed = pod_times_needed(observed, ended, lambda job: cache.pods_ended(OWNER[0], job))
    pods: dict[str, PodsEnded | None] = dict(needed.watched)
    for job in needed.to_list:
        pods[job] = listed_pods_ended((listing or {}).get(job, []))
    timed = with_pod_times(observed, pods)
    return run_history(status, timed, run_limits, NOW, complete=True), needed.to_list


def written(status: ScheduledJobStatus, history: RunHistory) -> ScheduledJobStatus:
    """The status a pass writes, as far as the runs go (status.kubernetes_status)."""
    return status.model_copy(update={
        "recent_runs": history.recent_runs, "counted_runs": history.counted_runs,
        "counted_since": history.counted_since,
        "consecutive_failures": history.consecutive_failures,
        "consecutive_successes": history.consecutive_successes,
        "last_successful_time": history.last_successful_time,
        "last_failed_time": history.last_failed_time,
    })  # fmt: skip


def test_an_ended_runs_pods_are_listed_once_even_after_it_falls_off_the_list() -> None:
    last_slot = NOW.replace(second=0)
    cache = WatchCache()
    cache.watching_since = NOW - timedelta(days=1)
    cache.put_cronjob(running_cronjob("* * * * *", last_slot))
    for minutes in range(3):  # kept by successfulJobsHistoryLimit 3
        cache.put_job(job_for(last_slot - timedelta(minutes=minutes)))
    status = scheduledjob("* * * * *").status
    listed: list[str] = []
    for _ in range(3):
        history, to_list = judged(cache, status, Limits(recent_runs=1))
        listed += to_list
        status = written(status, history)
    # Each Job once, on the pass that first saw it ended; none on the passes after.
    names = [job_for(last_slot - timedelta(minutes=m))["metadata"]["name"] for m in range(3)]
    assert sorted(listed) == sorted(names)
    assert len(status.recent_runs) == 1


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


def judged_once(
    cache: WatchCache, listing: dict[str, list[dict[str, Any]]] | None = None
) -> tuple[ScheduledJobStatus, list[str]]:
    """The first pass over `cache`: the status it writes, and the Jobs whose Pods it listed."""
    status = scheduledjob("* * * * *").status
    history, listed = judged(cache, status, listing=listing)
    return written(status, history), listed


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
    status, listed = judged_once(cache)
    assert listed == []
    run = status.recent_runs[0]
    assert (run.start_time, run.completion_time) == (
        slot + timedelta(seconds=3), slot + timedelta(seconds=4))  # fmt: skip


def test_a_run_with_more_ended_pods_than_the_watch_delivered_lists_them() -> None:
    """Two Pods failed (a retry), the watch has shown one so far: the listing decides."""
    slot = NOW.replace(second=0)
    cache, job = cache_with_ended_job(slot, succeeded=1, failed=1)
    cache.put_pod(ended_pod(job, "p2", slot + timedelta(seconds=9), slot + timedelta(seconds=10)))
    name = job["metadata"]["name"]
    first = ended_pod(job, "p1", slot + timedelta(seconds=3), slot + timedelta(seconds=4))
    status, listed = judged_once(cache, {name: [first, ended_pod(
        job, "p2", slot + timedelta(seconds=9), slot + timedelta(seconds=10))]})  # fmt: skip
    assert listed == [name]
    run = status.recent_runs[0]
    assert (run.start_time, run.completion_time) == (
        slot + timedelta(seconds=3), slot + timedelta(seconds=10))  # fmt: skip


def test_each_job_is_listed_at_most_once_and_only_if_first_seen_ended_in_this_pass() -> None:
    slot = NOW.replace(second=0)
    caches = [cache_with_ended_job(at, succeeded=1)[0] for at in (slot, slot - MINUTE)]
    runs = [job_run(record) for cache in caches for record in cache.jobs(OWNER)]
    named = [run.job_name for run in runs]
    asked: list[str] = []

    def watched(job: str) -> PodsEnded | None:
        asked.append(job)
        return None

    needed = pod_times_needed([*runs, runs[0]], {str(named[0])}, watched)
    assert needed.to_list == [named[0]]
    assert asked == [named[0]], "the cache is not asked about a Job not ended in this pass"
    # A Job without any ended Pod (none listed) keeps the Job controller's own times.
    assert with_pod_times(runs, {str(named[0]): None}) == runs


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
