"""The ended Pods of Sundial's Jobs, watched: when each run really ran, for its record,
with no request per run.

kopf selects by label on the client (a kopf watch of Pods would bring every Pod of the
cluster to the operator), so this one watch is the operator's own, selected on the
server: Sundial's label, and only Pods that ended (a field selector on status.phase). A
run costs it about two events (its Pod ended, its Pod deleted), where a LIST of the Job's
Pods on each ended run cost a request, and the apiserver a scan of the namespace's Pods.
The times improve on the Job's own; nothing waits for them: a Job whose ended Pods the
watch has not all shown yet has them listed (backends.kubernetes.backend._with_pod_times).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sundial.kube import KubeClient
from sundial.planning.cronjob import SCHEDULEDJOB_LABEL
from sundial.watchcache import WatchCache, object_key

log = logging.getLogger(__name__)

ENDED_PODS = "status.phase!=Pending,status.phase!=Running"
# Retries of a failing watch back off up to this (seconds).
MAX_BACKOFF = 60.0


class WatchExpired(Exception):
    """The resourceVersion watched from is gone from the server's history (410): list."""


@dataclass
class PodWatch:
    kube: KubeClient
    cache: WatchCache
    namespaces: list[str]  # empty: every namespace

    async def run(self) -> None:
        scopes: list[str | None] = [*self.namespaces] or [None]
        await asyncio.gather(*(self._follow(namespace) for namespace in scopes))

    async def _follow(self, namespace: str | None) -> None:
        """List, then watch from the listing, resumed from the last version seen each
        time the server ends it; listed afresh when that version has expired."""
        version: str | None = None
        failures = 0
        while True:
            try:
                if version is None:
                    version = await self._list(namespace)
                version = await self._watch(namespace, version)
                failures = 0
            except WatchExpired:
                version = None
            except Exception as error:  # the apiserver away, RBAC: the listings stand in
                failures += 1
                delay = min(MAX_BACKOFF, 2.0**failures)
                where = f" in {namespace}" if namespace else ""
                log.warning("watching ended Pods%s failed, again in %.0fs: %s", where, delay, error)
                version = None
                await asyncio.sleep(delay)

    async def _list(self, namespace: str | None) -> str:
        listed: set[tuple[str, str]] = set()
        version = ""
        async for page, listed_at in self.kube.list_pod_pages(
            namespace, SCHEDULEDJOB_LABEL, ENDED_PODS
        ):
            version = listed_at
            for pod in page:
                self.cache.put_pod(pod)
                listed.add(object_key(pod))
        self.cache.prune_pods(listed, namespace)
        return version

    async def _watch(self, namespace: str | None, version: str) -> str:
        async for event in self.kube.watch_pods(namespace, SCHEDULEDJOB_LABEL, ENDED_PODS, version):
            kind, pod = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if pod.get("code") == 410:
                    raise WatchExpired(pod.get("message"))
                raise RuntimeError(pod.get("message") or str(pod))
            version = (pod.get("metadata") or {}).get("resourceVersion") or version
            if kind == "DELETED":
                self.cache.remove_pod(pod)
            elif kind in ("ADDED", "MODIFIED"):
                self.cache.put_pod(pod)
        return version
