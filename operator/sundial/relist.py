"""The cache's listings: the first one, tried until the apiserver answers it, and a full
re-list every RELIST_SECONDS that drops what the watches missed (client-go's informer
resync)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, Callable, Collection
from typing import Any

from sundial.backends.protocol import Key
from sundial.health import Health
from sundial.kube import ApiException, KubeClient, api_error_message
from sundial.planning.cronjob import MANAGED_BY, MANAGED_BY_LABEL, SCHEDULEDJOB_LABEL
from sundial.planning.selector import ShareSelector
from sundial.watchcache import WatchCache, object_key, owner_key
from sundial.workqueue import WorkQueue

log = logging.getLogger(__name__)

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


# Sharded mode: whether this replica caches a ScheduledJob and what it owns (None: all
# that the labels admit).
Serves = Callable[[Key], bool] | None


async def relist(
    kube: KubeClient,
    cache: WatchCache,
    namespaces: list[str],
    share: ShareSelector,
    serves: Serves = None,
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
        for scope in scopes(namespaces, refused):
            try:
                pages = kube.list_pages(kind, scope, selector)
                await take_pages(cache, kind, pages, listed, serves)
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


def scopes(namespaces: list[str], refused: Collection[str]) -> list[list[str]]:
    """The listings of one kind: one per watched namespace (SUNDIAL_NAMESPACES) but those
    refused already by this re-list (asked once per re-list, not once per kind), or one
    of every namespace when none are named."""
    return [[ns] for ns in namespaces if ns not in refused] if namespaces else [[]]


async def take_pages(
    cache: WatchCache,
    kind: str,
    pages: AsyncIterable[list[dict[str, Any]]],
    listed: set[Key],
    serves: Serves = None,
) -> None:
    """A listing into the cache a page at a time: each page is in the cache (which keeps
    only what it needs of each object) before the next is asked for, so the whole listing
    is never held at once; `listed` gathers the keys seen. A ScheduledJob this replica
    does not serve (`serves`), and its CronJob and Jobs, are left out, as if not listed:
    the cache lets them go."""
    async for page in pages:
        await _take_page(cache, kind, page, listed, serves)


async def _take_page(
    cache: WatchCache, kind: str, page: list[dict[str, Any]], listed: set[Key], serves: Serves
) -> None:
    for index, item in enumerate(page):
        if index % RELIST_BATCH == RELIST_BATCH - 1:
            # Thousands of objects at a go would hold the event loop for a tenth of a
            # second and more: watch events and wake-ups wait no longer than a batch.
            await asyncio.sleep(0)
        if kind == "scheduledjobs":
            if serves is None or serves(object_key(item)):
                listed.add(cache.put_scheduledjob(item))
        elif serves is not None and (owner := owner_key(item)) and not serves(owner):
            continue  # a CronJob or Job of a ScheduledJob another replica serves
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
    share: ShareSelector,
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
    share: ShareSelector,
    serves: Serves = None,
) -> None:
    while True:
        await asyncio.sleep(RELIST_SECONDS)
        try:
            for key in await relist(kube, cache, namespaces, share, serves):
                queue.add(key)
        except Exception as error:
            log.warning("re-listing failed, will try again: %s", error)
