"""Helpers for the Debian root file system python-base is made of (debootstrap runs in images.py).

Where the mirror comes from (this machine's apt sources, never a host written in code), what
of debootstrap's output an image should not carry, and the clean-up a failed run needs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

# Caches and host files debootstrap leaves in the tree: emptied (the directories stay).
PRUNED_DIRECTORIES = ("var/cache/apt", "var/lib/apt/lists", "dev", "run", "tmp")
# Copied from the host by debootstrap; a container runtime provides its own.
REMOVED_FILES = ("etc/resolv.conf", "etc/hostname")


def mirror_from_apt_sources(suite: str, apt_dir: Path = Path("/etc/apt")) -> str | None:
    """The first ``deb`` URI apt uses for ``suite``: deb822 .sources first, then .list lines."""
    for sources in sorted(apt_dir.glob("sources.list.d/*.sources")):
        for stanza in sources.read_text().split("\n\n"):
            fields = _deb822_fields(stanza)
            types, suites = fields.get("types", "").split(), fields.get("suites", "").split()
            if "deb" in types and suite in suites and fields.get("uris"):
                return fields["uris"].split()[0]
    for sources in [apt_dir / "sources.list", *sorted(apt_dir.glob("sources.list.d/*.list"))]:
        lines = sources.read_text().splitlines() if sources.exists() else []
        for line in lines:
            words = _without_options(line.split("#")[0].split())
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    return None


def _deb822_fields(stanza: str) -> dict[str, str]:
    """``Key: value`` fields (keys lower-cased), continuation lines joined, comments dropped."""
    fields: dict[str, str] = {}
    key = ""
    for line in stanza.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line[0].isspace() and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            fields[key] = value.strip()
    return fields


def _without_options(words: list[str]) -> list[str]:
    """Drops a one-line source's ``[arch=amd64 signed-by=...]`` options."""
    if words[1:] and words[1].startswith("["):
        end = next((i for i, word in enumerate(words) if word.endswith("]")), len(words) - 1)
        return [words[0], *words[end + 1 :]]
    return words


def prune(rootfs: Path) -> None:
    for directory in PRUNED_DIRECTORIES:
        for entry in (rootfs / directory).iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    for file in REMOVED_FILES:
        (rootfs / file).unlink(missing_ok=True)


def unmount_under(directory: Path) -> None:
    """Unmounts whatever a failed debootstrap left mounted in ``directory`` (proc, sys)."""
    prefix = str(directory.resolve())
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount_point in sorted(mounts, reverse=True):  # the deepest first
        if mount_point == prefix or mount_point.startswith(prefix + "/"):
            subprocess.run(["umount", "--lazy", mount_point], check=False)
