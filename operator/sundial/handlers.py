"""kopf wiring: watches feed indexes (the read cache) and a work queue; nothing else.

Sundial is level-triggered like a controller-runtime controller: every event on a
ScheduledJob, or on a CronJob or Job it owns, queues the ScheduledJob's key, and one
reconcile pass rebuilds everything from the cache. It registers no create/update/delete
handlers, so kopf keeps no progress or diff-base bookkeeping and never writes annotations
on the objects (the GitOps tools that own them see no churn).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf

from sundial.backend import Key
from sundial.config import OperatorConfig
from sundial.cronjob import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SCHEDULED_TIMESTAMP_ANNOTATION,
    SCHEDULEDJOB_LABEL,
)
from sundial.events import EventRecorder
from sundial.kube import KubeClient, load_api_client
from sundial.kubernetes_backend import KubernetesBackend
from sundial.metrics import Metrics
from sundial.missed import JobRecord
from sundial.models import GROUP, PLURAL, VERSION
from sundial.reconcile import Reconciler
from sundial.status import parse_time
from sundial.temporal import RequestBudget, Temporal, default_connection
from sundial.temporal_backend import TemporalBackend
from sundial.workqueue import WorkQueue

MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}
OWNED_JOBS = {SCHEDULEDJOB_LABEL: kopf.PRESENT}
# Slots seen are kept this long: enough to outlive any Job history, bounded in memory.
SEEN_SLOTS_KEPT = timedelta(days=2)


class SeenSlots:
    """Scheduled times of the Jobs the operator saw created, including Jobs deleted since
    (history limits, TTL): proof that those slots ran."""

    def __init__(self) -> None:
        self._slots: dict[Key, set[datetime]] = defaultdict(set)
        self.since = datetime.now(UTC)

    def add(self, key: Key, slot: datetime) -> None:
        slots = self._slots[key]
        slots.add(slot)
        if len(slots) > 64:
            horizon = datetime.now(UTC) - SEEN_SLOTS_KEPT
            slots.difference_update({s for s in slots if s < horizon})

    def get(self, key: Key) -> frozenset[datetime]:
        return frozenset(self._slots.get(key, ()))

    def forget(self, key: Key) -> None:
        self._slots.pop(key, None)


class IndexCache:
    """The Reconciler's read cache, backed by kopf's in-memory indexes."""

    def __init__(
        self,
        scheduledjobs: kopf.Index[Key, Any],
        cronjobs: kopf.Index[Key, Any],
        jobs: kopf.Index[Key, JobRecord],
        seen: SeenSlots,
    ) -> None:
        self._scheduledjobs = scheduledjobs
        self._cronjobs = cronjobs
        self._jobs = jobs
        self._seen = seen

    @staticmethod
    def _one(index: kopf.Index[Key, Any], key: Key) -> dict[str, Any] | None:
        store = index.get(key)
        return next(iter(store), None) if store is not None else None

    def scheduledjob(self, key: Key) -> dict[str, Any] | None:
        found = self._one(self._scheduledjobs, key)
        if found is None:
            self._seen.forget(key)
        return found

    def cronjob(self, key: Key) -> dict[str, Any] | None:
        return self._one(self._cronjobs, key)

    def jobs(self, key: Key) -> list[JobRecord]:
        store = self._jobs.get(key)
        return list(store) if store is not None else []

    def seen_slots(self, key: Key) -> frozenset[datetime]:
        return self._seen.get(key)

    @property
    def watching_since(self) -> datetime:
        return self._seen.since


def job_record(meta: kopf.Meta, status: kopf.Status) -> JobRecord | None:
    try:
        scheduled = parse_time(meta.annotations.get(SCHEDULED_TIMESTAMP_ANNOTATION))
    except ValueError:
        return None  # an annotation copied by hand and mangled: not a slot
    created = parse_time(meta.creation_timestamp)
    if scheduled is None or created is None:
        return None  # not made by the CronJob controller for a slot
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    failed = conditions.get("Failed", {}).get("status") == "True"
    succeeded = conditions.get("Complete", {}).get("status") == "True"
    finished_at = parse_time(status.get("completionTime")) or (
        parse_time(conditions["Failed"].get("lastTransitionTime")) if failed else None
    )
    return JobRecord(
        scheduled_time=scheduled,
        created=created,
        start_time=parse_time(status.get("startTime")),
        finished_at=finished_at,
        succeeded=succeeded,
        failed=failed,
    )


@kopf.index(GROUP, VERSION, PLURAL)
def scheduledjob_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(str(namespace), name): dict(body)}


@kopf.index("batch", "v1", "cronjobs", labels=MANAGED)
def cronjob_index(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
    return {(str(namespace), labels[SCHEDULEDJOB_LABEL]): dict(body)}


@kopf.index("batch", "v1", "jobs", labels=OWNED_JOBS)
def job_index(
    namespace: str | None, labels: kopf.Labels, meta: kopf.Meta, status: kopf.Status, **_: Any
) -> dict[Key, JobRecord]:
    record = job_record(meta, status)
    return {(str(namespace), labels[SCHEDULEDJOB_LABEL]): record} if record else {}


@kopf.on.event(GROUP, VERSION, PLURAL)
def scheduledjob_event(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    memo.queue.add((str(namespace), name))


@kopf.on.event("batch", "v1", "cronjobs", labels=MANAGED)
def cronjob_event(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    memo.queue.add((str(namespace), labels[SCHEDULEDJOB_LABEL]))


@kopf.on.event("batch", "v1", "jobs", labels=OWNED_JOBS)
def job_event(
    namespace: str | None,
    labels: kopf.Labels,
    meta: kopf.Meta,
    status: kopf.Status,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    key = (str(namespace), labels[SCHEDULEDJOB_LABEL])
    record = job_record(meta, status)
    if record is not None:
        memo.seen.add(key, record.scheduled_time)
    memo.queue.add(key)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    # kopf passes each index by its function's name; they fill before any event handler runs.
    config = OperatorConfig.from_env()
    # Events come from EventRecorder, aggregated; kopf would post one per log line.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    kube = KubeClient(load_api_client(config.kubeconfig))
    metrics = Metrics()
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    memo.seen = SeenSlots()
    memo.queue = queue = WorkQueue[Key](max_backoff=60.0)
    cache = IndexCache(
        kwargs["scheduledjob_index"], kwargs["cronjob_index"], kwargs["job_index"], memo.seen
    )
    events = EventRecorder(kube)
    budget = RequestBudget(
        config.temporal_requests_per_second, on_request=metrics.temporal_requests.inc
    )
    reconciler = Reconciler(
        kube=kube,
        cache=cache,
        events=events,
        metrics=metrics,
        kubernetes=KubernetesBackend(kube=kube, cache=cache, events=events),
        temporal=TemporalBackend(
            kube=kube,
            temporal=Temporal(budget),
            events=events,
            config=config,
            default_connection=default_connection(config),
        ),
    )
    memo.tasks = [asyncio.create_task(queue.run_timer(), name="sundial-timer")] + [
        asyncio.create_task(
            queue.run_worker(metrics.measured(reconciler)), name=f"sundial-worker-{i}"
        )
        for i in range(config.workers)
    ]


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.get("tasks", []):
        task.cancel()
    await asyncio.gather(*memo.get("tasks", []), return_exceptions=True)
