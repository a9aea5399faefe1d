"""Issue 14.14: every failure a pass meets ends in a condition, not only in a log line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support import Kubectl, OperatorProcess, eventually, ready, ready_condition

pytestmark = pytest.mark.cluster

POLICY = "sundial-test-refuse-cronjob"


@pytest.fixture
def cronjob_refusing_policy(kubectl: Kubectl) -> Iterator[None]:
    """An admission policy that refuses CronJobs named `refused` (HTTP 403), as a policy
    engine or webhook would."""
    kubectl.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["batch"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["cronjobs"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "object.metadata.name != 'refused'",
                        "message": "CronJobs named refused are not allowed by policy",
                        "reason": "Forbidden",  # HTTP 403, as an authorization webhook answers
                    }
                ],
            },
        }
    )
    kubectl.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        }
    )
    yield
    kubectl.run("delete", "validatingadmissionpolicybinding", POLICY, check=False)
    kubectl.run("delete", "validatingadmissionpolicy", POLICY, check=False)


def test_a_refused_cronjob_write_turns_ready_false_and_recovers(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str, cronjob_refusing_policy: None
) -> None:
    def refused() -> bool:
        attempt = kubectl.run("create", "cronjob", "refused", "--image=x", "--schedule=* * * * *",
                              "-n", namespace, "--dry-run=server", check=False)  # fmt: skip
        return attempt.returncode != 0 and "not allowed by policy" in attempt.stderr

    eventually(refused, what="the policy is in force")
    kubectl.apply(
        {
            "apiVersion": "sundial.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": "refused", "namespace": namespace},
            "spec": {"schedule": "*/5 * * * *", "job": {"image": "registry.example/app:1"}},
        }
    )
    condition = eventually(
        lambda: (
            (c := ready_condition(kubectl, "refused", namespace)).get("reason") == "Forbidden" and c
        ),
        what="Ready=False Forbidden",
    )
    assert condition["status"] == "False"
    assert "not allowed by policy" in condition["message"], condition
    kubectl.run("delete", "validatingadmissionpolicybinding", POLICY)
    eventually(lambda: ready(kubectl, "refused", namespace), timeout=120, what="Ready again")
