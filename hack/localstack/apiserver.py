"""kube-apiserver on loopback; with a node it also advertises the node's bridge address,
where a forwarder lets Pods reach it through the `kubernetes` Service."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from .common import NODE_IP, SA_ISSUER, SERVICE_CIDR, Ports
from .pki import Pki
from .process import Server, http_ok

# Every request of this user is in the tests' log, reads too: a test that counts what a
# write path costs runs its client as this user.
AUDITED_USER = "sundial-every-request"
# SUNDIAL_APISERVER_AUDIT_POLICY: "all" (bench/: every request), or "writes" (the tests:
# who wrote ScheduledJobs, CronJobs, Jobs and Sundial's Leases, and all AUDITED_USER did;
# small enough for a whole run).
AUDIT_POLICIES = {
    "all": """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
""",
    "writes": """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
    resources: [{group: sundial.dev}, {group: batch}]
  - level: Metadata
    verbs: [create, update, patch]
    namespaces: [sundial-system]
    resources: [{group: coordination.k8s.io, resources: [leases]}]
  - level: Metadata
    users: [USER]
  - level: None
""".replace("USER", AUDITED_USER),
}


def admin_tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
    return context


class ApiServer(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, pki: Pki, ports: Ports) -> None:
        super().__init__("kube-apiserver", log_dir, pid_dir)
        self.pki = pki
        self.ports = ports

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def spawn(self, binary: Path, etcd_url: str, *, node: bool) -> None:
        pki = self.pki
        argv = [
            str(binary),
            f"--etcd-servers={etcd_url}",
            f"--secure-port={self.ports.apiserver}",
            "--bind-address=127.0.0.1",
            # Unused since the serving cert is given, but the default /var/run path
            # may not be writable.
            f"--cert-dir={pki.dir / 'apiserver-generated'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            # The fault layer's throttle keeps one request of its priority level executing
            # (faults.py, _SeatHolder) for as long as a throttle lasts; the default minute
            # would end it mid-test. Only a request whose client stops reading is that slow.
            "--request-timeout=10m",
        ]
        if node:
            argv += [
                # The `kubernetes` Service's endpoint: the node's bridge address, which a
                # forwarder relays to loopback (Pods cannot reach the host's 127.0.0.1).
                f"--advertise-address={NODE_IP}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                # For logs and exec: the kubelet checks this identity by webhook.
                f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
                f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
                "--kubelet-preferred-address-types=InternalIP",
            ]
        else:
            argv += [
                "--advertise-address=127.0.0.1",
                "--authorization-mode=RBAC",
                # Pods are never run here, so they need no ServiceAccount token volume,
                # and admission would otherwise reject Pods until the SA exists.
                "--disable-admission-plugins=ServiceAccount",
                # No kubelet or kube-proxy will ever serve the `kubernetes` endpoints.
                "--endpoint-reconciler-type=none",
            ]
        audit_log = os.environ.get("SUNDIAL_APISERVER_AUDIT_LOG")
        if audit_log:
            # bench/: who made which request (by User-Agent), which the apiserver's own
            # metrics do not say. Metadata only, one line per request once answered.
            policy = Path(audit_log).with_suffix(".policy.yaml")
            policy.write_text(
                AUDIT_POLICIES[os.environ.get("SUNDIAL_APISERVER_AUDIT_POLICY") or "all"]
            )
            argv += [
                f"--audit-policy-file={policy}",
                f"--audit-log-path={audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",
                "--audit-log-mode=batch",
            ]
        self.start(argv, ports=[self.ports.apiserver])

    def wait(self, timeout: float) -> None:
        tls = admin_tls(self.pki)
        base = self.url

        def ready() -> bool:
            # /readyz covers the RBAC bootstrap; the `default` namespace is created by a
            # separate loop just after, and clients expect it.
            return http_ok(f"{base}/readyz", tls) and http_ok(
                f"{base}/api/v1/namespaces/default", tls
            )

        self.wait_ready(ready, timeout, base)
