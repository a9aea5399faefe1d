"""`python -m sundial` / `sundial`: run the operator in the foreground (`python -m sundial
worker`: Sundial's worker instead, sundial/worker/).

With leader election on, the replica first waits to lead, then runs kopf; losing the Lease
stops kopf at once and exits non-zero, so the kubelet restarts the Pod as a fresh standby
(as controller-runtime's managers do). SIGTERM stops kopf, lets the passes in flight
finish, releases the Lease and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import uuid
from typing import Any

import kopf

from sundial.config import OperatorConfig
from sundial.health import Health
from sundial.kube import LeaseClient, load_api_client
from sundial.leader import LeaderElector, default_identity
from sundial.metrics import Metrics
from sundial.sharding import ShardCoordinator

log = logging.getLogger("sundial")


# mallopt's parameter number for the most malloc arenas (glibc's malloc.h).
M_ARENA_MAX = -8


def _few_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives threads that allocate at once arenas of their own, up to eight per core,
    and an arena keeps what was freed in it: the kubernetes client's worker threads and the
    Temporal SDK's runtime would each hold a share of the process's peak. Two arenas, as
    MALLOC_ARENA_MAX=2 would set, before any thread starts. Not glibc (musl): nothing to do."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(M_ARENA_MAX, arenas)
    except (OSError, AttributeError, TypeError):
        pass


def main() -> None:
    _few_malloc_arenas()
    config = OperatorConfig.from_env()
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if sys.argv[1:2] == ["worker"]:
        from sundial.worker.main import serve_worker

        sys.exit(asyncio.run(serve_worker(config)))
    import sundial.handlers  # noqa: F401 - registers the kopf handlers

    sys.exit(asyncio.run(serve(config)))


def _leases(config: OperatorConfig, identity: str) -> LeaseClient:
    return LeaseClient(
        load_api_client(config.leader_election_kubeconfig or config.kubeconfig, identity),
        timeout=config.lease_duration_seconds / 3,
    )


def _elector(config: OperatorConfig, identity: str) -> LeaderElector:
    return LeaderElector(
        leases=_leases(config, identity),
        namespace=config.leader_election_namespace or config.cluster_resource_namespace,
        name=config.leader_election_lease,
        identity=identity,
        lease_duration=config.lease_duration_seconds,
    )


def _coordinator(config: OperatorConfig, identity: str) -> ShardCoordinator | None:
    """Sharded mode: this replica's shards, held through Leases (sharding.py); kopf runs
    at once, serving whatever shards the coordinator holds."""
    if config.shards <= 1:
        return None
    return ShardCoordinator(
        leases=_leases(config, identity),
        namespace=config.leader_election_namespace or config.cluster_resource_namespace,
        # The process, not only the Pod: two replicas given one SUNDIAL_POD_NAME by mistake
        # would each take the other's Leases for their own and both serve a shard.
        identity=f"{identity}_{uuid.uuid4().hex[:6]}",
        shards=config.shards,
        lease_duration=config.lease_duration_seconds,
    )


async def serve(config: OperatorConfig) -> int:
    identity = config.pod_name or default_identity()
    health = Health(elector=_elector(config, identity) if config.leader_election else None)
    runner = await health.serve(config.health_port) if config.health_port else None
    # Served from the start, a standby too: the Service and Prometheus name every replica,
    # and a target down for ever is an alert about nothing.
    metrics = Metrics()
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        if health.elector is not None and not await health.elector.acquire(stopping):
            return 0
        if await run_kopf(config, health, metrics, stopping, identity):
            # A lost Lease: out now, past the clean-up below, as kube-controller-manager
            # does (klog.FlushAndExit). asyncio.run would wait for the Lease client's
            # threads, still retrying through the route that failed (a sharded replica
            # holds several: 40 s and more seen through a stalled relay), and releasing a
            # Lease no longer held has nothing to give; the kubelet restarts the Pod.
            logging.shutdown()
            os._exit(1)
        return 0
    finally:
        if health.elector is not None:
            await health.elector.release()
            health.elector.leases.close()
        if runner is not None:
            await runner.cleanup()


async def run_kopf(
    config: OperatorConfig, health: Health, metrics: Metrics, stopping: asyncio.Event, identity: str
) -> bool:
    """kopf until a signal (kopf takes SIGINT/SIGTERM over once it runs) or a lost Lease;
    whether a Lease (the leader's, or a shard's) was lost."""
    stop_flag = asyncio.Event()
    shard = health.shards = _coordinator(config, identity)
    memo = kopf.Memo(
        config=config, health=health, metrics=metrics, identity=identity, abandon=False,
        shard=shard,
    )  # fmt: skip
    # Tasks made before kopf starts are not kopf's: it would wait 5 s for them at exit,
    # then cancel them.
    waits: list[asyncio.Task[Any]] = [asyncio.create_task(stopping.wait())]
    if health.elector is not None:
        waits.append(asyncio.create_task(health.elector.hold()))
    elif shard is not None:  # a shard lost: stop writing at once, as a lost leader does
        waits.append(asyncio.create_task(shard.lost.wait()))
    operator = asyncio.create_task(
        kopf.operator(
            standalone=True,
            clusterwide=not config.namespaces,
            namespaces=config.namespaces,
            stop_flag=stop_flag,
            memo=memo,
        )
    )
    done, _ = await asyncio.wait([operator, *waits], return_when=asyncio.FIRST_COMPLETED)
    lost = (health.elector is not None or shard is not None) and waits[-1] in done
    # A replica that lost the Lease must stop writing before the standby starts: no
    # grace for the passes in flight (the standby runs them again).
    memo.abandon = lost
    stop_flag.set()
    with contextlib.suppress(asyncio.CancelledError):
        await operator
    for wait in waits:
        wait.cancel()
    if shard is not None:
        shard.leases.close()
    return lost


if __name__ == "__main__":
    main()
