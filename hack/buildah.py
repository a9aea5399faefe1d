"""Builds a Dockerfile into a docker-archive tarball with buildah, touching nothing host-wide.

Each build gets its own throw-away storage (vfs driver, --root/--runroot in a scratch
directory): the base is loaded from its archive, the Dockerfile built with no network and no
pulls, the result pushed to an archive, and the storage deleted. So nothing is written to
/var/lib/containers or /run/containers, no image store grows, and two builds never share state.

Two things buildah 1.28 does by default that this avoids:
- As root it keeps a blob-info cache in /var/lib/containers/cache whatever --root says; every
  buildah call here runs in a private mount namespace where /var/lib is read-only, so that cache
  stays in memory (containers/image falls back to it when the directory cannot be made).
- Its default networking creates a cni-podman0 bridge and iptables chains; --network=none
  creates neither, and build_dockerfile checks that no bridge or podman CNI config appeared.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

# /var/lib read-only for buildah only (see the module docstring); exec keeps its exit status.
_READ_ONLY_VAR_LIB = 'mount --bind -o ro /var/lib /var/lib && exec "$@"'
NETWORK_BRIDGE = Path("/sys/class/net/cni-podman0")
CNI_CONFIG = Path("/etc/cni/net.d")


class BuildahError(RuntimeError):
    """A buildah step failed; the message names the step and ends with its log."""


def build_dockerfile(
    *,
    context: Path,
    reference: str,
    archive: Path,
    base_reference: str,
    base_archive: Path,
    build_args: Sequence[tuple[str, str]] = (),
    storage: Path,
    log: Path,
) -> None:
    """Builds ``context``/Dockerfile FROM the base in ``base_archive``; writes ``archive``.

    The Dockerfile gets ``--build-arg BASE=<base_reference>`` plus ``build_args``. ``storage``
    is a fresh directory this function may fill (gigabytes: vfs copies every layer whole);
    the caller deletes it.
    """
    if storage.resolve().is_relative_to("/var/lib"):
        raise BuildahError(f"buildah storage {storage} cannot be under /var/lib (read-only here)")
    state_before = network_state()
    buildah = buildah_command(storage)
    env = {**os.environ, "TMPDIR": str(storage / "tmp")}  # big temporary files, not in /var/tmp
    (storage / "tmp").mkdir(parents=True)
    loaded = _run([*buildah, "pull", "--quiet", f"docker-archive:{base_archive}"], log, env)
    _run([*buildah, "tag", loaded.split()[-1], base_reference], log, env)
    arguments = [
        f"--build-arg={name}={value}" for name, value in (("BASE", base_reference), *build_args)
    ]
    _run(
        [
            *buildah, "bud", "--pull-never", "--isolation=oci", "--network=none",
            # runc's state in the scratch storage too, not /run/runc
            f"--runtime-flag=root={storage / 'runc'}",
            "--format=docker", *arguments, f"--tag={reference}",
            f"--file={context / 'Dockerfile'}", str(context),
        ],
        log,
        env,
    )  # fmt: skip
    archive.unlink(missing_ok=True)  # pushing onto an existing archive fails
    _run(
        [*buildah, "push", "--quiet", reference, f"docker-archive:{archive}:{reference}"], log, env
    )
    left_behind = network_state() - state_before
    if left_behind:
        raise BuildahError(f"buildah left network state behind: {', '.join(sorted(left_behind))}")


def buildah_command(storage: Path) -> list[str]:
    """``buildah`` on the private storage in ``storage``, with /var/lib read-only."""
    return [
        "unshare", "--mount", "--propagation", "private", "sh", "-c", _READ_ONLY_VAR_LIB, "sh",
        "buildah", "--root", str(storage / "root"), "--runroot", str(storage / "runroot"),
        "--storage-driver", "vfs",
    ]  # fmt: skip


def network_state() -> set[str]:
    """Host network state only buildah's (podman's) default networking makes.

    Its bridge and its CNI config file. Not iptables chains: a node's own CNI bridge plugin
    makes CNI-* chains too, so their coming and going says nothing about this build.
    """
    state = {f"link {NETWORK_BRIDGE.name}"} if NETWORK_BRIDGE.exists() else set()
    state |= {f"file {path}" for path in CNI_CONFIG.glob("*podman*")}
    return state


def _run(argv: Sequence[str], log: Path, env: dict[str, str]) -> str:
    with log.open("a") as sink:
        print(f"$ {shlex.join(argv)}", file=sink, flush=True)
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=sink, text=True, env=env, check=False
        )
        sink.write(done.stdout)
    if done.returncode != 0:
        tail = log.read_text()[-3000:]
        raise BuildahError(f"exit {done.returncode} (log: {log}): {' '.join(argv)}\n{tail}")
    return done.stdout
