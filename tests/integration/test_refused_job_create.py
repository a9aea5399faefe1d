"""A slot whose Job the apiserver refused to create is missed, on the real stack: the CronJob
controller's FailedCreate Event names the Job it could not make, and is no evidence that
the slot ran (the look beyond the watch cache read any Event naming a Job as a run)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    conditions_of,
    eventually,
    kubernetes_scheduledjob,
    owned_jobs,
    sj_status,
)

pytestmark = pytest.mark.cluster

# The stack's kube-controller-manager runs on the admin's kubeconfig
# (--use-service-account-credentials=false): its CronJob controller creates Jobs as this
# user (the admin certificate's CN, hack/localstack/pki.py).
CONTROLLER_USER = "sundial-admin"


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def failed_creates(kubectl: Kubectl, namespace: str, cronjob: str) -> list[str]:
    listed = kubectl.run("get", "events", "-n", namespace, "-o", "json", "--field-selector",
                         f"involvedObject.kind=CronJob,involvedObject.name={cronjob},"
                         "reason=FailedCreate")  # fmt: skip
    return [str(e.get("message")) for e in json.loads(listed.stdout)["items"]]


@pytest.mark.timeout(300)
def test_a_slot_whose_job_create_was_refused_is_missed(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    name = "refused"
    # No node needed: the Job is never made, and the image never pulled.
    job = {"image": "registry.example/app:1"}
    kubectl.apply(kubernetes_scheduledjob(name, namespace, job, startingDeadlineSeconds=15))
    eventually(lambda: kubectl.get("cronjob", name, namespace), what="the CronJob made")

    slot = (datetime.now(UTC) + timedelta(seconds=80)).replace(second=0, microsecond=0)
    job_name = f"{name}-{int(slot.timestamp()) // 60}"
    with stack.faults.deny(
        "refused-create",
        resources=["jobs"],
        api_groups=["batch"],
        operations=["CREATE"],
        users=[CONTROLLER_USER],
        namespace=namespace,
    ):
        assert datetime.now(UTC) < slot - timedelta(seconds=5), "the refusal came too late"
        # The controller tries and is refused (FailedCreate names the Job), then gives up
        # at the deadline; the slot is certain 10 s later.
        time.sleep(max((slot + timedelta(seconds=25) - datetime.now(UTC)).total_seconds(), 0))

        def reported() -> list[tuple[str, str]]:
            runs: list[dict[str, Any]] = sj_status(kubectl, name, namespace).get(
                "recentMissedRuns", []
            )
            return [
                (r["scheduledTime"], r["reason"]) for r in runs if r["scheduledTime"] == iso(slot)
            ]

        assert eventually(reported, timeout=45, what=f"the refused slot {iso(slot)} reported") == [
            (iso(slot), "DeadlineExceeded")
        ]
        status = sj_status(kubectl, name, namespace)
        assert status.get("missedRuns", 0) >= 1, status
        assert conditions_of(status)["RunsMissed"]["status"] == "True", status
        # The premise: the apiserver has no Job for the slot, and the controller's Events
        # name it in a refused create.
        assert job_name not in {j["metadata"]["name"] for j in owned_jobs(kubectl, namespace, name)}
        assert any(f'"{job_name}"' in m for m in failed_creates(kubectl, namespace, name)), (
            failed_creates(kubectl, namespace, name)
        )
