"""kopf wiring: watches feed indexes (the read cache) and a work queue; nothing else.

Sundial is level-triggered like a controller-runtime controller: every event on a
ScheduledJob or a CronJob it owns queues the ScheduledJob's key, and one reconcile pass
rebuilds everything from the cache. It registers no create/update/delete handlers, so
kopf keeps no progress or diff-base bookkeeping and never writes annotations on the
objects (the GitOps tools that own them see no churn).
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from sundial.config import OperatorConfig
from sundial.cronjob import MANAGED_BY, MANAGED_BY_LABEL, SCHEDULEDJOB_LABEL
from sundial.events import EventRecorder
from sundial.kube import KubeClient, load_api_client
from sundial.models import GROUP, PLURAL, VERSION
from sundial.reconcile import Key, Reconciler
from sundial.temporal import RequestBudget, Temporal, default_connection
from sundial.workqueue import WorkQueue

MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}


class IndexCache:
    """The Reconciler's read cache, backed by kopf's in-memory indexes."""

    def __init__(self, scheduledjobs: kopf.Index[Key, Any], cronjobs: kopf.Index[Key, Any]):
        self._scheduledjobs = scheduledjobs
        self._cronjobs = cronjobs

    @staticmethod
    def _one(index: kopf.Index[Key, Any], key: Key) -> dict[str, Any] | None:
        store = index.get(key)
        return next(iter(store), None) if store is not None else None

    def scheduledjob(self, key: Key) -> dict[str, Any] | None:
        return self._one(self._scheduledjobs, key)

    def cronjob(self, key: Key) -> dict[str, Any] | None:
        return self._one(self._cronjobs, key)


@kopf.index(GROUP, VERSION, PLURAL)
def scheduledjob_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(str(namespace), name): dict(body)}


@kopf.index("batch", "v1", "cronjobs", labels=MANAGED)
def cronjob_index(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
    return {(str(namespace), labels[SCHEDULEDJOB_LABEL]): dict(body)}


@kopf.on.event(GROUP, VERSION, PLURAL)
def scheduledjob_event(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    memo.queue.add((str(namespace), name))


@kopf.on.event("batch", "v1", "cronjobs", labels=MANAGED)
def cronjob_event(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    memo.queue.add((str(namespace), labels[SCHEDULEDJOB_LABEL]))


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    # kopf passes each index by its function's name; they fill before any event handler runs.
    scheduledjobs: kopf.Index[Key, Any] = kwargs["scheduledjob_index"]
    cronjobs: kopf.Index[Key, Any] = kwargs["cronjob_index"]
    config = OperatorConfig.from_env()
    # Events come from EventRecorder, aggregated; kopf would post one per log line.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    kube = KubeClient(load_api_client(config.kubeconfig))
    queue: WorkQueue[Key] = WorkQueue(max_backoff=60.0)
    reconciler = Reconciler(
        kube=kube,
        cache=IndexCache(scheduledjobs, cronjobs),
        events=EventRecorder(kube),
        temporal=Temporal(RequestBudget(config.temporal_requests_per_second)),
        config=config,
        default_connection=default_connection(config),
    )
    memo.queue = queue
    memo.tasks = [asyncio.create_task(queue.run_timer(), name="sundial-timer")] + [
        asyncio.create_task(queue.run_worker(reconciler), name=f"sundial-worker-{i}")
        for i in range(config.workers)
    ]


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.get("tasks", []):
        task.cancel()
    await asyncio.gather(*memo.get("tasks", []), return_exceptions=True)
