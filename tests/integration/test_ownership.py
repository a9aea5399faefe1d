"""Issue 14.5: Sundial never writes over a CronJob it did not create; adoption is explicit."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import ScheduleActionStartWorkflow
from temporalio.service import RPCError, RPCStatusCode

from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    consistently,
    eventually,
    ready,
    ready_condition,
    their_schedule,
)
from temporal_workflows import TASK_QUEUE

pytestmark = pytest.mark.cluster

ADOPT = "sundial.dev/adopt"


def users_cronjob(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {"team": "billing"}},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "app", "image": "registry.example/theirs:7"}],
            }}}},
        },
    }  # fmt: skip


def scheduledjob(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedule": "*/5 * * * *", "job": {"image": "registry.example/ours:1"}},
    }


def test_an_unowned_cronjob_is_left_alone_until_adoption_is_asked_for(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    kubectl.apply(users_cronjob("nightly", namespace))
    theirs = kubectl.get("cronjob", "nightly", namespace)
    assert theirs is not None
    kubectl.apply(scheduledjob("nightly", namespace))

    condition = eventually(
        lambda: (
            (c := ready_condition(kubectl, "nightly", namespace)).get("reason") == "CronJobExists"
            and c
        ),
        what="Ready=False CronJobExists",
    )
    assert condition["status"] == "False"
    assert ADOPT in condition["message"], "the message says how to adopt"

    def untouched() -> bool:
        now = kubectl.get("cronjob", "nightly", namespace)
        assert now is not None
        assert now["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
        assert "ownerReferences" not in now["metadata"]
        return True

    consistently(untouched, duration=5)
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in kubectl.events(namespace)}
    assert ("nightly", "CronJobExists") in reasons

    # Asked for explicitly: the CronJob is taken over wholly, the same object kept.
    kubectl.run("annotate", "scheduledjob", "nightly", f"{ADOPT}=nightly", "-n", namespace)
    sj = eventually(lambda: ready(kubectl, "nightly", namespace), what="Ready after adoption")
    adopted = kubectl.get("cronjob", "nightly", namespace)
    assert adopted is not None
    assert adopted["metadata"]["uid"] == theirs["metadata"]["uid"], "same object: history kept"
    owner = adopted["metadata"]["ownerReferences"][0]
    assert (owner["uid"], owner["controller"]) == (sj["metadata"]["uid"], True)
    pod = adopted["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["job"], "no merged containers"
    assert pod["containers"][0]["image"] == "registry.example/ours:1"
    assert adopted["spec"]["schedule"] == "*/5 * * * *"


def test_deleting_a_refused_scheduledjob_leaves_the_users_cronjob(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    kubectl.apply(users_cronjob("reports", namespace))
    kubectl.apply(scheduledjob("reports", namespace))
    eventually(
        lambda: ready_condition(kubectl, "reports", namespace).get("reason") == "CronJobExists",
        what="Ready=False CronJobExists",
    )
    kubectl.run("delete", "scheduledjob", "reports", "-n", namespace)
    consistently(lambda: kubectl.get("cronjob", "reports", namespace) is not None, duration=5)


# ---- Temporal (issue 14.6) -----------------------------------------------------------


def temporal_scheduledjob(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backend": "temporal",
            "interval": {"every": "1h"},
            "workflow": {"type": "SundialTick", "taskQueue": TASK_QUEUE, "args": ["ours"]},
        },
    }


def workflow_id(temporal: TemporalSide, schedule_id: str) -> str | None:
    async def call() -> str | None:
        try:
            described = await temporal.client.get_schedule_handle(schedule_id).describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        action = described.schedule.action
        assert isinstance(action, ScheduleActionStartWorkflow)
        return action.id

    return temporal.run(call)


def test_a_schedule_sundial_did_not_create_is_neither_overwritten_nor_deleted(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    schedule_id = f"sundial/{namespace}/payroll"
    their_schedule(temporal, schedule_id)
    kubectl.apply(temporal_scheduledjob("payroll", namespace))
    condition = eventually(
        lambda: (
            (c := ready_condition(kubectl, "payroll", namespace)).get("reason") == "ScheduleExists"
            and c
        ),
        what="Ready=False ScheduleExists",
    )
    assert ADOPT in condition["message"]
    assert workflow_id(temporal, schedule_id) == "their-workflow"
    # Deleting the ScheduledJob finishes and leaves their schedule alone.
    kubectl.run("delete", "scheduledjob", "payroll", "-n", namespace, "--timeout=60s")
    assert workflow_id(temporal, schedule_id) == "their-workflow"


def test_adopting_a_schedule_replaces_it_with_sundials(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    schedule_id = f"sundial/{namespace}/billing"
    their_schedule(temporal, schedule_id)
    manifest = temporal_scheduledjob("billing", namespace)
    manifest["metadata"]["annotations"] = {ADOPT: schedule_id}
    kubectl.apply(manifest)
    eventually(lambda: ready(kubectl, "billing", namespace), what="Ready after adoption")
    adopted = workflow_id(temporal, schedule_id)
    assert adopted is not None
    assert adopted != "their-workflow"
    kubectl.run("delete", "scheduledjob", "billing", "-n", namespace, "--timeout=60s")
    eventually(lambda: workflow_id(temporal, schedule_id) is None, what="schedule deleted")
