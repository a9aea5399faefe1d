"""The node: containerd, the kubelet, kube-proxy and the forwarders, on the host-wide
resources that host.py locks, records and cleans up."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from . import host, network
from .apiserver import admin_tls
from .binaries import Binaries
from .common import REPO, Ports, StackError, log
from .kubelet import Kubelet
from .pki import Pki
from .process import Server
from .proxy import KubeProxy
from .runtime import Containerd, archive_reference

IMAGES_SCRIPT = REPO / "hack" / "images.py"
# Imported at every start; pause is the sandbox image, the others are for Pods.
IMAGE_NAMES = ("pause", "busybox", "python-base", "example-service")


def build_images(names: tuple[str, ...]) -> dict[str, Path]:
    """hack/images.py builds (once, then from its cache) a docker-archive per image."""
    override = os.environ.get("SUNDIAL_IMAGE_ARCHIVES")  # NAME=PATH,... (experiments)
    if override:
        pairs = (item.split("=", 1) for item in override.split(",") if item)
        return {name: Path(path) for name, path in pairs}
    done = subprocess.run(
        [sys.executable, str(IMAGES_SCRIPT), "build", *names],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    paths = done.stdout.split()
    if done.returncode != 0 or len(paths) != len(names):
        raise StackError(f"{IMAGES_SCRIPT} build {' '.join(names)} failed ({done.returncode})")
    return dict(zip(names, map(Path, paths), strict=True))


class Node:
    def __init__(
        self, directory: Path, log_dir: Path, pki: Pki, ports: Ports, ready_timeout: float
    ) -> None:
        pids = host.node_pid_dir()
        self.dir = directory
        self.pki = pki
        self.ports = ports
        self.ready_timeout = ready_timeout
        self.containerd = Containerd(log_dir, pids, directory / "containerd")
        self.kubelet = Kubelet(log_dir, pids, directory / "kubelet", ports)
        self.proxy = KubeProxy(log_dir, pids, directory / "kube-proxy", ports)
        self.apiserver_forwarder = network.Forwarder(
            "apiserver-forwarder", log_dir, pids, ports.apiserver
        )
        self.temporal_forwarder = network.Forwarder(
            "temporal-forwarder", log_dir, pids, ports.temporal
        )
        self.lock = host.HostLock()
        self.image_names = IMAGE_NAMES
        self.images: dict[str, str] = {}
        self._archives: dict[str, Path] = {}
        # The machine before this node, so that a test can check it was restored.
        self.host_before: host.HostRecord | None = None

    @property
    def servers(self) -> tuple[Server, ...]:
        return (
            self.containerd,
            self.kubelet,
            self.proxy,
            self.apiserver_forwarder,
            self.temporal_forwarder,
        )

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    def claim(self, stack_dir: Path) -> None:
        """Takes the host lock (or refuses, naming the stack that has it) and cleans up
        whatever an earlier node left, crashed or not; then records the machine."""
        network.check_host_tools()
        self.lock.acquire(stack_dir)
        left = host.leftovers()
        if left or host.HostRecord.load() is not None:
            if left:
                log(f"cleaning up what an earlier node left: {'; '.join(left[:6])}")
            host.reset()
        self.host_before = host.HostRecord.take(self.dir, self.containerd.socket)
        self.host_before.save()

    def prepare(self, binaries: Binaries) -> None:
        """The Pod network, then containerd, which boots while the control plane does."""
        self._archives = build_images(self.image_names)
        network.create_bridge()
        network.add_guard_rules()
        # Fresh addresses: the Pods that held the old ones are gone with the old containerd.
        ipam_dir = self.dir / "cni" / "ipam"
        shutil.rmtree(ipam_dir, ignore_errors=True)
        network.write_cni_config(self.cni_conf_dir, ipam_dir)
        self.containerd.write_config(archive_reference(self._archives["pause"]), self.cni_conf_dir)
        self.containerd.spawn(binaries.containerd)
        self.apiserver_forwarder.spawn()
        self.temporal_forwarder.spawn()

    def import_images(self, binaries: Binaries) -> None:
        self.containerd.wait(binaries.ctr, self.ready_timeout)
        self.images = {
            name: self.containerd.import_image(binaries.ctr, archive)
            for name, archive in self._archives.items()
        }

    def add_image(self, binaries: Binaries, name: str) -> str:
        """One more image, built (or taken from the cache) and imported on demand: the
        operator's own image is big, and only the tests that run it as a Pod need it."""
        if name not in self.images:
            archive = build_images((name,))[name]
            self.images[name] = self.containerd.import_image(binaries.ctr, archive)
        return self.images[name]

    def start(self, binaries: Binaries, apiserver_url: str, admin_kubeconfig: Path) -> None:
        self.kubelet.write_config(self.pki, apiserver_url, self.containerd.endpoint)
        self.kubelet.spawn(binaries.kubelet)
        self.proxy.write_config(self.pki, apiserver_url)
        self.proxy.spawn(binaries.kube_proxy)
        done = subprocess.run(
            [str(binaries.kubectl), f"--kubeconfig={admin_kubeconfig}", "apply", "-f", "-"],
            input=network.in_cluster_services(self.ports.temporal),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise StackError(f"could not create the Temporal Service: {done.stderr.strip()}")

    def wait_ready(self, apiserver_url: str) -> None:
        self.proxy.wait(self.ready_timeout)
        self.kubelet.wait(apiserver_url, admin_tls(self.pki), self.ready_timeout)

    def stop(self) -> None:
        """Stops the node's servers and removes every trace of the node from the machine."""
        if not self.lock.held:
            return
        try:
            first: tuple[Server, ...] = (
                self.kubelet,
                self.proxy,
                self.apiserver_forwarder,
                self.temporal_forwarder,
            )
            for server in first:
                server.terminate()
            for server in first:
                server.stop()
            # The shims and containers outlive containerd; reset kills them and unmounts.
            self.containerd.stop()
            host.reset(self.host_before)
        finally:
            self.images = {}
            self.lock.release()

    def kill(self) -> None:
        """SIGKILL, as a crash: the pid files, the Pods, the mounts and the rules remain."""
        for server in self.servers:
            if server.proc is not None:
                server.proc.send_signal(signal.SIGKILL)
                server.proc.wait()
                server.proc = None
        if self.host_before is not None:
            for pid in host.shim_pids(self.host_before.containerd_socket):
                os.kill(pid, signal.SIGKILL)
