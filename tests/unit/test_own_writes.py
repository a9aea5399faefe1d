"""Issue 14.4: read-your-writes. What Sundial wrote is read instead of the watch cache only
until the cache shows that write (or later); a retire or a deletion drops the memory."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from sundial.api.models import ScheduledJob
from sundial.backends.kubernetes.backend import KubernetesBackend
from sundial.backends.protocol import Pass
from sundial.ownwrites import OwnWrites
from sundial.watchcache import WatchCache

NOW = datetime(2026, 12, 4, 10, 2, 30, tzinfo=UTC)
KEY = ("shop", "invoices")
SJ = ScheduledJob.model_validate(
    {
        "metadata": {"name": "invoices", "namespace": "shop", "uid": "u1", "generation": 1},
        "spec": {"schedule": "* * * * *", "timeZone": "UTC", "job": {"image": "app:1"}},
    }
)


class Server:
    """CronJobs as the apiserver holds them, and the watch events it has yet to deliver."""

    def __init__(self) -> None:
        self.cronjobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pending: list[tuple[str, dict[str, Any]]] = []
        self.version = 100
        self.writes = 0

    def _next(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.version),
                                    "generation": 1}}  # fmt: skip

    async def apply_cronjob(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        live = self._next(manifest)
        self.cronjobs[KEY] = live
        self.pending.append(("ADDED", live))
        return live

    async def read_cronjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cronjobs.get((namespace, name))

    async def delete_cronjob(self, namespace: str, name: str, *, propagation: str) -> None:
        live = self.cronjobs.pop((namespace, name), None)
        if live is not None:
            self.pending.append(("DELETED", self._next(live)))

    async def list_all(self, *_: object) -> list[dict[str, Any]]:
        return []

    async def cronjob_event_messages(self, *_: object) -> list[str]:
        return []

    def deliver(self, cache: WatchCache) -> None:
        for type_, obj in self.pending:
            (cache.remove_cronjob if type_ == "DELETED" else cache.put_cronjob)(obj)
        self.pending.clear()


class NoEvents:
    async def record(self, *_: object, **__: object) -> None:
        pass


def test_switch_away_and_back_before_the_watch_catches_up_still_leaves_a_cronjob() -> None:
    server, cache = Server(), WatchCache()
    backend = KubernetesBackend(kube=server, cache=cache, events=NoEvents())  # type: ignore[arg-type]

    async def scenario() -> None:
        await backend.reconcile(
            Pass(KEY, SJ, NOW), None, hold=False
        )  # created; its event not seen yet
        assert KEY in server.cronjobs
        await backend.retire(Pass(KEY, SJ, NOW))  # switched to temporal
        # Never both active: the CronJob Sundial just wrote goes even though the cache
        # has not seen it yet.
        assert KEY not in server.cronjobs
        server.deliver(cache)
        await backend.retire(Pass(KEY, SJ, NOW))
        server.deliver(cache)
        await backend.reconcile(Pass(KEY, SJ, NOW), None, hold=False)  # switched back, same spec

    asyncio.run(scenario())
    assert KEY in server.cronjobs, "switched back to kubernetes but no CronJob was written"
    assert server.writes == 2


def test_a_cronjob_deleted_by_hand_is_made_again_once_the_deletion_is_seen() -> None:
    server, cache = Server(), WatchCache()
    backend = KubernetesBackend(kube=server, cache=cache, events=NoEvents())  # type: ignore[arg-type]

    async def scenario() -> None:
        await backend.reconcile(Pass(KEY, SJ, NOW), None, hold=False)
        await server.delete_cronjob(*KEY, propagation="Orphan")  # by hand, before the ADDED
        server.deliver(cache)
        await backend.reconcile(Pass(KEY, SJ, NOW), None, hold=False)

    asyncio.run(scenario())
    assert KEY in server.cronjobs
    assert server.writes == 2


def test_the_write_is_read_until_the_cache_shows_its_version_or_a_later_one() -> None:
    writes: OwnWrites[str] = OwnWrites()
    writes.remember(KEY, {"metadata": {"resourceVersion": "10"}}, "written")
    assert writes.read(KEY, None) == "written"  # not in the cache yet
    assert writes.read(KEY, 9) == "written"  # the cache still holds the version before
    assert writes.read(KEY, 10) is None  # caught up: the cache is the truth from now on
    assert writes.read(KEY, 9) is None
    writes.remember(KEY, {"metadata": {"resourceVersion": "12"}}, "again")
    writes.forget(KEY)
    assert writes.read(KEY, None) is None


def test_once_the_cache_shows_a_write_only_what_settled_keeps_is_held() -> None:
    """Memory per object: no second copy of an object the cache already holds."""
    statuses: OwnWrites[str] = OwnWrites()
    statuses.remember(KEY, {"metadata": {"resourceVersion": "10"}}, "a whole status")
    assert len(statuses) == 1
    assert statuses.read(KEY, 10) is None
    assert len(statuses) == 0
    assert statuses.last(KEY) is None

    kept: OwnWrites[str] = OwnWrites(settled=lambda value: value[:5])
    kept.remember(KEY, {"metadata": {"resourceVersion": "10"}}, "a whole CronJob")
    assert kept.read(KEY, 10) is None
    assert kept.last(KEY) == "a who"


def test_a_cronjob_the_apiserver_canonicalised_is_in_step_after_the_cache_caught_up() -> None:
    """The server writes `cpu: 500m` as given but `memory: 1024Mi` as `1Gi`: the live spec
    differs from the desired one, yet it is Sundial's write (same spec hash, generation),
    so nothing is applied again; that holds once the cache shows the write, when only the
    write's fingerprint is still remembered."""
    server, cache = Server(), WatchCache()
    backend = KubernetesBackend(kube=server, cache=cache, events=NoEvents())  # type: ignore[arg-type]
    document = SJ.model_dump(by_alias=True, exclude_none=True)
    document["spec"]["job"]["resources"] = {"limits": {"memory": "1024Mi"}}
    sj = ScheduledJob.model_validate(document)

    async def canonicalising_apply(manifest: dict[str, Any]) -> dict[str, Any]:
        live = await Server.apply_cronjob(server, manifest)
        container = live["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        container["resources"] = {"limits": {"memory": "1Gi"}}
        return live

    server.apply_cronjob = canonicalising_apply  # type: ignore[method-assign]

    async def scenario() -> None:
        await backend.reconcile(Pass(KEY, sj, NOW), None, hold=False)
        server.deliver(cache)
        await backend.reconcile(Pass(KEY, sj, NOW), None, hold=False)
        await backend.reconcile(Pass(KEY, sj, NOW), None, hold=False)

    asyncio.run(scenario())
    assert server.writes == 1
