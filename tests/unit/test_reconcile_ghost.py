"""Issue 14.19: a ScheduledJob the cache still holds but the server no longer has (a ghost a
re-list brought back) never gets a backend object made for it: the first create of its
CronJob or Temporal schedule is preceded by a GET of the ScheduledJob."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kube_doubles import QuietKube
from sundial.backends.kubernetes.backend import KubernetesBackend
from sundial.backends.temporal.backend import TemporalBackend
from sundial.events import EventRecorder
from sundial.metrics import Metrics
from sundial.reconcile import Reconciler
from sundial.watchcache import WatchCache

KEY = ("shop", "invoices")


def ghost(backend: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"backend": backend, "schedule": "* * * * *", "timeZone": "UTC"}
    if backend == "kubernetes":
        spec["job"] = {"image": "app:1"}
    else:
        spec["workflow"] = {"type": "Tick", "taskQueue": "q"}
    return {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": "invoices", "namespace": "shop", "uid": "u1",
                     "resourceVersion": "5", "generation": 1,
                     "finalizers": finalizers or []},
        "spec": spec,
    }  # fmt: skip


class GoneFromTheServer(QuietKube):
    """The API as it stands after the deletion: no ScheduledJob, no CronJob."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    async def read_scheduledjob(self, *_: object) -> dict[str, Any] | None:
        return None

    async def read_cronjob(self, *_: object) -> dict[str, Any] | None:
        return None

    async def apply_cronjob(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.writes.append("cronjob")
        return {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": "9"}}

    async def patch_scheduledjob_metadata(self, *_: object) -> None:
        self.writes.append("finalizer")

    async def patch_scheduledjob_status(self, *_: object) -> None:
        self.writes.append("status")


class RecordingTemporal:
    def __init__(self, kube: GoneFromTheServer) -> None:
        self.kube = kube

    async def keep_finalizer(self, sj: Any, *_: object) -> Any:
        return sj

    async def prepare(self, *_: object) -> Any:
        return cast(Any, type("Prepared", (), {"description": None})())

    async def reconcile(self, *_: object) -> Any:
        self.kube.writes.append("schedule")
        raise AssertionError("a schedule was created for a ScheduledJob that is gone")

    async def retire(self, *_: object) -> None:
        pass


def reconciler(kube: GoneFromTheServer, cache: WatchCache) -> Reconciler:
    events = EventRecorder(cast(Any, kube))
    return Reconciler(
        kube=cast(Any, kube),
        cache=cache,
        events=events,
        metrics=Metrics(),
        kubernetes=KubernetesBackend(kube=cast(Any, kube), cache=cache, events=events),
        temporal=cast(TemporalBackend, RecordingTemporal(kube)),
    )


def test_no_cronjob_is_made_for_a_scheduledjob_that_is_gone() -> None:
    kube, cache = GoneFromTheServer(), WatchCache()
    cache.put_scheduledjob(ghost("kubernetes"))
    asyncio.run(reconciler(kube, cache)(KEY))
    assert kube.writes == []
    assert cache.scheduledjob(KEY) is None  # and the cache no longer holds the ghost


def test_no_schedule_is_made_for_a_scheduledjob_that_is_gone() -> None:
    kube, cache = GoneFromTheServer(), WatchCache()
    cache.put_scheduledjob(ghost("temporal", ["sundial.dev/temporal-schedule"]))
    asyncio.run(reconciler(kube, cache)(KEY))
    assert kube.writes == []
    assert cache.scheduledjob(KEY) is None
