"""/healthz and /readyz for the kubelet's probes, served on the event loop itself.

- /healthz (liveness): the loop answers. A loop that stopped answering is the one failure
  a restart fixes; a slow apiserver or Temporal is not (a restart would only lose work).
- /readyz (readiness): the leader (or the only replica) once its cache is filled from the
  first listing; a standby while it can read the Lease. A standby counts as ready on
  purpose: a rolling update with maxUnavailable 0 waits for the new Pod to be Ready, and
  a new Pod is a standby until the old leader lets go; and the PodDisruptionBudget counts
  ready standbys, so a node drain never takes the last replica able to take over.
  In sharded mode, a replica once its cache is filled, whatever shards it holds, and the
  text says which (or why none: another shard count's replicas still hold Leases). Ready
  for the same reason as a standby: a rolling update that changes the count needs each
  new Pod Ready before it stops an old one, and the new ones serve only once the old are
  gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from sundial.leader import LeaderElector
from sundial.sharding import ShardCoordinator


@dataclass
class Health:
    elector: LeaderElector | None = None
    shards: ShardCoordinator | None = None
    cache_filled: bool = False
    # Why the first listing failed last, while it is tried again (relist.fill_cache).
    cache_problem: str | None = None
    clock: Callable[[], float] = field(default=time.monotonic)

    def readiness(self) -> tuple[bool, str]:
        if self.elector is None or self.elector.leading:
            if self.cache_filled:
                if self.shards is not None:
                    return True, _serving(self.shards)
                return True, "leading" if self.elector else "ready"
            if self.cache_problem:
                return False, f"filling the cache: the listing failed ({self.cache_problem})"
            return False, "filling the cache"
        contact = self.elector.last_contact
        if contact is not None and self.clock() - contact < self.elector.lease_duration:
            return True, "standby"
        return False, "standby, cannot read the Lease"

    async def serve(self, port: int) -> web.AppRunner:
        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        async def readyz(_: web.Request) -> web.Response:
            ready, why = self.readiness()
            return web.Response(status=200 if ready else 503, text=why + "\n")

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", port).start()
        return runner


def _serving(shards: ShardCoordinator) -> str:
    if shards.conflict:
        return f"serving no shard: {shards.conflict}"
    if not shards.serving:
        return f"serving no shard of {shards.shards} yet"
    return f"serving shards {', '.join(map(str, sorted(shards.serving)))} of {shards.shards}"
