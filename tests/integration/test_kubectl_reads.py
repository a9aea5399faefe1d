"""The tests' own reads (support.Kubectl.get and .list, in process) against the real
apiserver: the same objects kubectl itself gets, not found as None, and a refusal or a
lost connection failing the probe (AssertionError, which polls retry), as a failed kubectl
did, never read as "not there"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from localstack import LocalStack
from support import Kubectl, eventually

pytestmark = pytest.mark.cluster


def config_map(name: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"key": name}}  # fmt: skip


def kubectl_json(kubectl: Kubectl, *args: str) -> Any:
    return json.loads(kubectl.run("get", *args, "-o", "json").stdout)


def test_reads_are_what_kubectl_gets_and_missing_is_none(kubectl: Kubectl, namespace: str) -> None:
    kubectl.apply(config_map("one", namespace, team="a"))
    kubectl.apply(config_map("two", namespace, team="b"))
    theirs = kubectl_json(kubectl, "configmap", "one", "-n", namespace)
    assert kubectl.get("configmap", "one", namespace) == theirs
    assert kubectl.get("configmap", "three", namespace) is None
    listed = kubectl.list("configmaps", namespace, labels="team=a")
    assert listed == kubectl_json(kubectl, "configmaps", "-n", namespace, "-l", "team=a")["items"]
    assert [(c["apiVersion"], c["kind"], c["metadata"]["name"]) for c in listed] == [
        ("v1", "ConfigMap", "one")]  # fmt: skip
    named = kubectl.list("configmaps", namespace, fields="metadata.name=two")
    assert [c["metadata"]["name"] for c in named] == ["two"]


def test_a_lost_right_and_a_cut_connection_fail_the_read_not_answer_none(
    stack: LocalStack, kubectl: Kubectl, namespace: str
) -> None:
    kubectl.apply(config_map("kept", namespace))
    faults = stack.faults
    revoked = Kubectl(kubectl.binary, faults.kubeconfig("reads-revoked"))
    assert revoked.get("configmap", "kept", namespace) is not None

    def refused() -> bool:
        with pytest.raises(AssertionError) as error:
            revoked.get("configmap", "kept", namespace)
        return "403" in str(error.value)

    with faults.revoke("clusterrolebinding", "sundial-faulted-cluster-admin"):
        assert eventually(refused, timeout=30, what="403 once the right is gone")
        with pytest.raises(AssertionError, match="403"):
            revoked.list("configmaps", namespace)
    eventually(lambda: revoked.get("configmap", "kept", namespace), timeout=30,
               what="read again once the right is back")  # fmt: skip

    relay = faults.apiserver_relay("reads-cut")
    cut_off = Kubectl(kubectl.binary, faults.kubeconfig("reads-cut", via=relay))
    assert cut_off.get("configmap", "kept", namespace) is not None
    relay.down()
    try:
        with pytest.raises(AssertionError, match="no answer"):
            cut_off.get("configmap", "kept", namespace)
    finally:
        relay.resume()
    assert cut_off.get("configmap", "kept", namespace) is not None
