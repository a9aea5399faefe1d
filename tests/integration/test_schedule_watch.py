"""Temporal has no watch: the operator lists each connection's schedules every few seconds
and looks at those whose entry changed (backends/temporal/watch.py). With the per-object resync
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
    sample,
    scrape,
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


def test_a_new_object_at_a_connection_the_listing_vouches_for_is_created_without_a_describe(
    kubectl: Kubectl,
    watching_operator: OperatorProcess,
    temporal: TemporalSide,
    namespace: str,
) -> None:
    """Describe, create, describe was three requests per new object, a thousand objects
    150 s under the 20/s budget. Once a listing of the connection has answered, a new
    object's schedule is created straight away, then described: two."""
    kubectl.apply(hourly("vouching", namespace))
    eventually(lambda: ready(kubectl, "vouching", namespace), what="Ready")

    def requests(operation: str) -> float:
        metrics = scrape(watching_operator.metrics_url)
        return metrics.get(sample("sundial_temporal_requests_total", operation=operation), 0.0)

    listed = requests("ListSchedules")
    eventually(lambda: requests("ListSchedules") > listed, timeout=DEADLINE, what="a listing")
    before = {op: requests(op) for op in ("CreateSchedule", "DescribeSchedule")}
    names = [f"new-{index}" for index in range(5)]
    for name in names:
        kubectl.apply(hourly(name, namespace))
    for name in names:
        eventually(lambda name=name: ready(kubectl, name, namespace), what=f"{name} Ready")
    creates = requests("CreateSchedule") - before["CreateSchedule"]
    describes = requests("DescribeSchedule") - before["DescribeSchedule"]
    assert creates == len(names)
    # One describe after each create (describing first too would make it ten); two to
    # spare for a pass something else may cause meanwhile.
    assert describes <= len(names) + 2, describes
