"""Temporal has no watch: the operator lists each connection's schedules every few seconds
and looks at those whose entry changed (temporal_watch.py). With the per-object resync
at ten minutes, everything here reaches status only through that listing: a pause by
hand, an edit by hand, a deletion by hand, and a run started by hand that ends."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import ScheduleIntervalSpec

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    eventually,
    in_shard,
    ready,
    ready_condition,
    sj_status,
    tamper_interval,
)
from support import temporal_scheduledjob as scheduledjob

pytestmark = pytest.mark.cluster

SHARD = "schedule-watch"
# Far beyond every deadline below: only the listing can bring a change in time.
RESYNC_SECONDS = 600
LIST_SECONDS = 2
# A change reaches status within a listing or two and a pass, on a loaded machine.
DEADLINE = 45


@pytest.fixture(scope="module")
def watching_operator(stack: LocalStack, crd_installed: None) -> Iterator[OperatorProcess]:
    process = OperatorProcess.on(
        stack, "schedule-watch",
        temporal_resync_seconds=str(RESYNC_SECONDS),
        temporal_list_seconds=str(LIST_SECONDS),
        label_selector=f"sundial.dev/shard={SHARD}",
    )  # fmt: skip
    process.start()
    yield process
    process.stop()


def hourly(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A schedule whose next slot is far off: no slot wakes it during the test."""
    return in_shard(scheduledjob(name, namespace, interval={"every": "1h"}, **spec), SHARD)


def test_changes_made_in_temporal_reach_status_through_the_listing(
    kubectl: Kubectl,
    watching_operator: OperatorProcess,
    temporal: TemporalSide,
    namespace: str,
) -> None:
    temporal.ensure_worker()
    kubectl.apply(hourly("watched", namespace))
    eventually(lambda: ready(kubectl, "watched", namespace), what="Ready")
    handle = temporal.client.get_schedule_handle(f"sundial/{namespace}/watched")

    # A run started by hand in Temporal, which ends: its outcome is in recentRuns.
    temporal.run(handle.trigger)
    eventually(
        lambda: any(
            run.get("result") == "Succeeded"
            for run in sj_status(kubectl, "watched", namespace).get("recentRuns", [])
        ),
        timeout=DEADLINE,
        what="the run started by hand, ended, in recentRuns",
    )

    # A pause by hand is reported.
    temporal.run(lambda: handle.pause(note="paused by the on-call"))
    eventually(
        lambda: ready_condition(kubectl, "watched", namespace).get("reason") == "PausedInTemporal",
        timeout=DEADLINE,
        what="pause by hand reported",
    )
    temporal.run(lambda: handle.unpause(note="resumed by the on-call"))
    eventually(
        lambda: ready_condition(kubectl, "watched", namespace).get("reason") == "Reconciled",
        timeout=DEADLINE,
        what="unpause by hand reported",
    )

    # An edit by hand is undone.
    temporal.run(lambda: handle.update(tamper_interval))
    eventually(
        lambda: (
            list(temporal.run(handle.describe).schedule.spec.intervals)
            == [ScheduleIntervalSpec(every=timedelta(hours=1))]
        ),
        timeout=DEADLINE,
        what="edit by hand undone",
    )

    # A deletion by hand is made good.
    temporal.run(handle.delete)
    eventually(
        lambda: _exists(temporal, handle.id),
        timeout=DEADLINE,
        what="schedule deleted by hand made again",
    )


def _exists(temporal: TemporalSide, schedule_id: str) -> bool:
    try:
        temporal.run(temporal.client.get_schedule_handle(schedule_id).describe)
    except Exception:
        return False
    return True
