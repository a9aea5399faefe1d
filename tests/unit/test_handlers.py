"""The kopf event handlers run on the event loop, as kopf itself invokes them: the cache
and the work queue they feed are shared with the reconcile workers and are not thread-safe."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from kopf._core.actions.invocation import invoke

import sundial.handlers
from sundial.backends.protocol import Key
from sundial.planning.selector import parse_selector
from sundial.watchcache import WatchCache
from sundial.workqueue import WorkQueue

LABELS = {"sundial.dev/scheduledjob": "invoices", "app.kubernetes.io/managed-by": "sundial"}


class RecordingQueue(WorkQueue[Key]):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def add(self, key: Key, *, urgent: bool = False) -> None:
        self.threads.append(threading.get_ident())
        super().add(key, urgent=urgent)

    def add_after(self, key: Key, delay: float) -> None:
        self.threads.append(threading.get_ident())
        super().add_after(key, delay)


def _body(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "labels": LABELS,
                         "resourceVersion": "7",
                         "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp":
                                         "2026-12-02T10:01:00Z"},
                         "creationTimestamp": "2026-12-02T10:01:02Z"}}  # fmt: skip


def _memo(queue: WorkQueue[Key], selector: str = "") -> kopf.Memo:
    """What the start-up handler leaves in the memo, with ScheduledJob shop/invoices cached."""
    cache = WatchCache()
    metadata = {"name": "invoices", "namespace": "shop", "resourceVersion": "3"}
    cache.put_scheduledjob({"metadata": {**metadata, "labels": {"team": "a"}}})
    return kopf.Memo(cache=cache, queue=queue, selector=parse_selector(selector))


def _handler(name: str) -> Any:
    return next(
        h for h in kopf.get_default_registry()._watching.get_all_handlers()
        if h.fn.__name__ == name
    )  # fmt: skip


def test_every_registered_event_handler_runs_on_the_event_loop_thread() -> None:
    handlers = kopf.get_default_registry()._watching.get_all_handlers()
    assert len(handlers) == 3  # ScheduledJobs, CronJobs, Jobs

    async def scenario() -> tuple[int, list[int]]:
        memo = _memo(RecordingQueue())
        settings = kopf.OperatorSettings()
        for handler in handlers:
            for type_ in ("ADDED", "MODIFIED", "DELETED"):
                body = kopf.Body(_body("invoices"))
                await invoke(handler.fn, settings=settings,
                             kwargs={"type": type_, "body": body, "memo": memo,
                                     "event": {"type": type_, "object": body}})  # fmt: skip
        return threading.get_ident(), memo.queue.threads

    loop_thread, threads = asyncio.run(scenario())
    assert threads, "the handlers queued nothing"
    assert set(threads) == {loop_thread}


def test_a_burst_of_events_from_owned_objects_is_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CronJob controller creates a Job, updates the CronJob's status and the Job
    controller the Job's, within half a second: each event alone would be a pass and a
    status write (issue 11: three writes per run). They are folded into one pass."""
    # The fold shortened from its 5 s, so the test need not wait that long.
    monkeypatch.setattr(sundial.handlers, "OWNED_EVENTS_FOLDED", 1.0)
    job_handler = next(
        h for h in kopf.get_default_registry()._watching.get_all_handlers()
        if h.fn.__name__ == "job_event"
    )  # fmt: skip

    async def scenario() -> list[float]:
        queue: WorkQueue[Key] = WorkQueue()
        memo = _memo(queue)
        passes: list[float] = []
        began = asyncio.get_running_loop().time()

        async def reconcile(key: Key) -> None:
            passes.append(asyncio.get_running_loop().time() - began)

        tasks = [asyncio.create_task(queue.run_timer()),
                 asyncio.create_task(queue.run_worker(reconcile))]  # fmt: skip
        for version in ("7", "8", "9"):
            body = kopf.Body({**_body("invoices-1"), "metadata": {
                **_body("invoices-1")["metadata"], "resourceVersion": version}})  # fmt: skip
            await invoke(job_handler.fn, settings=kopf.OperatorSettings(),
                         kwargs={"type": "MODIFIED", "body": body, "memo": memo,
                                 "event": {"type": "MODIFIED", "object": body}})  # fmt: skip
            await asyncio.sleep(0.15)
        await asyncio.sleep(1.5)
        for task in tasks:
            task.cancel()
        return passes

    passes = asyncio.run(scenario())
    assert len(passes) == 1, passes


def _event(handler: Any, memo: kopf.Memo, type_: str, body: dict[str, Any]) -> Any:
    return invoke(handler.fn, settings=kopf.OperatorSettings(),
                  kwargs={"type": type_, "body": kopf.Body(body), "memo": memo,
                          "event": {"type": type_, "object": body}})  # fmt: skip


def test_scheduledjobs_outside_the_operators_share_are_neither_cached_nor_queued() -> None:
    async def scenario() -> tuple[WatchCache, WorkQueue[Key]]:
        memo = _memo(RecordingQueue(), selector="team=a")
        other = {"metadata": {"name": "reports", "namespace": "shop",
                              "resourceVersion": "4", "labels": {"team": "b"}}}  # fmt: skip
        await _event(_handler("scheduledjob_event"), memo, "ADDED", other)
        return memo.cache, memo.queue

    cache, queue = asyncio.run(scenario())
    assert cache.scheduledjob(("shop", "reports")) is None
    assert queue.threads == []


def test_a_scheduledjob_that_leaves_the_share_is_forgotten() -> None:
    async def scenario() -> tuple[WatchCache, RecordingQueue]:
        queue = RecordingQueue()
        memo = _memo(queue, selector="team=a")
        moved = {"metadata": {"name": "invoices", "namespace": "shop",
                              "resourceVersion": "5", "labels": {"team": "b"}}}  # fmt: skip
        await _event(_handler("scheduledjob_event"), memo, "MODIFIED", moved)
        return memo.cache, queue

    cache, queue = asyncio.run(scenario())
    assert cache.scheduledjob(("shop", "invoices")) is None
    assert len(queue.threads) == 1  # one pass, which forgets it


def test_owned_objects_of_scheduledjobs_not_served_here_queue_nothing() -> None:
    async def scenario() -> RecordingQueue:
        queue = RecordingQueue()
        memo = _memo(queue)
        body = _body("reports-1")
        body["metadata"]["labels"] = {**LABELS, "sundial.dev/scheduledjob": "reports"}
        await _event(_handler("job_event"), memo, "ADDED", body)
        return queue

    assert asyncio.run(scenario()).threads == []


# Sundial's own status write coming back, before or after its answer, needs no pass (the
# Reconciler's write against the real apiserver): tests/integration/test_status_echo.py.


def test_the_finalizer_sundial_set_coming_back_needs_no_pass_but_a_status_by_someone_does() -> None:
    """A new temporal-backed object's first pass sets the finalizer: its watch event moved
    neither spec nor status, and a second pass for it cost a Temporal describe per new
    object. A status written by someone else still queues one."""

    async def scenario() -> tuple[int, int]:
        queue = RecordingQueue()
        memo = _memo(queue, selector="team=a")
        cached = memo.cache.scheduledjob(("shop", "invoices"))
        finalized = {**cached, "metadata": {
            **cached["metadata"], "resourceVersion": "4",
            "finalizers": ["sundial.dev/temporal-schedule"]}}  # fmt: skip
        await _event(_handler("scheduledjob_event"), memo, "MODIFIED", finalized)
        after_finalizer = len(queue.threads)
        edited = {**finalized, "metadata": {**finalized["metadata"], "resourceVersion": "5"},
                  "status": {"observedGeneration": 1}}  # fmt: skip
        await _event(_handler("scheduledjob_event"), memo, "MODIFIED", edited)
        return after_finalizer, len(queue.threads)

    after_finalizer, after_status = asyncio.run(scenario())
    assert after_finalizer == 0
    assert after_status == 1


def test_kopf_builds_no_diff_base_for_sundials_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf deep-copies every object on every watch event to diff it for change handlers;
    Sundial has none. Through kopf's own event processing, with Sundial's settings: the
    handler runs and nothing is copied."""
    from kopf._cogs.configs import diffbase
    from kopf._core.actions import lifecycles
    from kopf._core.engines.indexing import OperatorIndexers
    from kopf._core.reactor import inventory, processing

    copies: list[object] = []
    deepcopy = copy.deepcopy

    def counting_deepcopy(value: object, *args: Any) -> object:
        copies.append(value)
        return deepcopy(value, *args)

    monkeypatch.setattr(diffbase.copy, "deepcopy", counting_deepcopy)
    resource = kopf.Resource("sundial.dev", "v1alpha1", "scheduledjobs", namespaced=True)
    body = {"apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": "invoices", "namespace": "shop", "uid": "u1",
                         "resourceVersion": "9", "generation": 2,
                         "annotations": {"sundial.dev/run-now": "a"}},
            "spec": {"schedule": "* * * * *", "job": {"image": "app:1"}}}  # fmt: skip

    async def scenario(settings: kopf.OperatorSettings) -> RecordingQueue:
        queue = RecordingQueue()
        await processing.process_resource_event(
            lifecycle=lifecycles.all_at_once,
            indexers=OperatorIndexers(),
            registry=kopf.get_default_registry(),
            settings=settings,
            memories=inventory.ResourceMemories(),
            memobase=_memo(queue),
            resource=resource,
            raw_event={"type": "MODIFIED", "object": body},
            event_queue=asyncio.Queue(),
            no_throttling=True,
        )
        return queue

    settings = kopf.OperatorSettings()
    sundial.handlers.configure(settings)
    queue = asyncio.run(scenario(settings))
    assert queue.threads, "the ScheduledJob's handler ran"
    assert copies == []
    # kopf as it comes copies (so this test can tell).
    asyncio.run(scenario(kopf.OperatorSettings()))
    assert copies


async def pages_of(*pages: list[dict[str, Any]]) -> AsyncIterator[list[dict[str, Any]]]:
    """A listing's pages, as KubeClient.list_pages yields them."""
    for page in pages:
        yield page


def test_a_relist_of_thousands_of_objects_lets_the_event_loop_turn_between_batches() -> None:
    """Putting thousands of listed objects in the cache at a go held the event loop for a
    tenth of a second and more: watch events and the lag sampler waited behind it."""
    from sundial.relist import RELIST_BATCH, take_pages

    page = [{"metadata": {"name": f"sj-{i}", "namespace": "shop", "resourceVersion": str(i + 1)}}
            for i in range(2000)]  # fmt: skip

    async def scenario() -> tuple[int, int, int]:
        turns = 0

        async def turning() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(turning())
        await asyncio.sleep(0)
        cache = WatchCache()
        listed: set[Key] = set()
        await take_pages(cache, "scheduledjobs", pages_of(page), listed)
        ticker.cancel()
        return turns, len(cache.scheduledjob_keys()), len(listed)

    turns, cached, listed = asyncio.run(scenario())
    assert cached == listed == 2000
    assert turns >= 2000 // RELIST_BATCH


def test_a_relist_takes_a_page_into_the_cache_before_it_asks_for_the_next() -> None:
    """The whole listing held at once (every object with its managedFields) raised the
    operator's memory by some 70 MiB every ten minutes at 5,000 objects."""
    from sundial.relist import take_pages

    cache = WatchCache()
    cached_when_asked: list[int] = []

    async def paging() -> AsyncIterator[list[dict[str, Any]]]:
        for page in range(4):
            cached_when_asked.append(len(cache.scheduledjob_keys()))
            yield [{"metadata": {"name": f"sj-{page}-{i}", "namespace": "shop",
                                 "resourceVersion": str(page * 1000 + i + 1)}}
                   for i in range(500)]  # fmt: skip

    asyncio.run(take_pages(cache, "scheduledjobs", paging(), set()))
    assert cached_when_asked == [0, 500, 1000, 1500]
    assert len(cache.scheduledjob_keys()) == 2000


def test_a_sharded_listing_keeps_only_the_cronjobs_and_jobs_of_scheduledjobs_it_caches() -> None:
    """Sharded mode: another replica's objects (by their owner's namespace/name) are left
    out of the cache, CronJobs and Jobs as well as ScheduledJobs."""
    from sundial.relist import take_pages

    def owned(name: str, owner: str, version: int) -> dict[str, Any]:
        labels = {"sundial.dev/scheduledjob": owner, "app.kubernetes.io/managed-by": "sundial"}
        return {"metadata": {"name": name, "namespace": "shop", "labels": labels,
                             "resourceVersion": str(version)},
                "status": {"active": [{"name": "x"}]}}  # fmt: skip

    mine = ("shop", "mine")
    cache = WatchCache()
    listed: dict[str, set[Key]] = {"cronjobs": set(), "jobs": set()}
    for kind, page in (
        ("cronjobs", [owned("mine", "mine", 1), owned("theirs", "theirs", 2)]),
        ("jobs", [owned("mine-1", "mine", 3), owned("theirs-1", "theirs", 4)]),
    ):
        asyncio.run(take_pages(cache, kind, pages_of(page), listed[kind], lambda k: k == mine))
    assert cache.owners_held() == {mine}
    assert listed == {"cronjobs": {mine}, "jobs": {("shop", "mine-1")}}


def test_a_namespace_refused_in_a_relist_is_asked_once_not_once_per_kind() -> None:
    """Issue 25.5: the listings of each kind leave out the namespaces the apiserver
    refused earlier in the same re-list (relist.scopes). The refusals themselves, from
    the real apiserver's RBAC: tests/integration/test_relist_refusals.py."""
    from sundial.relist import scopes

    assert scopes(["gone", "kept"], {}) == [["gone"], ["kept"]]
    assert scopes(["gone", "kept"], {"gone"}) == [["kept"]]
    assert scopes(["gone"], {"gone"}) == []
    assert scopes([], {}) == [[]], "no namespaces named: one listing of all of them"


def test_a_scheduledjob_from_a_watch_event_is_confirmed_and_one_from_kopfs_listing_is_not() -> None:
    """A watch event says the object existed at its resourceVersion; kopf's own listing
    (type None) may hold one deleted meanwhile, so a pass confirms it before a create."""
    key = ("shop", "reports")

    async def scenario() -> list[bool]:
        memo = _memo(RecordingQueue())
        body = {"metadata": {"name": "reports", "namespace": "shop", "resourceVersion": "4"}}
        seen = []
        for type_, version in ((None, "4"), ("MODIFIED", "5"), (None, "6")):
            body["metadata"]["resourceVersion"] = version
            await _event(_handler("scheduledjob_event"), memo, type_, copy.deepcopy(body))
            seen.append(memo.cache.scheduledjob_confirmed(key))
        return seen

    assert asyncio.run(scenario()) == [False, True, False]
