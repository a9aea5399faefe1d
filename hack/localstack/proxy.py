"""kube-proxy in iptables mode: Service IPs, the `kubernetes` one included, for Pods."""

from __future__ import annotations

from pathlib import Path

import yaml

from .common import NODE_IP, NODE_NAME, POD_CIDR, Ports
from .pki import Pki, write_kubeconfig
from .process import Server, http_ok


class KubeProxy(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, directory: Path, ports: Ports) -> None:
        super().__init__("kube-proxy", log_dir, pid_dir)
        self.dir = directory
        self.config = directory / "config.yaml"
        self.kubeconfig = directory / "kubeconfig"
        self.ports = ports

    def write_config(self, pki: Pki, apiserver_url: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(self.kubeconfig, pki, apiserver_url, pki.kube_proxy)
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "mode": "iptables",
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": POD_CIDR,
            "healthzBindAddress": f"127.0.0.1:{self.ports.proxy_healthz}",
            "metricsBindAddress": f"127.0.0.1:{self.ports.proxy_metrics}",
            # NodePorts on the node's bridge address only, never on the machine's others.
            "nodePortAddresses": [f"{NODE_IP}/32"],
            # Leave the machine's settings alone: no route_localnet for localhost
            # NodePorts, no conntrack table sizing or timeouts, no oom_score_adj.
            "iptables": {"localhostNodePorts": False},
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "oomScoreAdj": 0,
        }
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))

    def spawn(self, binary: Path) -> None:
        self.start(
            [str(binary), f"--config={self.config}"],
            ports=[self.ports.proxy_healthz, self.ports.proxy_metrics],
        )

    def wait(self, timeout: float) -> None:
        url = f"http://127.0.0.1:{self.ports.proxy_healthz}/healthz"
        self.wait_ready(lambda: http_ok(url), timeout, url)
