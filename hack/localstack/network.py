"""The node's Pod network: a bridge with the node's address, the CNI configuration that
puts Pods on it, guard rules that keep it on this machine, and the forwarders that let
Pods reach the apiserver and Temporal, which listen on loopback only.

Pod -> 10.0.0.1:443 (the `kubernetes` Service) -> kube-proxy's DNAT -> NODE_IP:apiserver
port -> forwarder -> 127.0.0.1:apiserver port; likewise Temporal's fixed ClusterIP.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from .common import (
    BRIDGE,
    CNI_NETWORK,
    NODE_IP,
    POD_CIDR,
    TEMPORAL_SERVICE,
    TEMPORAL_SERVICE_IP,
    TEMPORAL_SERVICE_PORT,
    StackError,
)
from .process import Server

CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
GUARD_INPUT = "SUNDIAL-NODE-INPUT"
GUARD_FORWARD = "SUNDIAL-NODE-FORWARD"


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StackError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")


def check_host_tools() -> None:
    """What install-node-packages.sh installs; a clear message instead of a kubelet log."""
    missing = [
        tool for tool in ("runc", "iptables", "conntrack", "socat", "ip") if not shutil.which(tool)
    ]
    missing += [
        str(CNI_BIN_DIR / p)
        for p in ("bridge", "host-local", "portmap", "loopback")
        if not (CNI_BIN_DIR / p).is_file()
    ]
    if missing:
        raise StackError(
            f"the local node needs {', '.join(missing)}: run hack/install-node-packages.sh "
            "as root (Debian packages), or start without a node: SUNDIAL_NODE=0."
        )


def create_bridge() -> None:
    """The bridge exists before any Pod, so that the forwarders and the kubelet can bind
    its address; the CNI bridge plugin then finds it and adds the Pods' veths."""
    prefix = POD_CIDR.split("/")[1]
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "add", f"{NODE_IP}/{prefix}", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")


def add_guard_rules() -> None:
    """Only this machine reaches the Pod network, and the Pod network reaches only this
    machine: the CNI bridge turns on ip_forward, and nothing must be routed off it."""
    for chain, hook, rules in (
        (
            GUARD_INPUT,
            "INPUT",
            [
                ["-d", POD_CIDR, "-i", "lo", "-j", "RETURN"],
                ["-d", POD_CIDR, "-i", BRIDGE, "-j", "RETURN"],
                ["-d", POD_CIDR, "-j", "DROP"],
            ],
        ),
        (
            GUARD_FORWARD,
            "FORWARD",
            [
                ["-s", POD_CIDR, "-d", POD_CIDR, "-j", "RETURN"],
                ["-s", POD_CIDR, "-j", "DROP"],
                ["-d", POD_CIDR, "-j", "DROP"],
            ],
        ),
    ):
        _run("iptables", "-w", "-N", chain)
        for rule in rules:
            _run("iptables", "-w", "-A", chain, *rule)
        _run("iptables", "-w", "-I", hook, "1", "-j", chain)


def write_cni_config(conf_dir: Path, ipam_dir: Path) -> None:
    conf_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                # No masquerading: Pods talk to this machine only (see add_guard_rules).
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                    # The default route only serves Service IPs, which kube-proxy DNATs
                    # to this machine; everything else is dropped by the guard rules.
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    (conf_dir / f"10-{CNI_NETWORK}.conflist").write_text(json.dumps(config, indent=2) + "\n")


class Forwarder(Server):
    """socat from NODE_IP:port to 127.0.0.1:port, one connection per child."""

    def __init__(self, name: str, log_dir: Path, pid_dir: Path, port: int) -> None:
        super().__init__(name, log_dir, pid_dir)
        self.port = port

    def spawn(self) -> None:
        self.start(
            [
                "socat",
                f"TCP-LISTEN:{self.port},bind={NODE_IP},reuseaddr,fork",
                f"TCP:127.0.0.1:{self.port}",
            ],
            ports=[self.port],
            host=NODE_IP,
        )

    def stop(self, timeout: float = 5.0) -> None:
        # Each connection is a forked child in the forwarder's process group (its own
        # session), which SIGTERM to the parent leaves running.
        group = self.proc.pid if self.proc is not None else None
        super().stop(timeout)
        if group is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)


def in_cluster_services(temporal_port: int) -> str:
    """Temporal for Pods: a selector-less Service with a fixed ClusterIP, and the
    EndpointSlice (kube-proxy reads slices) that points it at the forwarder."""
    namespace, name = TEMPORAL_SERVICE
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterIP": TEMPORAL_SERVICE_IP,
            "ports": [{"name": "grpc", "port": TEMPORAL_SERVICE_PORT, "targetPort": temporal_port}],
        },
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": "localstack.sundial.dev",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": temporal_port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
    }
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [service, endpoints]})
