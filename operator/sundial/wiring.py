"""The object graph: what the operator is made of and how its parts are joined, built once
at start-up and taken apart at the end (as kubebuilder's cmd/main.go or gafaelfawr's
startup module do). kopf's start-up and clean-up handlers call `start` and `stop`; the
parts are kept in kopf's memo, where the event handlers find the cache and the queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import kopf

from sundial.backends.kubernetes.backend import KubernetesBackend
from sundial.backends.protocol import Backend, Key, lane_of
from sundial.backends.temporal.backend import TemporalBackend
from sundial.backends.temporal.client import Temporal
from sundial.backends.temporal.connections import ConnectionResolver
from sundial.backends.temporal.limits import RequestBudget
from sundial.backends.temporal.watch import ScheduleWatch
from sundial.collector import collect_every, collect_on_a_timer
from sundial.config import OperatorConfig
from sundial.events import EventRecorder
from sundial.kube import KubeClient, load_api_client
from sundial.metrics import Metrics
from sundial.planning.selector import parse_selector
from sundial.podwatch import PodWatch
from sundial.reconcile import Reconciler
from sundial.relist import fill_cache, keep_relisting, relist
from sundial.sharding import ShardCoordinator
from sundial.watchcache import WatchCache
from sundial.workqueue import WorkQueue

log = logging.getLogger(__name__)


async def start(memo: kopf.Memo) -> None:
    """Build everything, fill the cache, start the workers and the background tasks."""
    # __main__ read it already; `kopf run` of the handlers module reads it here.
    config: OperatorConfig = memo.get("config") or OperatorConfig.from_env()
    kube = KubeClient(load_api_client(config.kubeconfig, memo.get("identity")))
    # __main__ serves /metrics before the election (a standby is scraped too); `kopf run`
    # of the handlers module serves it here.
    metrics: Metrics | None = memo.get("metrics")
    if metrics is None:
        metrics = memo.metrics = Metrics()
        if config.metrics_port:
            metrics.serve(config.metrics_port)
    memo.exits = exits = contextlib.ExitStack()
    exits.enter_context(metrics.watching_gc())
    memo.cache = cache = WatchCache()
    # Every way a job can run (protocol.Backend), one per value of spec.backend: adding a
    # backend is one folder under backends/ and one entry here. Filled below, once the
    # queue the Temporal listing wakes exists; the queue reads it only when serving.
    backends: list[Backend[Any]] = []
    memo.selector = parse_selector(config.label_selector)
    # Passes that wait on one Temporal connection are capped below the workers: the rest
    # keep serving everything else however slow that Temporal or its budget is.
    per_connection = config.temporal_connections_per_address or max(1, config.workers // 2)
    memo.queue = queue = WorkQueue[Key](
        max_backoff=60.0,
        lane_of=lambda key: lane_of(backends, cache.scheduledjob(key)),
        lane_limit=per_connection,
        # However many connections: half the workers always serve everything else.
        lanes_limit=max(1, config.workers // 2),
    )
    metrics.watch_queue(queue.depth)
    metrics.watch_cache(cache.cached)
    # Sharded mode (SUNDIAL_SHARDS): only the shards this replica holds are cached (their
    # ScheduledJobs, CronJobs and Jobs), and served once listed.
    shard: ShardCoordinator | None = memo.get("shard")
    caches = None if shard is None else (lambda key: shard.caches(*key))
    # kopf starts watching only after start-up handlers: the cache is complete before
    # the first reconcile, so no pass mistakes "not listed yet" for "missing". A sharded
    # replica holds no shard yet: each shard it takes is listed then (_serve_shards).
    began = time.monotonic()
    if shard is None:
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
    connections = ConnectionResolver.from_config(kube, config, on_replaced=temporal.forget)
    watch = ScheduleWatch(
        temporal, queue.add_after, prefix=config.schedule_id_prefix,
        interval=config.temporal_list_seconds,
    ) if config.temporal_list_seconds else None  # fmt: skip
    backends.extend([
        KubernetesBackend(kube=kube, cache=cache, events=events),
        TemporalBackend(
            kube=kube, temporal=temporal, events=events, config=config,
            connections=connections, watch=watch, cache=cache,
        ),
    ])  # fmt: skip
    memo.reconciler = reconciler = Reconciler(
        kube=kube, cache=cache, events=events, metrics=metrics, backends=backends,
        serves=(lambda key: True) if shard is None else (lambda key: shard.serves(*key)),
    )  # fmt: skip
    memo.grace = config.shutdown_grace_seconds
    memo.workers = [
        asyncio.create_task(queue.run_worker(metrics.measured(reconciler)), name=f"worker-{i}")
        for i in range(config.workers)
    ]
    memo.tasks = [
        asyncio.create_task(queue.run_timer(), name="sundial-timer"),
        asyncio.create_task(
            keep_relisting(kube, cache, queue, config.namespaces, memo.selector, caches)
        ),
        asyncio.create_task(metrics.watch_loop_lag(), name="sundial-loop-lag"),
        asyncio.create_task(PodWatch(kube, cache, config.namespaces).run(), name="sundial-pods"),
        asyncio.create_task(collect_every(), name="sundial-gc"),
    ]
    if watch is not None:
        memo.tasks.append(asyncio.create_task(watch.run(), name="sundial-schedule-watch"))
    if shard is not None:
        _serve_shards(memo, shard, kube, budget, config)


def _serve_shards(
    memo: kopf.Memo,
    shard: ShardCoordinator,
    kube: KubeClient,
    budget: RequestBudget,
    config: OperatorConfig,
) -> None:
    """The coordinator's two moves, and its rounds among the operator's tasks. A shard
    taken is listed into the cache (its ScheduledJobs, CronJobs and Jobs) and queued,
    and served from then on; a shard let go is dropped from the cache, its passes queued
    (they find nothing to serve and forget it), and the Lease goes only once the passes
    running on it have ended. The Temporal budget follows the share, so the replicas
    together stay within SUNDIAL_TEMPORAL_REQUESTS_PER_SECOND."""
    cache: WatchCache = memo.cache
    queue: WorkQueue[Key] = memo.queue

    def share_budget() -> None:
        held = max(len(shard.held), 1)
        budget.per_second = config.temporal_requests_per_second * held / config.shards

    async def acquired(indices: tuple[int, ...]) -> None:
        share_budget()
        # One listing of each kind for all the shards taken (and those held already).
        while set(indices) & shard.held:
            try:
                await relist(kube, cache, config.namespaces, memo.selector,
                             lambda key: shard.caches(*key))  # fmt: skip
                break
            except Exception as error:  # the shards are held: their objects must come in
                log.warning("listing shards %s failed, again in 5s: %s", indices, error)
                await asyncio.sleep(5.0)
        # Served from the moment this returns (no await before it): the passes queued
        # here find every object of theirs listed.
        for key in cache.scheduledjob_keys():
            if shard.shard(key) in indices:
                queue.add(key)

    async def releasing(index: int) -> None:
        served = set(cache.scheduledjob_keys())
        for key in [k for k in cache.owners_held() if shard.shard(k) == index]:
            cache.let_go_scheduledjob(key)
            if key in served:
                queue.add(key, urgent=True)
        await queue.passes_ended(lambda key: shard.shard(key) == index)
        share_budget()

    shard.on_acquired = acquired
    shard.on_releasing = releasing
    memo.metrics.watch_shards(config.shards, held=lambda: len(shard.held),
                              conflict=lambda: shard.conflict is not None)  # fmt: skip
    memo.tasks.append(asyncio.create_task(shard.run(asyncio.Event()), name="sundial-shards"))


async def stop(memo: kopf.Memo) -> None:
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
    tasks: list[asyncio.Task[Any]] = [*workers, *memo.get("tasks", [])]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if "exits" in memo:
        memo.exits.close()
