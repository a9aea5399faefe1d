"""A run's times come from its Pods, read once when it ends (kubernetes_backend): not again
on later passes, whether the run is still listed in status or has fallen off the list."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from test_kubernetes_stuck import NOW, OWNER, job_for, running_cronjob, scheduledjob

from sundial.api.models import ScheduledJob
from sundial.kubernetes_backend import KubernetesBackend
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
