"""The kubelet: the node itself, registering as NODE_NAME with the node's bridge address."""

from __future__ import annotations

import json
import shutil
import ssl
import urllib.request
from pathlib import Path

import yaml

from .common import NODE_IP, NODE_NAME, Ports
from .pki import Pki, write_kubeconfig
from .process import Server

NOT_READY_TAINT = "node.kubernetes.io/not-ready"


class Kubelet(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, directory: Path, ports: Ports) -> None:
        super().__init__("kubelet", log_dir, pid_dir)
        self.dir = directory
        self.root = directory / "root"
        self.cert_dir = directory / "pki"
        self.pod_logs = directory / "pod-logs"
        self.config = directory / "config.yaml"
        self.kubeconfig = directory / "kubeconfig"
        self.ports = ports

    def write_config(self, pki: Pki, apiserver_url: str, runtime_endpoint: str) -> None:
        # Its Pods' directories, like containerd's containers, do not outlive a run (and
        # host.reset has unmounted their volumes). The serving certificate is kept.
        for path in (self.root, self.pod_logs):
            shutil.rmtree(path, ignore_errors=True)
        for path in (self.dir, self.root, self.cert_dir, self.pod_logs):
            path.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(self.kubeconfig, pki, apiserver_url, pki.kubelet)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # The bridge's address: on this machine only (see network.add_guard_rules), and
            # the node's InternalIP, by which the apiserver reaches it for logs and exec.
            "address": NODE_IP,
            "port": self.ports.kubelet,
            "readOnlyPort": 0,
            "healthzPort": 0,
            # Kubernetes 1.35+ refuses cgroup v1 hosts unless told otherwise; these
            # machines have hybrid v1 and no systemd.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": runtime_endpoint,
            "imageServiceEndpoint": runtime_endpoint,
            "podLogsDir": str(self.pod_logs),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            # Lowering it needs CAP_SYS_RESOURCE, which these machines lack.
            "oomScoreAdj": 0,
            "failSwapOn": False,
            # No cluster DNS: Pods get this machine's resolver, which they cannot reach.
            "resolvConf": "",
            # Imported images cannot be pulled again: never collect them, never evict
            # for a full disk of a developer's machine.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%"},
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "shutdownGracePeriod": "0s",
        }  # fmt: skip
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))

    def spawn(self, binary: Path) -> None:
        self.start(
            [
                str(binary),
                f"--config={self.config}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.root}",
                # Else its serving certificate goes to /var/lib/kubelet/pki whatever
                # --root-dir says.
                f"--cert-dir={self.cert_dir}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
            ],
            ports=[self.ports.kubelet],
            host=NODE_IP,
        )

    def wait(self, apiserver_url: str, tls: ssl.SSLContext, timeout: float) -> None:
        """Until the Node is Ready and the node-lifecycle controller removed its taint."""
        url = f"{apiserver_url}/api/v1/nodes/{NODE_NAME}"

        def ready() -> bool:
            with urllib.request.urlopen(url, timeout=5, context=tls) as response:
                node = json.load(response)
            conditions = node.get("status", {}).get("conditions", [])
            taints = node.get("spec", {}).get("taints", [])
            return any(
                c["type"] == "Ready" and c["status"] == "True" for c in conditions
            ) and not any(t["key"] == NOT_READY_TAINT for t in taints)

        self.wait_ready(ready, timeout, f"node {NODE_NAME} Ready ({NODE_IP})")
