"""What a node changes on the machine, outside the stack's directory: the host-wide lock
(one node per machine), a record of the machine before the node, and the clean-up that
undoes everything a node leaves behind, after a clean stop or a crash alike.

A kubelet's cgroups (/kubepods in every hierarchy), the sysctls it sets, the iptables
chains kubelet, kube-proxy and the CNI plugins add, the Pod bridge and the hard-coded
paths under /var are shared by the whole machine, so two nodes would collide on them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .common import BRIDGE, CNI_NETWORK, StackError
from .process import PidRecord, cmdline, kill_all

HOST_DIR = Path("/run/sundial-node")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Set by the kubelet at start (its "kernel tunables"), by the CNI bridge (ip_forward) and,
# in some modes, by kube-proxy; restored to what they were before the node.
SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
)
# Paths the kubelet and the CNI library write to whatever they are told; removed after the
# node if they did not exist before it.
HARD_CODED_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/var/lib/cni"),
    Path("/run/containerd"),
)
OUR_CHAIN_PREFIXES = ("KUBE-", "CNI-", "SUNDIAL-")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        with contextlib.suppress(OSError):
            values[name] = _sysctl_path(name).read_text().strip()
    return values


@dataclass
class HostRecord:
    """The machine before the node; written when a node starts, removed after clean-up.
    Kept in /run (tmpfs), so a reboot, which also resets everything, forgets it."""

    node_dir: str
    containerd_socket: str
    sysctls: dict[str, str] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)

    @classmethod
    def take(cls, node_dir: Path, containerd_socket: Path) -> HostRecord:
        return cls(
            node_dir=str(node_dir),
            containerd_socket=str(containerd_socket),
            sysctls=read_sysctls(),
            created=[str(path) for path in HARD_CODED_PATHS if not path.exists()],
        )

    def save(self) -> None:
        (HOST_DIR / "host.json").write_text(json.dumps(self.__dict__, indent=2) + "\n")

    @classmethod
    def load(cls) -> HostRecord | None:
        try:
            data: dict[str, Any] = json.loads((HOST_DIR / "host.json").read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None


class HostLock:
    """One node per machine: an flock on HOST_DIR/lock, held while the node may run.

    The kernel drops it when the holder dies however it dies, so a crash never leaves the
    machine locked; the next holder then cleans up (see reset)."""

    def __init__(self) -> None:
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self, stack_dir: Path) -> None:
        if self._file is not None:
            return
        if os.geteuid() != 0:
            raise StackError(
                "the local node needs root (kubelet, containerd, iptables, cgroups). Run as "
                "root, or without a node: SUNDIAL_NODE=0 (LocalStack(node=False))."
            )
        HOST_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_file = (HOST_DIR / "lock").open("a+")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            raise StackError(
                f"a node already runs on this machine ({_describe_owner()}). One node per "
                "machine: kubelet's cgroups, sysctls, iptables chains and paths are "
                "host-wide. Stop that stack (python -m localstack down, in its directory), "
                "or start this one without a node: SUNDIAL_NODE=0 (LocalStack(node=False))."
            ) from None
        self._file = lock_file
        owner = {"pid": os.getpid(), "cmdline": cmdline(os.getpid()), "stack": str(stack_dir)}
        (HOST_DIR / "owner.json").write_text(json.dumps(owner) + "\n")

    def release(self) -> None:
        if self._file is not None:
            (HOST_DIR / "owner.json").unlink(missing_ok=True)
            self._file.close()
            self._file = None


def _describe_owner() -> str:
    try:
        owner = json.loads((HOST_DIR / "owner.json").read_text())
        return f"stack {owner['stack']}, pid {owner['pid']}"
    except (OSError, ValueError, KeyError):
        return f"its lock is {HOST_DIR / 'lock'}"


def node_pid_dir() -> Path:
    """Pid files of the node's servers: host-wide, so any stack can clean up after any."""
    return HOST_DIR / "pids"


# --- what is left on the machine ---------------------------------------------------------


def _process_group(pid: int) -> int | None:
    try:
        # The command name in field 2 is parenthesised and may hold spaces.
        stat = (Path("/proc") / str(pid) / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def _recorded_processes() -> list[PidRecord]:
    """The node's servers, from their pid files, and what they forked into their own
    process group under the same command line (socat's connections): those outlive a
    SIGKILLed parent."""
    records = [PidRecord.load(path) for path in sorted(node_pid_dir().glob("*.pid"))]
    leaders = {record.pid: record.cmdline for record in records if record is not None}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            group = _process_group(pid)
            if group in leaders and cmdline(pid) == leaders[group]:
                found.append(PidRecord(pid, leaders[group]))
    return found


def _pids_where(predicate: Any) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            line = cmdline(int(entry.name))
            if line and predicate(line):
                pids.append(int(entry.name))
    return pids


def shim_pids(containerd_socket: str) -> list[int]:
    """containerd-shim-runc-v2 processes serving our containerd (they outlive it)."""
    return _pids_where(
        lambda line: "containerd-shim" in line and f"-address {containerd_socket}" in line
    )


def kubepods_cgroups() -> list[Path]:
    """The top /kubepods cgroup in each hierarchy (v1 controllers and the v2 tree)."""
    candidates = [CGROUP_ROOT / "kubepods", *CGROUP_ROOT.glob("*/kubepods")]
    return [path for path in candidates if path.is_dir()]


def pod_pids() -> list[int]:
    pids: set[int] = set()
    for top in kubepods_cgroups():
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(line) for line in procs.read_text().split())
    return sorted(pids)


def _unescape(path: str) -> str:
    # /proc/self/mountinfo writes space, tab, newline and backslash as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def node_mounts(node_dir: str) -> list[str]:
    """Mount points under the node's directory (kubelet's root bind-mounted onto itself,
    Pod volumes, container root file systems, shm, network namespaces) or /run/netns."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = _unescape(line.split()[4])
            under_node = point == node_dir or point.startswith(node_dir + "/")
            if under_node or point.startswith(("/run/netns/cni-", "/var/run/netns/cni-")):
                found.append(point)
    return found


def netns_files() -> list[str]:
    return [str(path) for path in Path("/run/netns").glob("cni-*")]


def _iptables_rules(binary: str, table: str) -> list[str]:
    try:
        result = subprocess.run(
            [f"{binary}-save", "-t", table], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        return []
    return result.stdout.splitlines() if result.returncode == 0 else []


def iptables_chains() -> list[tuple[str, str, str]]:
    """(binary, table, chain) for every KUBE-*, CNI-* or SUNDIAL-* chain."""
    chains = []
    for binary in ("iptables", "ip6tables"):
        for table in IPTABLES_TABLES:
            for line in _iptables_rules(binary, table):
                if line.startswith(":") and line[1:].startswith(OUR_CHAIN_PREFIXES):
                    chains.append((binary, table, line[1:].split()[0]))
    return chains


def links() -> list[str]:
    """The Pod bridge and the veths still attached to it."""
    result = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=False
    )
    found = []
    for line in result.stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == BRIDGE or f"master {BRIDGE} " in line:
            found.append(name)
    return found


def changed_sysctls(before: dict[str, str]) -> dict[str, tuple[str, str]]:
    now = read_sysctls()
    return {name: (old, now[name]) for name, old in before.items() if now.get(name) != old}


def leftovers(before: HostRecord | None = None) -> list[str]:
    """Everything of a node still on the machine, one line each; empty when clean.

    Without a record of the machine before the node, changed sysctls and created paths
    cannot be told and are not listed."""
    record = before or HostRecord.load()
    found = [f"process {r.pid}: {r.cmdline}" for r in _recorded_processes()]
    if record is not None:
        found += [f"shim process {pid}" for pid in shim_pids(record.containerd_socket)]
        found += [f"mount {point}" for point in node_mounts(record.node_dir)]
        found += [
            f"sysctl {name}: {old} before the node, now {new}"
            for name, (old, new) in changed_sysctls(record.sysctls).items()
        ]
        found += [f"path {path}" for path in record.created if Path(path).exists()]
    found += [f"pod process {pid}" for pid in pod_pids()]
    found += [f"cgroup {path}" for path in kubepods_cgroups()]
    found += [f"network namespace {path}" for path in netns_files()]
    found += [f"{b} -t {t} chain {c}" for b, t, c in iptables_chains()]
    found += [f"network link {name}" for name in links()]
    return found


# --- clean-up ---------------------------------------------------------------------------


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _kill_pods_and_shims(containerd_socket: str | None) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        pids = pod_pids() + (shim_pids(containerd_socket) if containerd_socket else [])
        if not pids:
            return
        _signal_all(pids, signal.SIGKILL)
        time.sleep(0.2)
    raise StackError(f"processes of the node's Pods would not die: {pids}")


def _unmount_all(node_dir: str) -> None:
    for _ in range(10):
        points = node_mounts(node_dir)
        if not points:
            return
        # Deepest first; a lazy unmount for what is still busy.
        for point in sorted(points, key=lambda p: p.count("/"), reverse=True):
            done = subprocess.run(["umount", point], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    if node_mounts(node_dir):
        raise StackError(f"could not unmount: {node_mounts(node_dir)}")


def _remove_iptables_chains() -> None:
    for binary in ("iptables", "ip6tables"):
        for table in IPTABLES_TABLES:
            rules = _iptables_rules(binary, table)
            ours = {
                line[1:].split()[0]
                for line in rules
                if line.startswith(":") and line[1:].startswith(OUR_CHAIN_PREFIXES)
            }
            if not ours:
                continue
            # First the jumps from chains that are not ours (INPUT, FORWARD, ...) ...
            for line in rules:
                if not line.startswith("-A "):
                    continue
                words = shlex.split(line)
                target = next(
                    (words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-j", "-g")), ""
                )
                if words[1] not in ours and target in ours:
                    subprocess.run(
                        [binary, "-w", "-t", table, "-D", *words[1:]],
                        capture_output=True,
                        check=False,
                    )
            # ... then the chains themselves, emptied before they can be deleted.
            for flag in ("-F", "-X"):
                for chain in sorted(ours):
                    subprocess.run(
                        [binary, "-w", "-t", table, flag, chain], capture_output=True, check=False
                    )


def _remove_cgroups() -> None:
    for top in kubepods_cgroups():
        for directory, _subdirs, _files in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def _restore_sysctls(before: dict[str, str]) -> None:
    for name, (old, _new) in changed_sysctls(before).items():
        with contextlib.suppress(OSError):
            _sysctl_path(name).write_text(old + "\n")


def _remove_created(created: list[str]) -> None:
    for path in map(Path, created):
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _remove_cni_cache() -> None:
    # libcni caches each attachment's result in /var/lib/cni/results whatever the config.
    for path in Path("/var/lib/cni/results").glob(f"{CNI_NETWORK}-*"):
        path.unlink(missing_ok=True)


def reset(record: HostRecord | None = None) -> None:
    """Undoes everything a node did to the machine, whether it stopped cleanly or not:
    processes, mounts, network namespaces, cgroups, iptables chains, the bridge, sysctls,
    paths it created. Idempotent; needs the host lock (so no node is running)."""
    record = record or HostRecord.load()
    kill_all(_recorded_processes())
    for pid_file in node_pid_dir().glob("*.pid"):
        pid_file.unlink()
    _kill_pods_and_shims(record.containerd_socket if record else None)
    if record is not None:
        _unmount_all(record.node_dir)
    for netns in netns_files():
        subprocess.run(["umount", netns], capture_output=True, check=False)
        Path(netns).unlink(missing_ok=True)
    _remove_iptables_chains()
    if BRIDGE in links():
        # Deleting the bridge detaches its veths; their Pods' namespaces are gone already.
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    _remove_cgroups()
    _remove_cni_cache()
    if record is not None:
        _restore_sysctls(record.sysctls)
        _remove_created(record.created)
    (HOST_DIR / "host.json").unlink(missing_ok=True)
