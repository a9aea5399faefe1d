"""kube-controller-manager with only the controllers the stack needs."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from .common import Ports
from .pki import Pki
from .process import Server, insecure_tls

# What a CronJob needs to turn into Jobs and Pods, and what cleans up after them. The
# serviceaccount controller gives every namespace its `default` ServiceAccount, as on a
# real cluster, and ttl-after-finished cleans up Jobs that ask for it. deployment and
# replicaset run the operator's own Deployment; disruption keeps its PodDisruptionBudget's
# status.
CONTROL_PLANE_CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "disruption-controller",
    "cronjob-controller",
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "ttl-after-finished-controller",
)
# With a node: node-lifecycle removes the not-ready taint the kubelet registers with (else
# nothing schedules); the token controller and the kube-root-ca.crt publisher are what
# in-cluster clients need; endpointslice makes Services with selectors reach their Pods.
NODE_CONTROLLERS = (
    "node-lifecycle-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "endpointslice-controller",
)


class ControllerManager(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, pki: Pki, ports: Ports) -> None:
        super().__init__("kube-controller-manager", log_dir, pid_dir)
        self.pki = pki
        self.ports = ports
        self.controllers: tuple[str, ...] = CONTROL_PLANE_CONTROLLERS

    def spawn(self, binary: Path, kubeconfig: Path, *, node: bool) -> None:
        self.controllers = CONTROL_PLANE_CONTROLLERS + (NODE_CONTROLLERS if node else ())
        self.start(
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                # Otherwise it watches for a front-proxy CA that this apiserver, with
                # no aggregation layer in use, never publishes, and logs errors forever.
                "--authentication-skip-lookup",
                "--leader-elect=false",
                f"--controllers={','.join(self.controllers)}",
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.kcm}",
            ],
            ports=[self.ports.kcm],
        )

    def wait(self, timeout: float) -> None:
        url = f"https://127.0.0.1:{self.ports.kcm}/healthz"
        tls = insecure_tls()

        def controllers_running() -> bool:
            # Each controller adds its own check once started; a bare 200 can come
            # before any has.
            with urllib.request.urlopen(f"{url}?verbose", timeout=5, context=tls) as r:
                body = r.read().decode()
            return all(f"[+]{name} ok" in body for name in self.controllers)

        self.wait_ready(controllers_running, timeout, url)
