"""EventRecorder against the real apiserver: a repeating problem is one Event whose count
the apiserver holds (posted once, patched at most once in five minutes), a new one after
the aggregation window, and a post the apiserver refuses is logged, never raised. The
moments are passed in (`now`); the aggregation rule itself: tests/unit/test_events.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localstack import LocalStack
from sundial.api.models import ScheduledJob
from sundial.events import EventRecorder
from sundial.kube import KubeClient, load_api_client
from support import Kubectl

pytestmark = pytest.mark.cluster

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def scheduledjob(namespace: str, uid: str) -> ScheduledJob:
    return ScheduledJob.model_validate({
        "metadata": {"name": "a", "namespace": namespace, "uid": uid},
        "spec": {"schedule": "@daily"},
    })  # fmt: skip


def record_at(stack: LocalStack, sj: ScheduledJob, *seconds: float) -> None:
    """One recorder, the same problem recorded at these moments (T0 + seconds)."""
    api_client = load_api_client(str(stack.kubeconfig))

    async def scenario() -> None:
        recorder = EventRecorder(KubeClient(api_client))
        for second in seconds:
            await recorder.record(
                sj, "Warning", "RunMissed", f"skip at {second}",
                now=T0 + timedelta(seconds=second), aggregate_key="ControllerDown",
            )  # fmt: skip

    try:
        asyncio.run(scenario())
    finally:
        api_client.close()


def events_of(kubectl: Kubectl, namespace: str, uid: str) -> list[dict[str, Any]]:
    return kubectl.events(namespace, involvedObject_uid=uid)


def test_repeats_are_one_event_whose_count_is_written_at_most_once_in_five_minutes(
    stack: LocalStack, kubectl: Kubectl, namespace: str
) -> None:
    sj = scheduledjob(namespace, "u-repeats")
    record_at(stack, sj, 0, 60, 120, 180, 240, 300, 360)
    (event,) = events_of(kubectl, namespace, "u-repeats")
    assert (event["type"], event["reason"]) == ("Warning", "RunMissed")
    assert event["involvedObject"]["kind"] == "ScheduledJob"
    assert event["message"] == "skip at 0"
    # Counted seven times; the count was written once, at 300 s (6), not at 360 s.
    assert event["count"] == 6
    assert event["lastTimestamp"] == "2026-12-02T10:05:00Z"


def test_after_the_window_a_new_event_is_posted(
    stack: LocalStack, kubectl: Kubectl, namespace: str
) -> None:
    sj = scheduledjob(namespace, "u-window")
    record_at(stack, sj, 0, 11 * 60)
    events = events_of(kubectl, namespace, "u-window")
    assert len(events) == 2
    assert [e["count"] for e in events] == [1, 1]
    assert events[0]["metadata"]["name"] != events[1]["metadata"]["name"]


def test_a_post_the_apiserver_refuses_is_logged_not_raised(
    stack: LocalStack, caplog: pytest.LogCaptureFixture, namespace: str
) -> None:
    gone = f"{namespace}-gone"  # no such namespace: the apiserver answers 404
    record_at(stack, scheduledjob(gone, "u-refused"), 0)  # must not raise
    assert f"could not post Event RunMissed for {gone}/a:" in caplog.text
    assert "not found" in caplog.text.lower()
