"""`kubectl sundial import schedule` against the real Temporal dev server (issue 29):
schedules registered the way a deploy-time Job does, read back over the stack's
ClusterTemporalConnection and printed as ScheduledJobs: a cron Temporal stored as calendars
comes back as the cron, an interval as the interval, the policies, the pause and the
workflow action as they are. What a ScheduledJob cannot express is refused with what would
be lost. --adopt takes over a schedule under Sundial's own id: the ScheduledJob is Ready and
the schedule (Temporal's own description) fires at the same times, now Sundial's."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import RetryPolicy

from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    conditions_of,
    eventually,
    fresh_namespace,
    kubectl_sundial,
    namespace_name,
)

pytestmark = pytest.mark.cluster

RUN = uuid.uuid4().hex[:6]


def action(identity: str, **fields: Any) -> ScheduleActionStartWorkflow:
    return ScheduleActionStartWorkflow("Report", id=identity, task_queue="reports", **fields)


def schedules(namespace: str) -> dict[str, Schedule]:
    business = f"reports-{RUN}"
    return {
        business: Schedule(
            action=action(business, args=["daily", 3], execution_timeout=timedelta(hours=1),
                          retry_policy=RetryPolicy(maximum_attempts=3),
                          memo={"team": "data"}),
            spec=ScheduleSpec(cron_expressions=["*/15 9-17 * * 1-5"],
                              time_zone_name="Europe/Berlin"),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.BUFFER_ONE,
                                  catchup_window=timedelta(seconds=120)),
            state=ScheduleState(paused=True, note="db migration, ask #data"),
        ),
        f"sundial/{namespace}/every45": Schedule(
            action=action(f"sundial/{namespace}/every45"),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(
                every=timedelta(minutes=45), offset=timedelta(minutes=5))]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            state=ScheduleState(paused=True),
        ),
        f"two-crons-{RUN}": Schedule(
            action=action("x"), spec=ScheduleSpec(cron_expressions=["0 1 * * *", "0 2 * * *"]),
            state=ScheduleState(paused=True)),
        f"with-skip-{RUN}": Schedule(
            action=action("x"), spec=ScheduleSpec(
                cron_expressions=["0 3 * * *"],
                skip=[ScheduleCalendarSpec(month=[ScheduleRange(12)],
                                           day_of_month=[ScheduleRange(25)])]),
            state=ScheduleState(paused=True)),
        f"pause-on-failure-{RUN}": Schedule(
            action=action("x"), spec=ScheduleSpec(cron_expressions=["0 4 * * *"]),
            policy=SchedulePolicy(pause_on_failure=True), state=ScheduleState(paused=True)),
        f"limited-{RUN}": Schedule(
            action=action("x"), spec=ScheduleSpec(cron_expressions=["0 5 * * *"]),
            state=ScheduleState(paused=True, limited_actions=True, remaining_actions=3)),
    }  # fmt: skip


@pytest.fixture(scope="module")
def registered(
    kubectl: Kubectl, temporal: TemporalSide, operator: OperatorProcess
) -> Iterator[tuple[str, dict[str, Schedule]]]:
    with fresh_namespace(kubectl, namespace_name("import-schedules")) as namespace:
        made = schedules(namespace)

        async def register() -> None:
            for identity, schedule in made.items():
                await temporal.client.create_schedule(identity, schedule)

        temporal.run(register)
        yield namespace, made
        kubectl.run("delete", "scheduledjobs", "--all", "-n", namespace, "--timeout=60s",
                    check=False)  # fmt: skip

        async def remove() -> None:
            for identity in made:
                # adopted: Sundial deletes it with its object
                with contextlib.suppress(Exception):
                    await temporal.client.get_schedule_handle(identity).delete()

        temporal.run(remove)


def imported(kubectl: Kubectl, namespace: str, identity: str, *more: str) -> dict[str, Any]:
    result = kubectl_sundial(kubectl, "import", "schedule", identity, "--connection",
                             "cluster/default", "-n", namespace, *more)  # fmt: skip
    assert result.returncode == 0, result.stderr
    (document,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    return dict(document)


def test_a_cron_schedule_comes_back_as_the_scheduledjob_that_renders_it(
    kubectl: Kubectl, registered: tuple[str, dict[str, Schedule]]
) -> None:
    namespace, _ = registered
    sj = imported(kubectl, namespace, f"reports-{RUN}", "--name", "reports")
    assert sj["metadata"] == {"name": "reports", "namespace": namespace}
    assert sj["spec"] == {
        "backend": "temporal", "schedule": "*/15 9-17 * * 1-5", "timeZone": "Europe/Berlin",
        "concurrencyPolicy": "BufferOne", "startingDeadlineSeconds": 120, "suspend": True,
        "suspendNote": "db migration, ask #data",
        "workflow": {"type": "Report", "taskQueue": "reports", "id": f"reports-{RUN}",
                     "args": ["daily", 3], "executionTimeout": "1h",
                     "retryPolicy": {"initialInterval": "1s", "backoffCoefficient": 2.0,
                                     # the server's default, stated
                                     "maximumInterval": "100s",
                                     "maximumAttempts": 3},
                     "memo": {"team": "data"}},
        "temporalConnectionRef": {"kind": "ClusterTemporalConnection", "name": "default"},
    }  # fmt: skip


def test_what_a_scheduledjob_cannot_express_is_refused_with_what_would_be_lost(
    kubectl: Kubectl, registered: tuple[str, dict[str, Schedule]]
) -> None:
    namespace, _ = registered
    lost = {
        f"two-crons-{RUN}": "it has 2 specs",
        f"with-skip-{RUN}": "exclusion calendars (skip): they would be lost",
        f"pause-on-failure-{RUN}": "pauses on failure",
        f"limited-{RUN}": "limited to 3 more actions",
    }
    for identity, reason in lost.items():
        result = kubectl_sundial(kubectl, "import", "schedule", identity, "--connection",
                                 "cluster/default", "-n", namespace, "--adopt",
                                 "--name", "never")  # fmt: skip
        assert result.returncode == 1, (identity, result.stdout, result.stderr)
        # --adopt for an id not Sundial's is refused before anything else: nothing applied.
        assert "can take over only the schedule under the id" in result.stderr, result.stderr
        result = kubectl_sundial(kubectl, "import", "schedule", identity, "--connection",
                                 "cluster/default", "-n", namespace)  # fmt: skip
        assert result.returncode == 1, (identity, result.stdout)
        assert "NOT IMPORTED" in result.stdout
        assert reason in result.stdout, (identity, result.stdout)
    assert kubectl.get("scheduledjob", "never", namespace) is None


def test_a_schedule_under_sundials_id_is_adopted_and_fires_as_before(
    kubectl: Kubectl, temporal: TemporalSide, registered: tuple[str, dict[str, Schedule]]
) -> None:
    namespace, _ = registered
    identity = f"sundial/{namespace}/every45"
    handle = temporal.client.get_schedule_handle(identity)
    before = temporal.run(lambda: handle.describe())
    sj = imported(kubectl, namespace, identity, "--adopt")
    assert sj["spec"]["interval"] == {"every": "45m", "offset": "5m"}
    assert sj["metadata"]["name"] == "every45"

    def ready() -> bool:
        current = kubectl.get("scheduledjob", "every45", namespace) or {}
        return conditions_of(current.get("status", {})).get("Ready", {}).get("status") == "True"

    eventually(ready, timeout=90, what="the adopting ScheduledJob Ready")

    async def sundials() -> Any:
        described = await handle.describe()
        memo = await described.memo()
        return described if memo.get("sundial.dev/scheduledjob") == f"{namespace}/every45" else None

    after = eventually(lambda: temporal.run(sundials), timeout=60, what="the schedule Sundial's")
    assert after.info.next_action_times[:3] == before.info.next_action_times[:3]
    assert after.schedule.state.paused
