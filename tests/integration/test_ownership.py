"""Issue 14.5: Sundial never writes over a CronJob it did not create; adoption is explicit."""

from __future__ import annotations

from typing import Any

import pytest

from support import Kubectl, OperatorProcess, consistently, eventually, ready, ready_condition

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
