"""What every part of the local stack shares: ports, fixed addresses, errors, logging."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "build-binaries.sh"

SERVICE_CIDR = "10.0.0.0/24"
# The apiserver claims the first address of the service range for the `kubernetes`
# Service, and in-cluster clients verify the serving certificate against it.
SERVICE_IP = "10.0.0.1"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

# The node's Pod network: a bridge of its own, whose address is also the node's address and
# the one the apiserver and Temporal are forwarded to for Pods (they listen on loopback).
NODE_NAME = "sundial-node"
POD_CIDR = "10.244.0.0/24"
NODE_IP = "10.244.0.1"
BRIDGE = "sundial0"
CNI_NETWORK = "sundial-pods"
# A fixed ClusterIP, so that Pods in any namespace reach Temporal without cluster DNS.
TEMPORAL_SERVICE = ("default", "temporal")
TEMPORAL_SERVICE_IP = "10.0.0.10"
TEMPORAL_SERVICE_PORT = 7233

STOP_TIMEOUT = 15.0  # seconds between SIGTERM and SIGKILL
POLL = 0.25


class StackError(RuntimeError):
    """A server could not be started, or the state directory (or the node) is in use."""


def log(message: str, end: str = "\n") -> None:
    print(message, end=end, file=sys.stderr, flush=True)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


@dataclass(frozen=True)
class Ports:
    """Four base ports; each server that needs more takes the next two above one of them."""

    etcd: int = 12379
    apiserver: int = 16443
    kcm: int = 20257
    temporal: int = 17233

    @property
    def etcd_peer(self) -> int:
        return self.etcd + 1

    @property
    def scheduler(self) -> int:
        return self.kcm + 1

    @property
    def kubelet(self) -> int:
        return self.kcm + 2

    @property
    def proxy_healthz(self) -> int:
        return self.apiserver + 1

    @property
    def proxy_metrics(self) -> int:
        return self.apiserver + 2

    @property
    def temporal_http(self) -> int:
        return self.temporal + 1

    @property
    def temporal_metrics(self) -> int:
        return self.temporal + 2

    @property
    def temporal_mtls(self) -> int:
        return self.temporal + 3

    @property
    def temporal_api_key(self) -> int:
        return self.temporal + 4

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


def node_wanted() -> bool:
    """SUNDIAL_NODE=0 runs the stack without a node (no kubelet: Pods never run)."""
    return os.environ.get("SUNDIAL_NODE", "1").strip().lower() not in ("0", "false", "no", "")
