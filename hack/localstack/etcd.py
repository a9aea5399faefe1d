"""etcd: the apiserver's store, on loopback, data thrown away unless asked to keep it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from .common import Ports
from .process import Server


class Etcd(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, data_dir: Path, ports: Ports) -> None:
        super().__init__("etcd", log_dir, pid_dir)
        self.data_dir = data_dir
        self.ports = ports

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.etcd}"

    def spawn(self, binary: Path) -> None:
        client = self.url
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        self.start(
            [
                str(binary),
                "--name=default",
                f"--data-dir={self.data_dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                # Throw-away data: fsync only slows every apiserver write.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            ports=[self.ports.etcd, self.ports.etcd_peer],
        )

    def wait(self, timeout: float) -> None:
        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                return bool(json.load(response).get("health") == "true")

        self.wait_ready(healthy, timeout, self.url)
