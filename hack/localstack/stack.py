"""LocalStack: the servers composed into one cluster plus Temporal, started and stopped in
order, with one owner per state directory."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from .apiserver import ApiServer
from .binaries import Binaries
from .common import (
    TEMPORAL_SERVICE,
    TEMPORAL_SERVICE_IP,
    TEMPORAL_SERVICE_PORT,
    Ports,
    StackError,
    default_state_dir,
    log,
    node_wanted,
)
from .controller_manager import ControllerManager
from .etcd import Etcd
from .faults import Faults
from .node import Node
from .pki import Pki, write_kubeconfig
from .process import PidRecord, Server, cmdline, stop_leftovers
from .scheduler import Scheduler
from .temporal import Temporal
from .temporal_tls import TemporalFront, TemporalTLS


class LocalStack:
    """etcd + kube-apiserver + kube-controller-manager + Temporal on loopback, and (unless
    node=False or SUNDIAL_NODE=0) a real node: kube-scheduler, containerd, kubelet and
    kube-proxy, with locally built images imported.

    start() gives a fresh cluster (etcd data, the Temporal database and the node's
    containers are wiped) unless keep_data is set; the individual start_/stop_ methods keep
    all state, so tests can take a component away and bring it back.
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        ports: Ports | None = None,
        *,
        keep_data: bool = False,
        ready_timeout: float = 120.0,
        binaries: Binaries | None = None,
        node: bool | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).resolve() if state_dir else default_state_dir()
        self.ports = ports or Ports.from_env()
        self.keep_data = keep_data
        self.ready_timeout = ready_timeout
        self.with_node = node_wanted() if node is None else node
        self._binaries = binaries
        self.pki = Pki(self.state_dir / "pki")
        self._pid_dir = self.state_dir / "pids"
        self._owner_file = self._pid_dir / "owner.pid"
        logs, pids = self.log_dir, self._pid_dir
        self.etcd = Etcd(logs, pids, self.state_dir / "etcd", self.ports)
        self.apiserver = ApiServer(logs, pids, self.pki, self.ports)
        self.kcm = ControllerManager(logs, pids, self.pki, self.ports)
        self.scheduler = Scheduler(logs, pids, self.ports)
        self.temporal = Temporal(logs, pids, self.state_dir / "temporal.db", self.ports)
        # SUNDIAL_TEMPORAL_TLS=0: no TLS front (a machine without nginx).
        self.with_temporal_tls = os.environ.get("SUNDIAL_TEMPORAL_TLS", "1") != "0"
        self.temporal_front = TemporalFront(logs, pids, self.state_dir, self.ports)
        self.node = Node(self.state_dir / "node", logs, self.pki, self.ports, ready_timeout)
        # Serialises the fault-injection methods, which tests may call from threads.
        self._lock = threading.RLock()
        # Throttling, refusals, relays, kills: faults.py, docs/faults.md.
        self.faults = Faults(self)

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
        return self.apiserver.url

    @property
    def temporal_address(self) -> str:
        """Temporal's frontend for clients on this machine."""
        return self.temporal.address

    @property
    def temporal_tls(self) -> TemporalTLS:
        """The TLS front of Temporal: its mutual-TLS and API-key addresses and credentials."""
        return self.temporal_front.credentials

    @property
    def temporal_in_cluster_address(self) -> str:
        """Temporal's frontend for Pods: the fixed ClusterIP of TEMPORAL_SERVICE."""
        return f"{TEMPORAL_SERVICE_IP}:{TEMPORAL_SERVICE_PORT}"

    @property
    def temporal_service(self) -> tuple[str, str]:
        """(namespace, name) of the selector-less Service in front of Temporal."""
        return TEMPORAL_SERVICE

    @property
    def images(self) -> dict[str, str]:
        """Image references imported into the node, by name (e.g. images["busybox"]); use
        them with imagePullPolicy Never or IfNotPresent."""
        return dict(self.node.images)

    def add_image(self, name: str) -> str:
        """Imports one more image of hack/images.py into the node; returns its reference."""
        with self._lock:
            return self.node.add_image(self.binaries, name)

    @property
    def servers(self) -> tuple[Server, ...]:
        control_plane: tuple[Server, ...] = (self.etcd, self.apiserver, self.kcm, self.temporal)
        front: tuple[Server, ...] = (self.temporal_front,) if self.with_temporal_tls else ()
        node = (self.scheduler, *self.node.servers) if self.with_node else ()
        return control_plane + front + node

    def env(self) -> dict[str, str]:
        """Variables that point kubectl, the Kubernetes client and Temporal here."""
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "TEMPORAL_ADDRESS": self.temporal_address,
            "SUNDIAL_KUBECTL": str(self.kubectl),
        }

    def env_script(self) -> str:
        """What `source .stack/env.sh` runs: the variables, and kubectl and temporal on PATH."""
        lines = [f"export {key}={shlex.quote(value)}" for key, value in self.env().items()]
        path = [str(self.kubectl.parent), str(self.binaries.temporal.parent)]
        lines.append(f'export PATH={shlex.quote(os.pathsep.join(path))}:"$PATH"')
        return "\n".join(lines) + "\n"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "env.sh"

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
            if self.with_node:
                # First, so that a second stack on this machine is refused at once.
                self.node.claim(self.state_dir)
            log(f"local stack in {self.state_dir}")
            for server in self.servers:
                server.rotate_log()
            if not self.keep_data:
                shutil.rmtree(self.etcd.data_dir, ignore_errors=True)
                for path in self.state_dir.glob("temporal.db*"):
                    path.unlink()
            self.pki.ensure()
            write_kubeconfig(self.kubeconfig, self.pki, self.apiserver_url)
            # Temporal and containerd are independent of Kubernetes, so they boot while
            # etcd and the apiserver do; their readiness is checked when they are needed.
            self.temporal.spawn(binaries.temporal)
            if self.with_temporal_tls:
                self.temporal_front.spawn()
            if self.with_node:
                self.node.prepare(binaries)
            self.etcd.spawn(binaries.etcd)
            self.etcd.wait(self.ready_timeout)
            self.apiserver.spawn(binaries.kube_apiserver, self.etcd.url, node=self.with_node)
            if self.with_node:
                self.node.import_images(binaries)
            self.apiserver.wait(self.ready_timeout)
            self.start_controller_manager()
            if self.with_node:
                self.scheduler.spawn(binaries.kube_scheduler, self.kubeconfig)
                self.node.start(binaries, self.apiserver_url, self.kubeconfig)
                self.scheduler.wait(self.ready_timeout)
            self.temporal.wait(binaries.temporal, self.ready_timeout)
            if self.with_temporal_tls:
                self.temporal_front.wait(self.ready_timeout)
            if self.with_node:
                self.node.wait_ready(self.apiserver_url)
            self.env_file.write_text(self.env_script())
        except BaseException:
            self.stop()
            raise
        log(f"local stack ready in {time.monotonic() - began:.1f}s")

    def stop(self) -> None:
        """Stops every server (idempotent), cleans the node's traces off the machine and
        forgets the state dir's owner."""
        with self._lock:
            began = time.monotonic()
            was_running = any(server.running for server in self.servers)
            self.faults.close_relays()
            control_plane: tuple[Server, ...] = (
                self.kcm,
                self.scheduler,
                self.temporal_front,
                self.temporal,
                self.apiserver,
            )
            try:
                # The node first, while the apiserver still answers its last status updates.
                self.node.stop()
                # All at once to be quick, except etcd: an apiserver that loses etcd first
                # spends its shutdown retrying.
                for server in control_plane:
                    server.terminate()
                for server in (*control_plane, self.etcd):
                    server.stop()
            except KeyboardInterrupt:
                # A second Ctrl-C: no more patience, but no stray processes either.
                for server in (*control_plane, self.etcd):
                    server.kill()
                self.node.stop()
                raise
            # Not ours to clean when start() was refused because another process owns it.
            owner = PidRecord.load(self._owner_file)
            if owner is not None and owner.pid == os.getpid():
                self.env_file.unlink(missing_ok=True)
                self._owner_file.unlink(missing_ok=True)
            if was_running:
                log(f"local stack stopped in {time.monotonic() - began:.1f}s")

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
            self.kcm.spawn(
                self.binaries.kube_controller_manager, self.kubeconfig, node=self.with_node
            )
            self.kcm.wait(self.ready_timeout)

    def stop_temporal(self) -> None:
        with self._lock:
            self.temporal.stop()

    def start_temporal(self) -> None:
        """Starts Temporal on the same SQLite file, so schedules and history survive."""
        with self._lock:
            self.temporal.spawn(self.binaries.temporal)
            self.temporal.wait(self.binaries.temporal, self.ready_timeout)

    def stop_node(self) -> None:
        """Stops the node and removes every trace of it from the machine; the control
        plane keeps running (the Node object stays, NotReady after a while)."""
        with self._lock:
            self.node.stop()

    def kill_node(self) -> None:
        """SIGKILLs the node's servers and shims, as a crash would; containers keep running
        and every trace stays until the next start_node() or stop_node() cleans up."""
        with self._lock:
            self.node.kill()

    def start_node(self) -> None:
        """Brings the node back (cleaning up first, as after a crash) and waits for Ready."""
        with self._lock:
            if not self.with_node:
                raise StackError("this LocalStack was started without a node")
            b = self.binaries
            self.node.claim(self.state_dir)
            self.node.prepare(b)
            self.node.import_images(b)
            self.node.start(b, self.apiserver_url, self.kubeconfig)
            self.node.wait_ready(self.apiserver_url)

    # -- internals

    def _claim_state_dir(self) -> None:
        """Refuses a state dir whose owner still runs; cleans up after one that crashed."""
        owner = PidRecord.load(self._owner_file)
        if owner is not None and owner.pid != os.getpid() and owner.alive():
            raise StackError(
                f"{self.state_dir} is in use by pid {owner.pid} ({owner.cmdline}). Stop it "
                "(python -m localstack down) or set SUNDIAL_STACK_DIR and SUNDIAL_*_PORT."
            )
        killed = stop_leftovers(self._pid_dir)
        if killed:
            log(f"stopped {', '.join(killed)} left over from an earlier run")
        me = cmdline(os.getpid()) or " ".join(sys.argv)
        PidRecord(os.getpid(), me).save(self._owner_file)
