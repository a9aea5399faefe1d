"""Writes a one-layer image archive in the `docker save` layout, from a directory.

The archive is a tar holding ``manifest.json``, the image config (``<digest>.json``) and the
layer (``<digest>/layer.tar``, uncompressed). ``ctr -n k8s.io images import FILE`` (containerd
1.6 and 2.x) and ``buildah pull docker-archive:FILE`` both read it. Pure: no subprocess, no
network; the same directory, reference and config give the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Fixed timestamps make the digests depend on the content alone.
EPOCH = "1970-01-01T00:00:00Z"
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an image config (the OCI/Docker `config` object)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = (DEFAULT_PATH,)
    user: str = ""
    workdir: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        config: dict[str, Any] = {"Env": list(self.env)}
        if self.entrypoint:
            config["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            config["Cmd"] = list(self.cmd)
        if self.user:
            config["User"] = self.user
        if self.workdir:
            config["WorkingDir"] = self.workdir
        if self.labels:
            config["Labels"] = dict(sorted(self.labels.items()))
        return config


def goarch() -> str:
    """The machine's architecture in the image config's (Go) spelling."""
    machine = platform.machine().lower()
    try:
        return _GOARCH[machine]
    except KeyError:
        raise RuntimeError(f"unsupported architecture {machine!r}") from None


def write_layer(rootfs: Path, layer: Path, *, root_owned: bool, mtime: int | None) -> str:
    """Tars ``rootfs`` (its contents, not the directory itself) into ``layer``.

    root_owned: every entry uid/gid 0, as a file tree built by an ordinary user should be;
    otherwise the numeric owners on disk are kept (a debootstrap tree made as root).
    mtime: one timestamp for every entry (reproducible), or None to keep each file's own.
    Returns the layer's sha256 hex digest (its diff_id).
    """
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk_sorted(rootfs):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(rootfs).as_posix())
            if info is None:  # a socket: nothing a layer can hold
                continue
            info.mtime = mtime if mtime is not None else int(info.mtime)
            if root_owned:
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
            else:
                info.uname = info.gname = ""  # numeric ids only, as the image's own files say
            if info.isreg():
                with path.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)
    return _sha256_file(layer)


def write_docker_archive(
    rootfs: Path,
    reference: str,
    config: ImageConfig,
    archive: Path,
    *,
    root_owned: bool = True,
    mtime: int | None = 0,
    created_by: str = "hack/images.py",
) -> str:
    """Writes a one-layer image of ``rootfs`` tagged ``reference`` to ``archive``.

    Returns the image id (the config's sha256 hex digest).
    """
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".layer-") as scratch:
        layer = Path(scratch) / "layer.tar"
        diff_id = write_layer(rootfs, layer, root_owned=root_owned, mtime=mtime)
        image_config = {
            "architecture": goarch(),
            "os": "linux",
            "created": EPOCH,
            "config": config.as_json(),
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
            "history": [{"created": EPOCH, "created_by": created_by}],
        }
        config_bytes = _canonical_json(image_config)
        image_id = hashlib.sha256(config_bytes).hexdigest()
        manifest = [
            {
                "Config": f"{image_id}.json",
                "RepoTags": [reference],
                "Layers": [f"{diff_id}/layer.tar"],
            }
        ]
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_directory(tar, diff_id)
            info = tar.gettarinfo(str(layer), arcname=f"{diff_id}/layer.tar")
            _normalise(info)
            with layer.open("rb") as content:
                tar.addfile(info, content)
            _add_bytes(tar, f"{image_id}.json", config_bytes)
            _add_bytes(tar, "manifest.json", _canonical_json(manifest))
    return image_id


def _walk_sorted(root: Path) -> list[Path]:
    """Every path under ``root`` (not ``root``), parents before children, in name order.

    Symbolic links to directories are entries, never followed (os.walk's default).
    """
    found = [
        Path(directory) / name
        for directory, subdirs, files in os.walk(root)
        for name in [*subdirs, *files]
    ]
    return sorted(found, key=lambda path: path.relative_to(root).parts)


def _canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as content:
        for chunk in iter(lambda: content.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _normalise(info: tarfile.TarInfo) -> None:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0


def _add_directory(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    _normalise(info)
    tar.addfile(info)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    _normalise(info)
    tar.addfile(info, io.BytesIO(data))
