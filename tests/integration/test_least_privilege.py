"""The namespaced overlay's rights, proven by the apiserver: the operator runs with a token
of a ServiceAccount bound exactly as the overlay binds its own (the Roles in the watched
namespaces, the base's Role in sundial-system, the overlay's ClusterRole), does its work on
both backends, and what it must not do is refused."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from localstack import LocalStack
from support import (
    OPERATOR_NAMESPACE,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    consistently,
    eventually,
    in_shard,
    kubernetes_scheduledjob,
    namespaced_overlay_rbac,
    ready,
    service_account_kubeconfig,
    sj_status,
    temporal_scheduledjob,
    token_operator,
)

pytestmark = pytest.mark.cluster

ACCOUNT = "sundial-least-privilege"
LOG_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
SHARD = "least-privilege"
WATCHED = ("lp-team-a", "lp-team-b")
OUTSIDE = "lp-outside"
# The overlay's example namespaces, and what this test puts in their place.
RENAMED = {"team-a": WATCHED[0], "team-b": WATCHED[1]}


@pytest.fixture(scope="module")
def least_privileged(
    kubectl: Kubectl,
    stack: LocalStack,
    crd_installed: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[OperatorProcess, Kubectl]]:
    for ns in (*WATCHED, OUTSIDE):
        kubectl.run("create", "namespace", ns)
    kubectl.run("create", "serviceaccount", ACCOUNT, "-n", OPERATOR_NAMESPACE)
    documents = namespaced_overlay_rbac(kubectl, suffix="lp", namespaces=RENAMED,
                                        account=ACCOUNT)  # fmt: skip
    kubectl.run("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in documents))
    config = service_account_kubeconfig(kubectl, stack.apiserver_url, stack.pki.ca_cert,
                                        tmp_path_factory.mktemp("lp") / "kubeconfig",
                                        account=ACCOUNT)  # fmt: skip
    process = token_operator(stack, config, "least-privilege", SHARD,
                             namespaces=",".join(WATCHED),
                             leader_election_lease="sundial-least-privilege")  # fmt: skip
    process.start()
    yield process, Kubectl(kubectl.binary, config)
    process.stop()
    for doc in documents:
        if doc["kind"].startswith("Cluster"):
            kubectl.run("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found")
    kubectl.run("delete", "serviceaccount", ACCOUNT, "-n", OPERATOR_NAMESPACE)
    for ns in (*WATCHED, OUTSIDE):
        kubectl.run("delete", "namespace", ns, "--wait=false")


def test_the_namespaced_overlays_rights_are_enough_and_no_more(
    kubectl: Kubectl,
    temporal: TemporalSide,
    operator: OperatorProcess,
    least_privileged: tuple[OperatorProcess, Kubectl],
) -> None:
    process, as_operator = least_privileged
    job = {"image": "registry.example/app:1"}
    kubectl.apply(in_shard(kubernetes_scheduledjob("cron", WATCHED[0], job), SHARD))
    kubectl.apply(in_shard(temporal_scheduledjob("flow", WATCHED[1]), SHARD))
    kubectl.apply(in_shard(kubernetes_scheduledjob("elsewhere", OUTSIDE, job), SHARD))
    eventually(lambda: ready(kubectl, "cron", WATCHED[0]), what="cron Ready")
    eventually(lambda: ready(kubectl, "flow", WATCHED[1]), what="flow Ready")
    assert kubectl.get("cronjob", "cron", WATCHED[0]) is not None
    # A namespace it does not watch: nothing read, nothing made, nothing written.
    consistently(lambda: sj_status(kubectl, "elsewhere", OUTSIDE) == {}, duration=5)
    assert kubectl.get("cronjob", "elsewhere", OUTSIDE) is None

    def refused(*args: str) -> str:
        result = as_operator.run(*args, check=False)
        assert result.returncode != 0, f"allowed: kubectl {' '.join(args)}"
        assert "forbidden" in result.stderr.lower(), result.stderr
        return result.stderr

    # Outside the watched namespaces, the apiserver refuses it.
    refused("get", "scheduledjobs", "-n", OUTSIDE)
    refused("get", "cronjobs", "-n", OUTSIDE)
    refused("create", "job", "x", "--image=registry.example/app:1", "-n", OUTSIDE)
    refused("get", "scheduledjobs", "--all-namespaces")
    # Secrets: get, in the watched namespaces and its own; never listed, never elsewhere.
    refused("get", "secret", "anything", "-n", OUTSIDE)
    refused("get", "secret", "anything", "-n", "kube-system")
    refused("get", "secrets", "-n", WATCHED[0])
    allowed = as_operator.run("get", "secret", "anything", "-n", WATCHED[0], check=False)
    assert "NotFound" in allowed.stderr, allowed.stderr
    # Nothing it may not write: ScheduledJobs are never created, deleted or updated whole.
    refused("delete", "scheduledjob", "cron", "-n", WATCHED[0])
    for verb in ("create", "update", "delete"):
        answer = as_operator.run("auth", "can-i", verb, "scheduledjobs.sundial.dev",
                                 "-n", WATCHED[0], check=False)  # fmt: skip
        assert answer.stdout.strip() == "no", (verb, answer.stdout)
    # And it needed nothing it was not given.
    process.assert_alive()
    # (Each line less its timestamp, whose milliseconds may well read 403.)
    messages = [LOG_TIMESTAMP.sub("", line) for line in process.log_text().splitlines()]
    refusals = [m for m in messages if "Forbidden" in m or re.search(r"\b403\b", m)]
    assert refusals == []
