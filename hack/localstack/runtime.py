"""containerd v2 (built from the Go module proxy), with its CRI plugin for the kubelet, runc
from Debian, and the images hack/images.py builds imported into its k8s.io namespace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from .common import StackError
from .network import CNI_BIN_DIR
from .process import Server

NAMESPACE = "k8s.io"  # where the CRI plugin, hence the kubelet, looks for images
# No registry is reachable here, and none may be tried: every pull goes to a closed port
# on loopback and fails at once (images are imported, not pulled).
NO_REGISTRY = "http://127.0.0.1:9"


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


class Containerd(Server):
    def __init__(self, log_dir: Path, pid_dir: Path, directory: Path) -> None:
        super().__init__("containerd", log_dir, pid_dir)
        self.dir = directory
        self.root = directory / "root"
        self.state = directory / "state"
        self.socket = directory / "containerd.sock"
        self.config = directory / "config.toml"
        self.hosts_dir = directory / "certs.d"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def write_config(self, sandbox_image: str, cni_conf_dir: Path) -> None:
        # Pod sandboxes and containers are runtime state: wiped, like etcd, at each start.
        for path in (self.root, self.state):
            shutil.rmtree(path, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        default_hosts = self.hosts_dir / "_default"
        default_hosts.mkdir(parents=True, exist_ok=True)
        (default_hosts / "hosts.toml").write_text(f"server = {_toml_string(NO_REGISTRY)}\n")
        s = _toml_string
        self.config.write_text(
            f"""version = 3
root = {s(str(self.root))}
state = {s(str(self.state))}

[grpc]
  address = {s(str(self.socket))}

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = {s(sandbox_image)}

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = {s(str(self.hosts_dir))}

[plugins.'io.containerd.cri.v1.runtime']
  # No CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj to the pause container's
  # -998, and every sandbox fails ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Network namespaces under the state dir rather than the host-wide /run/netns.
  netns_mounts_under_state_dir = true

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  # No systemd on these machines: the kubelet's cgroupDriver is cgroupfs too.
  SystemdCgroup = false
  Root = {s(str(self.state / "runc"))}

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = [{s(str(CNI_BIN_DIR))}]
  conf_dir = {s(str(cni_conf_dir))}

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
"""
        )

    def spawn(self, binary: Path) -> None:
        # The shim is found on PATH; ours first, then runc from Debian (/usr/sbin).
        path = os.pathsep.join([str(binary.parent), os.environ.get("PATH", ""), "/usr/sbin"])
        self.start(
            [str(binary), f"--config={self.config}", "--log-level=warn"],
            env={**os.environ, "PATH": path},
        )

    def ctr(self, binary: Path, *args: str, timeout: float = 120) -> str:
        # ctr v2 wants an absolute socket path.
        done = subprocess.run(
            [str(binary), f"--address={self.socket}", f"--namespace={NAMESPACE}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise StackError(f"ctr {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def wait(self, ctr: Path, timeout: float) -> None:
        def serving() -> bool:
            if not self.socket.exists():
                return False
            try:
                return bool(self.ctr(ctr, "version", timeout=10))
            except StackError:
                return False

        self.wait_ready(serving, timeout, self.endpoint)

    def import_image(self, ctr: Path, archive: Path) -> str:
        """Imports a docker-archive; returns its reference. Pinned, so that the kubelet's
        image garbage collection never removes it."""
        reference = archive_reference(archive)
        self.ctr(ctr, "images", "import", str(archive))
        self.ctr(ctr, "images", "label", reference, "io.cri-containerd.pinned=pinned")
        return reference


def archive_reference(archive: Path) -> str:
    """The first RepoTag in a docker-archive's manifest.json."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        if member is None:
            raise StackError(f"{archive}: no manifest.json")
        manifest = json.load(member)
    tags = manifest[0].get("RepoTags") or []
    if not tags:
        raise StackError(f"{archive}: the image has no tag")
    return str(tags[0])
