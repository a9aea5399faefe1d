"""Workflows the integration tests' Temporal worker runs (kept in their own module: the
workflow sandbox re-imports it)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

TASK_QUEUE = "sundial-tests"


@workflow.defn(name="SundialTick")
class Tick:
    """Finishes at once, returning what it was given: proof that a run really happened."""

    @workflow.run
    async def run(self, greeting: str = "tick") -> str:
        return f"{greeting} from {workflow.info().workflow_id}"


@workflow.defn(name="SundialSleep")
class Sleep:
    """Runs for the given seconds: keeps a run active across later slots."""

    @workflow.run
    async def run(self, seconds: float = 30.0) -> str:
        await asyncio.sleep(seconds)
        return "slept"


@workflow.defn(name="SundialFail")
class Fail:
    """Fails at once with an application error of its own type (no retries)."""

    @workflow.run
    async def run(self, reason: str = "card expired") -> str:
        raise ApplicationError(reason, type="PaymentDeclined", non_retryable=True)


_ = timedelta  # timeouts in tests are given as Go durations in the ScheduledJob
