"""kopf wiring: watch events feed the watch cache and the work queue; nothing else.

Sundial is level-triggered like a controller-runtime controller: every event on a
ScheduledJob, or on a CronJob or Job it owns, queues the ScheduledJob's key, and one
reconcile pass rebuilds everything from the cache. It registers no create/update/delete
handlers, so kopf keeps no progress or diff-base bookkeeping and never writes annotations
on the objects (the GitOps tools that own them see no churn).

The handlers are async on purpose: kopf runs plain functions in its thread pool, and the
cache and the work queue they feed are shared, unlocked, with the reconcile workers and
the re-list on the event loop. Async handlers run on the loop, one at a time between awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import kopf

from sundial.api.models import GROUP, PLURAL, VERSION
from sundial.backend import Key
from sundial.collector import collect_every, collect_on_a_timer
from sundial.config import OperatorConfig
from sundial.connections import ConnectionResolver
from sundial.events import EventRecorder
from sundial.health import Health
from sundial.kube import ApiException, KubeClient, api_error_message, load_api_client
from sundial.kubernetes_backend import KubernetesBackend
from sundial.metrics import Metrics
from sundial.planning.cronjob import MANAGED_BY, MANAGED_BY_LABEL, SCHEDULEDJOB_LABEL
from sundial.planning.selector import LabelSelector, parse_selector
from sundial.podwatch import PodWatch
from sundial.reconcile import Reconciler
from sundial.temporal import RequestBudget, Temporal
from sundial.temporal_backend import TemporalBackend, temporal_lane
from sundial.temporal_watch import ScheduleWatch
from sundial.watchcache import WatchCache, changed_by_someone, object_key, status_of
from sundial.workqueue import WorkQueue

log = logging.getLogger(__name__)

MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}
OWNED_JOBS = {SCHEDULEDJOB_LABEL: kopf.PRESENT}
# A run is a burst of events from owned objects (the Job created, the CronJob's status,
# the Job's status, within about half a second), and another when it ends: a pass that
# waits this long after the first sees them all and writes the status once, not once for
# each. A run that ends within it (a short job: its Pod starts in about 3 s on an idle
# node) has its start and its end in that one write: one status write per run, not two.
# The status shows a run this much after its Job appears.
OWNED_EVENTS_FOLDED = 5.0
# How often the cache is checked against a full listing (client-go's informer resync).
RELIST_SECONDS = 600.0
# Listed objects put into the cache between two turns of the event loop.
RELIST_BATCH = 200
# The first listing is tried again after 1 s, doubling to 30 s, until it succeeds.
FIRST_LISTING_BACKOFF = (1.0, 30.0)
LISTINGS = (
    ("scheduledjobs", None),
    ("cronjobs", f"{MANAGED_BY_LABEL}={MANAGED_BY}"),
    ("jobs", SCHEDULEDJOB_LABEL),
)


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base on every watch event (a deep copy of the object, less its
    status and metadata) for its change-detecting handlers, and keeps one per object in
    an annotation. Sundial registers none (it is level-triggered), so there is nothing to
    diff: building it was a fifth of kopf's share of the operator's CPU at 5,000 objects."""

    def build(  # type: ignore[override]
        self, *, body: kopf.Body, extra_fields: Any = None
    ) -> kopf.BodyEssence | None:
        return None

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


@kopf.on.event(GROUP, VERSION, PLURAL)
async def scheduledjob_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    cache: WatchCache = memo.cache
    obj = dict(body)
    key = object_key(obj)
    previous = cache.scheduledjob(key)
    metadata = obj.get("metadata", {})
    if type == "DELETED" or not memo.selector.matches(metadata.get("labels")):
        # Gone, or another operator's share (SUNDIAL_LABEL_SELECTOR): one that just left
        # this share is forgotten as if deleted.
        if type == "DELETED" or previous is not None:
            cache.remove_scheduledjob(key, metadata.get("resourceVersion"))
            memo.queue.add(key, urgent=True)
        return
    cache.put_scheduledjob(obj)
    # Compared as cached (an event older than the cache is no news either).
    current = cache.scheduledjob(key)
    news = changed_by_someone(previous, current)
    reconciler: Reconciler | None = memo.get("reconciler")
    if not news and reconciler is not None and reconciler.wrote(key, obj):
        return  # Sundial's own status write coming back: its pass saw all of it
    if not news and previous is not None and status_of(previous) == status_of(current):
        return  # neither spec nor status moved: the finalizer Sundial set, coming back
    # Other status writes wait their turn behind changed objects.
    memo.queue.add(key, urgent=news)


def _owned_event(
    type_: str | None,
    body: kopf.Body,
    memo: kopf.Memo,
    put: Callable[[dict[str, Any]], Key | None],
    remove: Callable[[dict[str, Any]], Key | None],
) -> None:
    owner = remove(dict(body)) if type_ == "DELETED" else put(dict(body))
    if owner is not None and memo.cache.scheduledjob(owner) is not None:
        memo.queue.add_after(owner, OWNED_EVENTS_FOLDED)


@kopf.on.event("batch", "v1", "cronjobs", labels=MANAGED)
async def cronjob_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _owned_event(type, body, memo, memo.cache.put_cronjob, memo.cache.remove_cronjob)


@kopf.on.event("batch", "v1", "jobs", labels=OWNED_JOBS)
async def job_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _owned_event(type, body, memo, memo.cache.put_job, memo.cache.remove_job)


async def relist(
    kube: KubeClient, cache: WatchCache, namespaces: list[str], share: LabelSelector
) -> list[Key]:
    """Fill the cache from full listings, and drop what they lack; returns keys to look at.

    Watching some namespaces (SUNDIAL_NAMESPACES), each is listed on its own: one the
    apiserver refuses (403: a deleted namespace takes the operator's Role there along; 404)
    is logged and left as the cache holds it, and the others are listed still. Only all of
    them refused is a failed listing (RBAC or the CRDs not there yet: the first listing is
    tried again until they are)."""
    touched: list[Key] = []
    refused: dict[str, ApiException] = {}
    for kind, selector in LISTINGS:
        if kind == "scheduledjobs":
            selector = share.text or None
        started = time.monotonic()
        listed: set[Key] = set()
        scopes = [[ns] for ns in namespaces if ns not in refused] if namespaces else [[]]
        for scope in scopes:
            try:
                # A page at a time: the cache keeps only what it needs of each object.
                async for page in kube.list_pages(kind, scope, selector):
                    await _take_page(cache, kind, page, listed)
            except ApiException as error:
                if not scope or error.status not in (403, 404):
                    raise
                refused[scope[0]] = error
        if namespaces and len(refused) == len(namespaces):
            raise next(iter(refused.values()))
        touched += cache.prune(kind, listed, started, spared=frozenset(refused))
    cache.sweep_departed_owners()
    for namespace, refusal in refused.items():
        log.warning("listing namespace %s was refused (%s: %s); it is left as it was, the "
                    "others are listed", namespace, refusal.status,
                    api_error_message(refusal))  # fmt: skip
    return touched


async def _take_page(
    cache: WatchCache, kind: str, page: list[dict[str, Any]], listed: set[Key]
) -> None:
    for index, item in enumerate(page):
        if index % RELIST_BATCH == RELIST_BATCH - 1:
            # Thousands of objects at a go would hold the event loop for a tenth of a
            # second and more: watch events and wake-ups wait no longer than a batch.
            await asyncio.sleep(0)
        if kind == "scheduledjobs":
            listed.add(cache.put_scheduledjob(item))
        elif kind == "cronjobs":
            owner = cache.put_cronjob(item)
            if owner is not None:
                listed.add(owner)
        else:
            cache.put_job(item)
            listed.add(object_key(item))


async def fill_cache(
    kube: KubeClient,
    cache: WatchCache,
    namespaces: list[str],
    share: LabelSelector,
    health: Health | None,
) -> None:
    """The first listing, tried until the apiserver answers it. A 429, a 5xx, a 403 (RBAC
    not there yet) or a 404 (the CRDs applied with the Deployment) is a moment of the
    cluster, not a reason to stop: raising here made kopf run the whole start-up again,
    which died binding the metrics port a second time, every 60 s for good, while the
    Lease was still renewed. Each failure is logged and shown by /readyz."""
    delay = FIRST_LISTING_BACKOFF[0]
    while True:
        try:
            await relist(kube, cache, namespaces, share)
        except ApiException as error:
            problem = f"{error.status or 'no answer'}: {api_error_message(error)}"
        else:
            if health is not None:
                health.cache_problem = None
            return
        log.warning("the first listing failed, again in %.0fs: %s", delay, problem)
        if health is not None:
            health.cache_problem = problem
        await asyncio.sleep(delay)
        delay = min(delay * 2, FIRST_LISTING_BACKOFF[1])


async def keep_relisting(
    kube: KubeClient,
    cache: WatchCache,
    queue: WorkQueue[Key],
    namespaces: list[str],
    share: LabelSelector,
) -> None:
    while True:
        await asyncio.sleep(RELIST_SECONDS)
        try:
            for key in await relist(kube, cache, namespaces, share):
                queue.add(key)
        except Exception as error:
            log.warning("re-listing failed, will try again: %s", error)


def configure(settings: kopf.OperatorSettings) -> None:
    """kopf as Sundial uses it: a source of watch events, nothing more."""
    # Events come from EventRecorder, aggregated; kopf would post one per log line.
    settings.posting.enabled = False
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.server_timeout = 300
    # Serve exactly the resources and namespaces known at start: kopf would otherwise list
    # and watch CRDs and (namespaced) Namespaces, rights the operator has no other use for.
    # A missing CRD still shows: the listing below fails, and the start with it.
    settings.scanning.disabled = True


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # __main__ read it already; `kopf run` of this module reads it here.
    config: OperatorConfig = memo.get("config") or OperatorConfig.from_env()
    configure(settings)
    kube = KubeClient(load_api_client(config.kubeconfig, memo.get("identity")))
    # __main__ serves /metrics before the election (a standby is scraped too); `kopf run`
    # of this module serves it here.
    metrics: Metrics | None = memo.get("metrics")
    if metrics is None:
        metrics = memo.metrics = Metrics()
        if config.metrics_port:
            metrics.serve(config.metrics_port)
    memo.exits = exits = contextlib.ExitStack()
    exits.enter_context(metrics.watching_gc())
    memo.cache = cache = WatchCache()
    memo.selector = parse_selector(config.label_selector)
    # Passes that wait on one Temporal connection are capped below the workers: the rest
    # keep serving everything else however slow that Temporal or its budget is.
    per_connection = config.temporal_connections_per_address or max(1, config.workers // 2)
    memo.queue = queue = WorkQueue[Key](
        max_backoff=60.0,
        lane_of=lambda key: temporal_lane(cache.scheduledjob(key), config.default_connection),
        lane_limit=per_connection,
        # However many connections: half the workers always serve everything else.
        lanes_limit=max(1, config.workers // 2),
    )
    # kopf starts watching only after start-up handlers: the cache is complete before
    # the first reconcile, so no pass mistakes "not listed yet" for "missing".
    began = time.monotonic()
    await fill_cache(kube, cache, config.namespaces, memo.selector, memo.get("health"))
    log.info("cache filled in %.1fs: %d ScheduledJobs", time.monotonic() - began,
             len(cache.scheduledjob_keys()))  # fmt: skip
    if "health" in memo:
        memo.health.cache_filled = True
    for key in cache.scheduledjob_keys():
        queue.add(key)
    collect_on_a_timer()

    events = EventRecorder(kube)
    budget = RequestBudget(config.temporal_requests_per_second, on_request=metrics.temporal_request)
    temporal = Temporal(budget, per_address=per_connection)
    connections = ConnectionResolver(
        kube,
        default_connection=config.default_connection,
        cluster_resource_namespace=config.cluster_resource_namespace,
        refresh_seconds=config.connection_refresh_seconds,
        on_replaced=temporal.forget,
    )
    watch = ScheduleWatch(
        temporal, queue.add_after, prefix=config.schedule_id_prefix,
        interval=config.temporal_list_seconds,
    ) if config.temporal_list_seconds else None  # fmt: skip
    memo.reconciler = reconciler = Reconciler(
        kube=kube,
        cache=cache,
        events=events,
        metrics=metrics,
        kubernetes=KubernetesBackend(kube=kube, cache=cache, events=events),
        temporal=TemporalBackend(
            kube=kube,
            temporal=temporal,
            events=events,
            config=config,
            connections=connections,
            watch=watch,
        ),
    )
    memo.grace = config.shutdown_grace_seconds
    memo.workers = [
        asyncio.create_task(queue.run_worker(metrics.measured(reconciler)), name=f"worker-{i}")
        for i in range(config.workers)
    ]
    memo.tasks = [
        asyncio.create_task(queue.run_timer(), name="sundial-timer"),
        asyncio.create_task(keep_relisting(kube, cache, queue, config.namespaces, memo.selector)),
        asyncio.create_task(metrics.watch_loop_lag(), name="sundial-loop-lag"),
        asyncio.create_task(PodWatch(kube, cache, config.namespaces).run(), name="sundial-pods"),
        asyncio.create_task(collect_every(), name="sundial-gc"),
    ]
    if watch is not None:
        memo.tasks.append(asyncio.create_task(watch.run(), name="sundial-schedule-watch"))


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    """The passes in flight finish (within the grace), unless leadership was lost: then
    nothing more may be written, and the new leader runs them again."""
    workers: list[asyncio.Task[None]] = memo.get("workers", [])
    if workers and not memo.get("abandon"):
        memo.queue.close()
        _finished, still_running = await asyncio.wait(workers, timeout=memo.grace)
        if still_running:
            log.warning(
                "%d passes still running after %.0fs are cancelled", len(still_running), memo.grace
            )
    tasks = [*workers, *memo.get("tasks", [])]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if "exits" in memo:
        memo.exits.close()
