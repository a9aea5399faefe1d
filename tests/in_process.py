"""The operator's object graph in the test's own process, as wiring.start builds it for the
operator (a real KubeClient to the stack's apiserver, the real Temporal client, the watch
cache, the work queue and its workers), without kopf: a test drives the event handlers and
the reconcile passes itself, so it can tell what one event or one pass does."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kopf

from sundial import wiring
from sundial.config import OperatorConfig


@contextlib.asynccontextmanager
async def operator_graph(
    kubeconfig: Path, namespace: str, **settings: Any
) -> AsyncIterator[kopf.Memo]:
    """wiring.start over `namespace` only (its first listing included), wiring.stop after.
    The memo holds `cache`, `queue`, `selector` and `reconciler`, as kopf's does."""
    config = OperatorConfig(kubeconfig=str(kubeconfig), namespaces=[namespace], metrics_port=0,
                            health_port=0, **settings)  # fmt: skip
    memo = kopf.Memo(config=config)
    thresholds = gc.get_threshold()
    try:
        await wiring.start(memo)
        yield memo
    finally:
        await wiring.stop(memo)
        # The operator's start takes the collector's timing over (collector.py): the test
        # process gets its own back.
        gc.unfreeze()
        gc.set_threshold(*thresholds)
