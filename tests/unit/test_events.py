"""Event aggregation: a repeating problem is one Event with a count, not a storm."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sundial.api.models import ScheduledJob
from sundial.events import EventRecorder

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


class RecordingKube:
    """Stands in for KubeClient's two Event calls and remembers them."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, int]] = []

    async def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append(body)

    async def patch_event(self, namespace: str, name: str, count: int, last: datetime) -> None:
        self.patched.append((name, count))


SJ = ScheduledJob.model_validate(
    {"metadata": {"name": "a", "namespace": "n", "uid": "u"}, "spec": {"schedule": "@daily"}}
)


def record_at(recorder: EventRecorder, seconds: float, message: str = "m") -> None:
    asyncio.run(
        recorder.record(SJ, "Warning", "RunMissed", message, now=T0 + timedelta(seconds=seconds),
                        aggregate_key="ControllerDown")
    )  # fmt: skip


def test_repeats_raise_the_count_at_most_once_in_five_minutes() -> None:
    # A minute schedule's repeated skip is one record a minute: one patch in five of them,
    # the rate client-go's spam filter lets through for one object (1 per 5 minutes).
    kube = RecordingKube()
    recorder = EventRecorder(kube)  # type: ignore[arg-type]
    for second in (0, 60, 120, 180, 240, 300, 360):
        record_at(recorder, second, message=f"skip at {second}")
    assert len(kube.created) == 1
    created = kube.created[0]
    assert (created["type"], created["reason"], created["count"]) == ("Warning", "RunMissed", 1)
    assert created["involvedObject"]["uid"] == "u"
    assert kube.patched == [(created["metadata"]["name"], 6)], "one patch, at 300 s, count 6"


def test_after_the_window_a_new_event_is_posted() -> None:
    kube = RecordingKube()
    recorder = EventRecorder(kube)  # type: ignore[arg-type]
    record_at(recorder, 0)
    record_at(recorder, 11 * 60)
    assert len(kube.created) == 2
    assert kube.created[0]["metadata"]["name"] != kube.created[1]["metadata"]["name"]


def test_a_failing_post_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenKube(RecordingKube):
        async def create_event(self, namespace: str, body: dict[str, Any]) -> None:
            raise RuntimeError("apiserver down")

    recorder = EventRecorder(BrokenKube())  # type: ignore[arg-type]
    record_at(recorder, 0)  # must not raise
    assert "could not post Event RunMissed for n/a: apiserver down" in caplog.text
