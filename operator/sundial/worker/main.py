"""`python -m sundial worker`: serves Sundial's task queue on each connection it is given
(SUNDIAL_WORKER_CONNECTIONS, default the default ClusterTemporalConnection) until SIGTERM,
which lets the activities in flight stop without deleting their Jobs (the next attempt, on
any worker, waits on them again)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from datetime import timedelta

from temporalio.worker import Worker

from sundial.backends.temporal.client import Temporal
from sundial.backends.temporal.connections import ConnectionResolver
from sundial.backends.temporal.limits import RequestBudget
from sundial.config import OperatorConfig
from sundial.errors import Retry, SpecProblem
from sundial.health import Health
from sundial.kube import KubeClient, load_api_client
from sundial.leader import default_identity
from sundial.planning.temporal_schedule import worker_task_queue
from sundial.worker.activities import RunJobActivities
from sundial.worker.workflows import RunJob

log = logging.getLogger("sundial.worker")

# Waits in flight at once per connection: each is a coroutine, not a thread.
MAX_CONCURRENT_ACTIVITIES = 1000
# Until a served connection can be read (its resource or Secret not there yet).
CONNECTION_RETRY_SECONDS = 5.0


async def serve_worker(config: OperatorConfig) -> int:
    identity = config.pod_name or default_identity()
    health = Health(elector=None)
    runner = await health.serve(config.health_port) if config.health_port else None
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    kube = KubeClient(load_api_client(config.kubeconfig, identity))
    temporal = Temporal(RequestBudget(config.temporal_requests_per_second))
    connections = ConnectionResolver.from_config(kube, config, on_replaced=temporal.forget)
    names = config.worker_connections or [config.default_connection]
    workers: list[Worker] = []
    try:
        for name in names:
            worker = await _worker(config, kube, temporal, connections, name, stopping)
            if worker is None:
                return 0  # stopped before it could start
            workers.append(worker)
        health.cache_filled = True  # ready: polling every served connection
        log.info("worker %s serving %s on %s", identity, worker_task_queue(
            config.schedule_id_prefix), ", ".join(names))  # fmt: skip
        runs = [asyncio.create_task(worker.run()) for worker in workers]
        stop = asyncio.create_task(stopping.wait())
        done, _ = await asyncio.wait([*runs, stop], return_when=asyncio.FIRST_COMPLETED)
        for worker in workers:
            await worker.shutdown()
        for task in [*runs, stop]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        return 0 if stop in done else 1
    finally:
        if runner is not None:
            await runner.cleanup()


async def _worker(
    config: OperatorConfig,
    kube: KubeClient,
    temporal: Temporal,
    connections: ConnectionResolver,
    name: str,
    stopping: asyncio.Event,
) -> Worker | None:
    """The worker of one served connection, once it can be read and reached."""
    while not stopping.is_set():
        try:
            serving = await connections.cluster_connection(name)
            client = await temporal.client(serving)
        except (SpecProblem, Retry) as problem:
            log.warning("cannot serve ClusterTemporalConnection %s yet: %s", name, problem)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), CONNECTION_RETRY_SECONDS)
            continue
        activities = RunJobActivities(
            kube, temporal, connections, serving, config.schedule_id_prefix
        )
        return Worker(
            client,
            task_queue=worker_task_queue(config.schedule_id_prefix),
            workflows=[RunJob],
            activities=[activities.start_job, activities.wait_for_job, activities.delete_job],
            max_concurrent_activities=MAX_CONCURRENT_ACTIVITIES,
            graceful_shutdown_timeout=timedelta(seconds=5),
        )
    return None
