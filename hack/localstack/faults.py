"""Faults on demand, made by the real mechanisms a production cluster fails by (no mocks):

- throttling: API Priority and Fairness (a FlowSchema for one user, a priority level with no
  seats that rejects) makes the real apiserver answer 429;
- refusals: a ValidatingAdmissionPolicy denies chosen writes (a status write of one object,
  Job creates, a finalizer's removal), and RBAC bindings are taken away and given back;
- the network: a TCP relay per client (relay.py) adds latency, stalls, cuts or takes down
  the connections between that client and the apiserver or Temporal;
- processes: SIGKILL or SIGTERM of a server of the stack, and its restart on the same data.

The tests and the soak share this one API, as `stack.faults` (docs/faults.md):

    kubeconfig = stack.faults.kubeconfig("sundial-op", via=relay)   # a user flow control,
    with stack.faults.throttle("sundial-op"): ...                  # admission and RBAC see
    with stack.faults.deny("no-status", resources=["scheduledjobs/status"], ...): ...
    with relay.stalled("answer"): ...
    stack.faults.kill("kube-controller-manager"); stack.faults.restart("kube-controller-manager")

Every object made here carries FAULT_LABEL, so `clear` (and a stack that restarts) removes
what a killed test left behind. The admin (system:masters) is exempt from flow control and
RBAC, so a client to be faulted gets its own user (`kubeconfig`), bound to cluster-admin
through the group FAULTED_GROUP.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .common import StackError
from .pki import ClientCert, write_kubeconfig
from .relay import Relay

if TYPE_CHECKING:
    from .stack import LocalStack

_APPLYING = threading.Lock()
FAULT_LABEL = "sundial.dev/fault"
FAULTED_GROUP = "sundial:faulted"
# Above the apiserver's own schemas for its controllers and probes (1-200), below
# service-accounts (9000) and the defaults: a faulted user's requests match this first.
FLOW_SCHEMA_PRECEDENCE = 50
# The throttle's seat holder: its user and what it lists (see _SeatHolder).
SEAT_USER = "sundial-fault-seat"
SEAT_NAMESPACE = "sundial-faults"
SEAT_OBJECTS = 10
# Where a deny's sentinel object would be created (see `deny`).
SENTINEL_NAMESPACE = "default"
EFFECT_TIMEOUT = 30.0
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


def _checked(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"a fault's name is a DNS label of at most 42 characters: {name!r}")
    return name


def _cel_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid CEL string literal


class Faults:
    """The fault API of one LocalStack (its `faults` attribute)."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self._relays: list[Relay] = []

    # -- kubectl, as the admin

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.stack.kubectl), f"--kubeconfig={self.stack.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and done.returncode != 0:
            raise StackError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def _apply(self, *documents: dict[str, Any]) -> None:
        for document in documents:
            document.setdefault("metadata", {}).setdefault("labels", {})[FAULT_LABEL] = "true"
        # One at a time: tests set faults up from concurrent scenarios, and two client-side
        # applies of a new object race (the second create says AlreadyExists).
        with _APPLYING:
            self.kubectl("apply", "-f", "-", stdin="\n---\n".join(map(json.dumps, documents)))

    def _delete(self, *refs: str) -> None:
        self.kubectl("delete", "--ignore-not-found", "--wait=false", *refs)

    # -- who is faulted, and over which route

    def relay(self, target: str, name: str = "relay") -> Relay:
        """A relay to `target`, closed with the stack (or by `clear`)."""
        relay = Relay(target, name)
        self._relays.append(relay)
        return relay

    def apiserver_relay(self, name: str = "apiserver") -> Relay:
        return self.relay(self.stack.apiserver_url.removeprefix("https://"), name)

    def temporal_relay(self, name: str = "temporal") -> Relay:
        return self.relay(self.stack.temporal_address, name)

    def kubeconfig(self, user: str, *, via: Relay | None = None) -> Path:
        """A kubeconfig for `user` (a client certificate of the stack's CA, cluster-admin
        through FAULTED_GROUP), to the apiserver directly or through the relay `via`."""
        client = self._faulted_user(user)
        directory = self.stack.state_dir / "faults"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{user}-{via.port if via else 'direct'}.kubeconfig"
        write_kubeconfig(path, self.stack.pki, via.url if via else self.stack.apiserver_url, client)
        return path

    def _faulted_user(self, user: str) -> ClientCert:
        """`user`'s client certificate, and cluster-admin for the group it is in."""
        client = self.stack.pki.client(_checked(user), user, FAULTED_GROUP)
        self._apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "sundial-faulted-cluster-admin"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Group",
                        "name": FAULTED_GROUP,
                    }
                ],
            }
        )
        return client

    # -- throttling: API Priority and Fairness

    @contextlib.contextmanager
    def throttle(
        self,
        user: str,
        *,
        verbs: Sequence[str] = ("*",),
        resources: Sequence[str] = ("*",),
        api_groups: Sequence[str] = ("*",),
        name: str | None = None,
        every_request: bool = True,
    ) -> Iterator[None]:
        """The requests of `user` matching the rule go to a priority level with no seats
        of its own, whose excess is answered 429 (Too Many Requests) by the apiserver's
        flow control, until the block ends. `resources` takes subresources as
        "scheduledjobs/status"; a watch is a request like any other.

        A level with no seats still runs one request while it runs nothing else (so that
        a request wider than the level is not starved). With every_request (the default)
        a seat holder keeps one request of the level executing for the whole block, so
        every matching request is refused; without it only the requests that come while
        another of the level runs are: the user's own concurrency is what is throttled."""
        fault = f"sundial-fault-{_checked(name or user)}"
        level = {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": fault},
            "spec": {
                "type": "Limited",
                "limited": {
                    # No seats of its own and none borrowed: every request is rejected.
                    "nominalConcurrencyShares": 0,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        }
        schema = {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": fault},
            "spec": {
                "matchingPrecedence": FLOW_SCHEMA_PRECEDENCE,
                "priorityLevelConfiguration": {"name": fault},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": user}}],
                        "resourceRules": [
                            {
                                "verbs": list(verbs),
                                "apiGroups": list(api_groups),
                                "resources": list(resources),
                                "namespaces": ["*"],
                                "clusterScope": True,
                            }
                        ],
                        "nonResourceRules": [{"verbs": list(verbs), "nonResourceURLs": ["*"]}]
                        if resources == ("*",)
                        else [],
                    },
                    {  # the seat holder's listing goes to the same level
                        "subjects": [{"kind": "User", "user": {"name": SEAT_USER}}],
                        "resourceRules": [
                            {
                                "verbs": ["list"],
                                "apiGroups": [""],
                                "resources": ["configmaps"],
                                "namespaces": [SEAT_NAMESPACE],
                            }
                        ],
                    },
                ],
            },
        }
        if every_request:
            self._seat_data()
        self._apply(level, schema)
        holder: _SeatHolder | None = None
        try:
            self._await_flow_schema(fault)
            if every_request:
                holder = _SeatHolder(self.stack, self._faulted_user(SEAT_USER))
                _wait(lambda: self._executing(fault), f"the seat of {fault} held")
            yield
        finally:
            if holder is not None:
                holder.close()
            self._delete(f"flowschema/{fault}", f"prioritylevelconfiguration/{fault}")
            self._await_gone_flow_schema(fault)

    def _seat_data(self) -> None:
        """What the seat holder lists: more than the kernel buffers between the apiserver
        and a client that does not read (about 9 MB), made once per stack."""
        listed = self.kubectl("get", "configmaps", "-n", SEAT_NAMESPACE, "-o", "name",
                              check=False).stdout.split()  # fmt: skip
        if len(listed) >= SEAT_OBJECTS:
            return
        self._apply({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": SEAT_NAMESPACE}})  # fmt: skip
        for index in range(SEAT_OBJECTS):
            made = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": f"seat-{index}", "namespace": SEAT_NAMESPACE},
                    "data": {"filler": "x" * 900_000}}  # fmt: skip
            # create, not apply: apply's last-applied annotation would be as large again
            self.kubectl("create", "-f", "-", stdin=json.dumps(made), check=False)

    def _executing(self, level: str) -> bool:
        """The apiserver's own account: a request executes in `level` (a level without
        queues does not say whose: before the throttled user's, only the holder's)."""
        dump = self.kubectl("get", "--raw", "/debug/api_priority_and_fairness/dump_requests")
        rows = [[cell.strip() for cell in line.split(",")] for line in dump.stdout.splitlines()]
        return any(row[0] == level for row in rows[1:])

    def _await_flow_schema(self, name: str) -> None:
        """The flow-control controller marks a schema it has taken in (its Dangling
        condition); from then on, requests are classified by it."""

        def taken_in() -> bool:
            got = self.kubectl("get", "flowschema", name, "-o", "json", check=False)
            if got.returncode != 0:
                return False
            conditions = json.loads(got.stdout).get("status", {}).get("conditions", [])
            return any(c.get("type") == "Dangling" and c.get("status") == "False"
                       for c in conditions)  # fmt: skip

        _wait(taken_in, f"FlowSchema {name} taken in by the apiserver's flow control")
        time.sleep(1.0)  # the controller writes the condition right after it applies the config

    def _await_gone_flow_schema(self, name: str) -> None:
        _wait(
            lambda: self.kubectl("get", "flowschema", name, check=False).returncode != 0,
            f"FlowSchema {name} deleted",
        )
        time.sleep(1.0)

    # -- refusals: admission and RBAC

    @contextlib.contextmanager
    def deny(
        self,
        name: str,
        *,
        resources: Sequence[str],
        operations: Sequence[str] = ("CREATE", "UPDATE", "DELETE"),
        api_groups: Sequence[str] = ("*",),
        resource_names: Sequence[str] = (),
        namespace: str | None = None,
        users: Sequence[str] = (),
        allow_if: str = "false",
        message: str | None = None,
    ) -> Iterator[None]:
        """A ValidatingAdmissionPolicy refuses (403, with `message`) the matching writes:
        `resources` as "jobs" or "scheduledjobs/status", narrowed to `resource_names`, a
        `namespace`, and requests by `users`, unless the CEL expression `allow_if` holds
        (for example, deny removing a finalizer: `allow_if="'f' in object.metadata.finalizers"`
        on UPDATE). A sentinel ConfigMap in the same policy is refused too: once it is,
        the policy is in force, so the block starts with the refusal already real."""
        fault = f"sundial-fault-{_checked(name)}"
        sentinel = f"{fault}-sentinel"
        refuse = allow_if if not users else (
            f"!(request.userInfo.username in {json.dumps(list(users))}) || ({allow_if})"
        )  # fmt: skip
        expression = (
            f"request.resource.resource == 'configmaps' && request.name == "
            f"{_cel_string(sentinel)} ? false : ({refuse})"
        )
        namespaces = sorted({namespace, SENTINEL_NAMESPACE}) if namespace else None
        constraints: dict[str, Any] = {
            "resourceRules": [
                {
                    "apiGroups": list(api_groups),
                    "apiVersions": ["*"],
                    "operations": list(operations),
                    "resources": list(resources),
                    **({"resourceNames": list(resource_names)} if resource_names else {}),
                },
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["configmaps"],
                    "resourceNames": [sentinel],
                },
            ]
        }
        if namespaces:
            constraints["namespaceSelector"] = {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
                ]
            }
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": fault},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": constraints,
                "validations": [
                    {
                        "expression": expression,
                        "message": message or f"refused by the fault {name}",
                        "reason": "Forbidden",
                    }
                ],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": fault},
            "spec": {"policyName": fault, "validationActions": ["Deny"]},
        }
        self._apply(policy, binding)
        probe = yaml.safe_dump(
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": sentinel, "namespace": SENTINEL_NAMESPACE}}
        )  # fmt: skip

        def sentinel_refused(expect: bool) -> bool:
            made = self.kubectl("create", "--dry-run=server", "-f", "-", stdin=probe, check=False)
            return (made.returncode != 0 and sentinel in made.stderr) == expect

        try:
            _wait(lambda: sentinel_refused(True), f"the policy {fault} in force")
            yield
        finally:
            self._delete(f"validatingadmissionpolicybinding/{fault}",
                         f"validatingadmissionpolicy/{fault}")  # fmt: skip
            _wait(lambda: sentinel_refused(False), f"the policy {fault} lifted")

    @contextlib.contextmanager
    def revoke(self, kind: str, name: str, namespace: str | None = None) -> Iterator[None]:
        """Takes a RoleBinding or ClusterRoleBinding away and gives it back (the same
        subjects and role) when the block ends: the rights it granted are lost meanwhile."""
        scope = ["-n", namespace] if namespace else []
        saved = json.loads(self.kubectl("get", kind, name, *scope, "-o", "json").stdout)
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields",
                    "generation", "selfLink"):  # fmt: skip
            saved["metadata"].pop(key, None)
        self.kubectl("delete", kind, name, *scope)
        try:
            yield
        finally:
            self.kubectl("create", "-f", "-", stdin=json.dumps(saved))

    # -- processes

    def kill(self, server: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Sends `sig` to one of the stack's servers (by its name: etcd, kube-apiserver,
        kube-controller-manager, temporal, ...) and, for SIGKILL, reaps it; `restart`
        brings it back on the same data."""
        target = self._server(server)
        if target.proc is None or target.proc.poll() is not None:
            raise StackError(f"{server} is not running")
        if sig == signal.SIGKILL:
            target.kill()
        else:
            target.proc.send_signal(sig)
            target.stop()

    def restart(self, server: str) -> None:
        stack, b = self.stack, self.stack.binaries
        if server == "kube-controller-manager":
            stack.start_controller_manager()
        elif server == "temporal":
            stack.start_temporal()
        elif server == "etcd":
            stack.etcd.spawn(b.etcd)
            stack.etcd.wait(stack.ready_timeout)
        elif server == "kube-apiserver":
            stack.apiserver.spawn(b.kube_apiserver, stack.etcd.url, node=stack.with_node)
            stack.apiserver.wait(stack.ready_timeout)
        elif server == "temporal-tls":
            stack.temporal_front.spawn()
            stack.temporal_front.wait(stack.ready_timeout)
        else:
            raise StackError(f"restart of {server} is not supported (the node: start_node)")

    def _server(self, name: str) -> Any:
        for server in self.stack.servers:
            if server.name == name:
                return server
        raise StackError(f"no server {name!r} in this stack")

    # -- clean-up

    def close_relays(self) -> None:
        for relay in self._relays:
            relay.close()
        self._relays.clear()

    def clear(self) -> None:
        """Lifts every fault: relays closed, the fault objects deleted."""
        self.close_relays()
        self.kubectl(
            "delete", "--ignore-not-found", "-l", f"{FAULT_LABEL}=true",
            "validatingadmissionpolicybinding,validatingadmissionpolicy,flowschema,"
            "prioritylevelconfiguration",
            check=False,
        )  # fmt: skip


class _SeatHolder:
    """One request that executes in a priority level until closed: a listing of about 9 MB
    asked for over a connection that never reads its answer, so the apiserver's handler
    blocks writing it (the kernel's buffers between them hold a few MB) and keeps its
    seat. --request-timeout (10m on this stack) bounds it."""

    def __init__(self, stack: LocalStack, client: ClientCert) -> None:
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.connect(("127.0.0.1", stack.ports.apiserver))
        context = ssl.create_default_context(cafile=str(stack.pki.ca_cert))
        context.load_cert_chain(str(client.cert), str(client.key))
        self._socket = context.wrap_socket(raw, server_hostname="127.0.0.1")
        self._socket.sendall(
            f"GET /api/v1/namespaces/{SEAT_NAMESPACE}/configmaps HTTP/1.1\r\n"
            "Host: 127.0.0.1\r\nAccept: application/json\r\n\r\n".encode()
        )

    def close(self) -> None:
        """An RST: the handler's blocked write fails at once and the seat is free."""
        with contextlib.suppress(OSError):
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._socket.close()


def _wait(probe: Any, what: str, timeout: float = EFFECT_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise StackError(f"not true within {timeout:.0f}s: {what}")
        time.sleep(0.25)
