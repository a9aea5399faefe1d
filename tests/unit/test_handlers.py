"""The kopf event handlers run on the event loop, as kopf itself invokes them: the cache
and the work queue they feed are shared with the reconcile workers and are not thread-safe."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import kopf
from kopf._core.actions.invocation import invoke

import sundial.handlers  # noqa: F401  (registers the handlers)
from sundial.backend import Key
from sundial.watchcache import WatchCache
from sundial.workqueue import WorkQueue

LABELS = {"sundial.dev/scheduledjob": "invoices", "app.kubernetes.io/managed-by": "sundial"}


class RecordingQueue(WorkQueue[Key]):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def add(self, key: Key) -> None:
        self.threads.append(threading.get_ident())
        super().add(key)


def _body(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "labels": LABELS,
                         "resourceVersion": "7",
                         "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp":
                                         "2026-12-02T10:01:00Z"},
                         "creationTimestamp": "2026-12-02T10:01:02Z"}}  # fmt: skip


def test_every_registered_event_handler_runs_on_the_event_loop_thread() -> None:
    handlers = kopf.get_default_registry()._watching.get_all_handlers()
    assert len(handlers) == 3  # ScheduledJobs, CronJobs, Jobs

    async def scenario() -> tuple[int, list[int]]:
        memo = kopf.Memo(cache=WatchCache(), queue=RecordingQueue())
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
