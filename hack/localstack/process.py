"""Process supervision: one log and one pid file per server, ordered shutdown, and the
clean-up of servers a crashed run left behind."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .common import POLL, STOP_TIMEOUT, StackError, log


def cmdline(pid: int) -> str | None:
    """The space-joined argv of a live process, or None if there is no such process."""
    proc = Path("/proc")
    if proc.is_dir():
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return None
        # A zombie keeps its /proc entry but has an empty cmdline: it counts as gone.
        return " ".join(raw.decode(errors="replace").split("\0")).strip() or None
    # No /proc (macOS): ps prints the same space-joined argv.
    ps = subprocess.run(
        ["ps", "-ww", "-o", "command=", "-p", str(pid)],
        capture_output=True,
        text=True,
        check=False,
    )
    return ps.stdout.strip() or None


@dataclass(frozen=True)
class PidRecord:
    """What a pid file holds: enough to tell our process from a recycled pid."""

    pid: int
    cmdline: str

    def alive(self) -> bool:
        """Whether the pid still runs the recorded argv. A server may retitle itself and
        keep its argv at the end (nginx: "nginx: master process <argv>"); a recycled pid
        runs something else."""
        actual = cmdline(self.pid)
        if actual is None:
            return False
        return actual == self.cmdline or actual.endswith(" " + self.cmdline)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"pid": self.pid, "cmdline": self.cmdline}) + "\n")

    @classmethod
    def load(cls, path: Path) -> PidRecord | None:
        try:
            data = json.loads(path.read_text())
            return cls(pid=int(data["pid"]), cmdline=str(data["cmdline"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def kill_all(records: Sequence[PidRecord], timeout: float = STOP_TIMEOUT) -> None:
    """Stops processes we do not parent: SIGTERM to all at once, SIGKILL to stragglers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for record in records:
            if record.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, sig)
        deadline = time.monotonic() + timeout
        while any(record.alive() for record in records) and time.monotonic() < deadline:
            time.sleep(0.1)


def stop_leftovers(pid_dir: Path, last: Sequence[str] = ("etcd",)) -> list[str]:
    """Kills servers recorded in pid files (left by a crashed run); returns their names.

    The servers named in `last` are stopped after the others: an apiserver that loses etcd
    first spends its whole grace period retrying.
    """
    alive: dict[str, PidRecord] = {}
    for pid_file in sorted(pid_dir.glob("*.pid")):
        if pid_file.name == "owner.pid":
            continue
        record = PidRecord.load(pid_file)
        if record is not None and record.alive():
            alive[pid_file.stem] = record
        pid_file.unlink()
    kill_all([record for name, record in alive.items() if name not in last])
    kill_all([record for name, record in alive.items() if name in last])
    return list(alive)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=5, context=context) as response:
        return bool(response.status == 200)


def insecure_tls() -> ssl.SSLContext:
    """For /healthz of servers that serve it with a self-signed certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "    (no log)"
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


class Server:
    """One server process: its own log file and pid file, and an ordered shutdown."""

    def __init__(self, name: str, log_dir: Path, pid_dir: Path) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        self.pid_file = pid_dir / f"{name}.pid"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self._terminated = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rotate_log(self) -> None:
        # One earlier log is kept: it is what explains why the last run crashed.
        if self.log.exists():
            self.log.replace(self.log.with_name(self.log.name + ".prev"))

    def start(
        self,
        argv: Sequence[str],
        ports: Sequence[int] = (),
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
    ) -> None:
        if self.running:
            return
        for port in ports:
            if port_open(port, host):
                raise StackError(
                    f"{self.name}: port {port} on {host} is already in use. Is another "
                    "stack running (python -m localstack down), or set SUNDIAL_*_PORT."
                )
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log_file:
            stamp = dt.datetime.now().isoformat(timespec="seconds")
            log_file.write(f"=== {stamp} {shlex.join(argv)}\n".encode())
            log_file.flush()
            # A session of its own: Ctrl-C in the terminal reaches only the Python
            # process, which then stops the servers in order instead of all at once.
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=None if env is None else dict(env),
            )
        self.started_at = time.monotonic()
        self._terminated = False
        PidRecord(self.proc.pid, " ".join(argv)).save(self.pid_file)

    def terminate(self) -> None:
        # Only once: a second SIGTERM makes the Kubernetes servers exit at once, skipping
        # their graceful shutdown.
        if self.running and not self._terminated:
            assert self.proc is not None
            self._terminated = True
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        if self.proc is not None:
            self.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} ignored SIGTERM for {timeout:.0f}s; killing it")
                self.proc.kill()
                self.proc.wait()
            self.proc = None
            self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self.pid_file.unlink(missing_ok=True)

    def wait_ready(self, probe: Callable[[], bool], timeout: float, detail: str = "") -> None:
        """Polls `probe` until it holds; prints one progress line; fails with the log tail."""
        log(f"  {self.name:<24}", end="")
        deadline = self.started_at + timeout
        next_dot = time.monotonic() + 5
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                log(" FAILED")
                raise self.failure(f"exited with code {code} before it was ready")
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                if probe():
                    break
            now = time.monotonic()
            if now > deadline:
                log(" FAILED")
                raise self.failure(f"not ready after {timeout:.0f}s")
            if now > next_dot:
                log(".", end="")
                next_dot = now + 5
            time.sleep(POLL)
        elapsed = time.monotonic() - self.started_at
        log(f" ready in {elapsed:5.1f}s  {detail}")

    def failure(self, what: str) -> StackError:
        return StackError(
            f"{self.name} {what}.\n  log: {self.log}\n  last lines:\n{tail(self.log)}"
        )
