"""Helpers for tests against the real stack: polling with deadlines, kubectl, the operator
as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

REPO = Path(__file__).resolve().parent.parent
CRD_FILE = REPO / "crds" / "scheduledjobs.sundial.dev.yaml"
T = TypeVar("T")

# Deadlines hold on a loaded 2-core machine; the happy path returns in a second or two.
DEADLINE = 60.0


def eventually(
    probe: Callable[[], T], timeout: float = DEADLINE, interval: float = 0.5, what: str = ""
) -> T:
    """Polls until `probe` returns a truthy value without raising AssertionError."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last_error = None
        except AssertionError as error:
            last_error = error
        if time.monotonic() > deadline:
            detail = f": {last_error}" if last_error else ""
            raise AssertionError(f"not true within {timeout:.0f}s: {what}{detail}")
        time.sleep(interval)


def consistently(probe: Callable[[], Any], duration: float, interval: float = 0.5) -> None:
    """Asserts `probe` holds (truthy, no AssertionError) for the whole duration."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert probe(), "condition stopped holding"
        time.sleep(interval)


class Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    def apply(
        self, manifest: dict[str, Any] | str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        return self.run("apply", "-f", "-", stdin=text, check=check)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        result = self.run("get", kind, name, "-n", namespace, "-o", "json", check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise AssertionError(result.stderr)
        data: dict[str, Any] = json.loads(result.stdout)
        return data


class OperatorProcess:
    """`python -m sundial` against the stack, logging to a file a failing test names."""

    def __init__(self, env: dict[str, str], log_file: Path) -> None:
        self.env = env
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sundial"],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def assert_alive(self) -> None:
        assert self.proc is not None, "the operator is not started"
        assert self.proc.poll() is None, f"the operator exited; see {self.log_file}"

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
