"""kube-scheduler: binds Pods to the node (started only with one)."""

from __future__ import annotations

from pathlib import Path

from .common import Ports
from .process import Server, http_ok, insecure_tls


class Scheduler(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, ports: Ports) -> None:
        super().__init__("kube-scheduler", log_dir, pid_dir)
        self.ports = ports

    def spawn(self, binary: Path, kubeconfig: Path) -> None:
        self.start(
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--authentication-skip-lookup",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.scheduler}",
            ],
            ports=[self.ports.scheduler],
        )

    def wait(self, timeout: float) -> None:
        url = f"https://127.0.0.1:{self.ports.scheduler}/healthz"
        tls = insecure_tls()
        self.wait_ready(lambda: http_ok(url, tls), timeout, url)
