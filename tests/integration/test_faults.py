"""The fault layer itself (hack/localstack/faults.py, relay.py), on the real servers: each
fault is what a client really meets (the apiserver's own 429 and 403, a reset or silent TCP
connection, a server gone), and each is lifted without a trace."""

from __future__ import annotations

import http.client
import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localstack import LocalStack
from localstack.apiserver import admin_tls
from localstack.relay import Relay
from sundial.kube import ApiException, load_api_client
from support import Kubectl, eventually

pytestmark = pytest.mark.cluster


def core(kubeconfig: Path) -> client.CoreV1Api:
    """A client that does not retry a 429 (kubectl does, for a while, by itself)."""
    return client.CoreV1Api(load_api_client(str(kubeconfig)))


def status_of(call: Callable[[], Any]) -> int:
    """The HTTP status a call gets (200 when it succeeds)."""
    try:
        call()
    except ApiException as error:
        return int(error.status or 0)
    return 200


def test_throttle_makes_the_apiserver_answer_429_to_that_user_for_those_requests(
    stack: LocalStack, kubectl: Kubectl, namespace: str
) -> None:
    api = core(stack.faults.kubeconfig("fault-throttled"))
    admin = core(stack.kubeconfig)
    configmaps = lambda who: lambda: who.list_namespaced_config_map(namespace, _request_timeout=10)  # noqa: E731
    secrets = lambda: api.list_namespaced_secret(namespace, _request_timeout=10)  # noqa: E731
    assert status_of(configmaps(api)) == 200
    with stack.faults.throttle("fault-throttled", resources=["configmaps"], api_groups=[""]):
        assert status_of(configmaps(api)) == 429
        assert status_of(secrets) == 200, "only the requests the rule names are throttled"
        assert status_of(configmaps(admin)) == 200, "only that user's requests are throttled"
    assert status_of(configmaps(api)) == 200


def test_deny_refuses_the_matching_writes_with_403_and_its_message(
    stack: LocalStack, namespace: str
) -> None:
    api = core(stack.faults.kubeconfig("fault-denied"))
    admin = core(stack.kubeconfig)

    def create(who: client.CoreV1Api, name: str) -> Callable[[], Any]:
        body = {"metadata": {"name": name}, "data": {"k": "v"}}
        return lambda: who.create_namespaced_config_map(namespace, body, _request_timeout=10)

    with stack.faults.deny(
        "no-configmap-x", resources=["configmaps"], api_groups=[""], operations=["CREATE"],
        resource_names=["x"], namespace=namespace, users=["fault-denied"],
        message="configmap x is refused by the test",
    ):  # fmt: skip
        with pytest.raises(ApiException) as refused:
            create(api, "x")()
        assert refused.value.status == 403
        message = json.loads(refused.value.body)["message"]
        assert "configmap x is refused by the test" in message
        assert status_of(create(api, "y")) == 200, "only the named object is refused"
        assert status_of(create(admin, "x")) == 200, "only the named user is refused"
    assert status_of(create(api, "x2")) == 200


def test_revoke_takes_the_rights_away_and_gives_them_back(
    stack: LocalStack, namespace: str
) -> None:
    api = core(stack.faults.kubeconfig("fault-revoked"))
    listing = lambda: api.list_namespaced_config_map(namespace, _request_timeout=10)  # noqa: E731
    assert status_of(listing) == 200
    with stack.faults.revoke("clusterrolebinding", "sundial-faulted-cluster-admin"):
        eventually(lambda: status_of(listing) == 403, timeout=30, what="403 once revoked")
    eventually(lambda: status_of(listing) == 200, timeout=30, what="200 once given back")


def _get(relay: Relay, path: str, timeout: float, stack: LocalStack) -> int:
    """An HTTPS GET through the relay with the admin's certificate (a fresh connection)."""
    request = urllib.request.Request(f"{relay.url}{path}")
    with urllib.request.urlopen(request, timeout=timeout, context=admin_tls(stack.pki)) as answer:
        return int(answer.status)


def test_relay_stalls_slows_cuts_and_takes_down_connections(stack: LocalStack) -> None:
    relay = stack.faults.apiserver_relay("fault-relay-test")
    assert _get(relay, "/readyz", 10, stack) == 200

    with relay.stalled("answer"):
        began = time.monotonic()
        with pytest.raises((TimeoutError, urllib.error.URLError)) as silent:
            _get(relay, "/readyz", 2, stack)
        reason = getattr(silent.value, "reason", silent.value)
        assert isinstance(reason, TimeoutError), f"a stall is silence, not {reason!r}"
        assert time.monotonic() - began >= 1.9
    assert _get(relay, "/readyz", 10, stack) == 200, "nothing is left stalled by resume"

    with relay.slowed(0.5, "answer"):
        began = time.monotonic()
        assert _get(relay, "/readyz", 10, stack) == 200
        assert time.monotonic() - began >= 0.5

    with relay.outage(), pytest.raises((ConnectionError, urllib.error.URLError, OSError)):
        _get(relay, "/readyz", 5, stack)
    assert _get(relay, "/readyz", 10, stack) == 200


def test_relay_freeze_stalls_only_the_open_connections(stack: LocalStack) -> None:
    """A client's pooled connection whose route died: silent; a new connection works."""
    relay = stack.faults.apiserver_relay("fault-freeze-test")
    pooled = http.client.HTTPSConnection(
        "127.0.0.1", relay.port, timeout=2, context=admin_tls(stack.pki)
    )
    pooled.request("GET", "/readyz")
    assert pooled.getresponse().read() == b"ok"
    assert relay.freeze() >= 1
    pooled.request("GET", "/readyz")
    with pytest.raises(TimeoutError):
        pooled.getresponse()
    assert _get(relay, "/readyz", 10, stack) == 200, "a new connection goes through"
    relay.resume()
    pooled.close()


def test_kill_and_restart_a_server_of_the_stack(stack: LocalStack, kubectl: Kubectl) -> None:
    stack.faults.kill("kube-controller-manager", signal.SIGKILL)
    assert not stack.kcm.running
    stack.faults.restart("kube-controller-manager")
    assert stack.kcm.running
    # The controller manager is back at work: it makes a namespace's root CA ConfigMap.
    name = f"fault-kcm-{int(time.time())}"
    kubectl.run("create", "namespace", name)
    try:
        eventually(
            lambda: kubectl.get("configmap", "kube-root-ca.crt", name) is not None,
            what="the restarted controller manager at work",
        )
    finally:
        kubectl.run("delete", "namespace", name, "--wait=false")
