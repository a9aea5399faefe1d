"""kopf handlers: watch events feed the watch cache and the work queue; nothing else (the
object graph is built in wiring.py, the listings are relist.py's).

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

import logging
from collections.abc import Callable
from typing import Any

import kopf

from sundial import wiring
from sundial.api.models import GROUP, PLURAL, VERSION
from sundial.backends.protocol import Key
from sundial.planning.cronjob import MANAGED_BY, MANAGED_BY_LABEL, SCHEDULEDJOB_LABEL
from sundial.planning.news import changed_by_someone, status_of
from sundial.reconcile import Reconciler
from sundial.watchcache import WatchCache, object_key, owner_key

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
    shard = memo.get("shard")
    if (
        type == "DELETED"
        or not memo.selector.matches(metadata.get("labels"))
        or (shard is not None and not shard.caches(*key))
    ):
        # Gone, or another operator's share (SUNDIAL_LABEL_SELECTOR), or a shard another
        # replica holds (SUNDIAL_SHARDS): one that just left this share is forgotten as if
        # deleted.
        if type == "DELETED" or previous is not None:
            cache.remove_scheduledjob(key, metadata.get("resourceVersion"))
            memo.queue.add(key, urgent=True)
        return
    # kopf's type None: an object of its listing, not a watch event.
    cache.put_scheduledjob(obj, confirmed=type is not None)
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
    obj = dict(body)
    shard = memo.get("shard")
    if shard is not None and (owner := owner_key(obj)) is not None and not shard.caches(*owner):
        return  # sharded mode: another replica's (let go with its ScheduledJob, if held)
    owner = remove(obj) if type_ == "DELETED" else put(obj)
    if owner is not None and memo.cache.scheduledjob(owner) is not None:
        memo.queue.add_after(owner, OWNED_EVENTS_FOLDED)


@kopf.on.event("batch", "v1", "cronjobs", labels=MANAGED)
async def cronjob_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _owned_event(type, body, memo, memo.cache.put_cronjob, memo.cache.remove_cronjob)


@kopf.on.event("batch", "v1", "jobs", labels=OWNED_JOBS)
async def job_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _owned_event(type, body, memo, memo.cache.put_job, memo.cache.remove_job)


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
    configure(settings)
    await wiring.start(memo)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    await wiring.stop(memo)
