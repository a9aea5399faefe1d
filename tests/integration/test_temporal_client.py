"""sundial.temporal.Temporal against the real dev server: what it keeps per connection."""

from __future__ import annotations

import asyncio

import pytest

from localstack import LocalStack
from sundial.backends.temporal.client import IDLE_SECONDS, Connection, Temporal
from sundial.backends.temporal.limits import RequestBudget

pytestmark = pytest.mark.cluster


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_connection_no_object_uses_any_more_is_dropped_client_and_all(
    stack: LocalStack,
) -> None:
    """Issue 25.13: clients (open gRPC channels), breakers and caps were kept for every
    connection ever used: a namespace's TemporalConnection outlived the namespace."""
    clock = Clock()
    temporal = Temporal(RequestBudget(20), clock=clock)
    gone = Connection(address=stack.temporal_address, namespace="default")
    kept = Connection(address=stack.temporal_address.replace("127.0.0.1", "localhost"),
                      namespace="default")  # fmt: skip

    async def scenario() -> tuple[int, int, list[Connection]]:
        await temporal.describe(gone, "sundial/churn/none")
        await temporal.describe(kept, "sundial/churn/none")
        both = temporal.held_connections()
        clock.now += IDLE_SECONDS / 2
        await temporal.describe(kept, "sundial/churn/none")  # in use: stays
        clock.now += IDLE_SECONDS / 2 + 1
        swept = temporal.sweep_idle()
        return both, temporal.held_connections(), swept

    both, after, swept = asyncio.run(scenario())
    assert both == 2
    assert swept == [gone]
    assert after == 1
