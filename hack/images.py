"""Container images without a registry: built locally, cached, written as docker-archives.

    python hack/images.py build pause busybox    # one archive path per name, in order
    python hack/images.py list                   # the names and their references

No registry is reachable and there is no Docker engine here, so the local stack's node
imports these archives into containerd (`ctr images import`):

- pause: the sandbox image, compiled from Kubernetes' own build/pause/linux/pause.c (in
  the Go module cache of the k8s.io/kubernetes version hack/kube pins) with `gcc -static`.
- busybox: Debian's busybox-static with a link per applet, for test Pods.
- python-base: a Debian root file system made by debootstrap from the machine's own apt
  sources, with python3: the base the repository's Dockerfiles build on here.
- example-service: examples/service/Dockerfile, built with buildah on python-base.

Each archive is cached under $SUNDIAL_CACHE_DIR/images (default ~/.cache/sundial/images)
by a hash of its inputs: a second call returns at once. docs/local-images.md has the
details and the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SUNDIAL_CACHE_DIR") or Path.home() / ".cache" / "sundial") / "images"
# Bump to rebuild every image (a change to how archives are written).
FORMAT = "1"


@dataclass(frozen=True)
class Image:
    name: str
    reference: str
    # What the image is made of; a change gives a new cache entry.
    inputs: Callable[[], list[str]]
    build: Callable[[Path, str], None]  # (archive to write, reference)


def _log(message: str) -> None:
    print(f">> {message}", file=sys.stderr, flush=True)


# ---- the archive writer --------------------------------------------------------------


def write_archive(archive: Path, reference: str, rootfs: Path, config: dict[str, object]) -> None:
    """A one-layer image in `docker save` layout: manifest.json, the config, the layer;
    every file owned by root. containerd and buildah both read it."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for path in sorted(rootfs.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isfile():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "hack/images.py"}],
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [reference], "Layers": [layer_name]}]
    partial = archive.with_suffix(".partial")
    with tarfile.open(partial, mode="w") as out:
        for name, data in (
            (config_name, config_bytes),
            (layer_name, layer_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    partial.replace(archive)


# ---- pause ---------------------------------------------------------------------------


def _kube_module_dir() -> Path:
    """The k8s.io/kubernetes module source hack/kube pins, downloaded if need be."""
    go = os.environ.get("GO") or shutil.which("go") or str(Path(sys.executable).parent / "go")
    found = subprocess.run(
        [go, "mod", "download", "-json", "k8s.io/kubernetes"],
        cwd=REPO / "hack" / "kube",
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(json.loads(found.stdout)["Dir"])


def _pause_source() -> Path:
    return _kube_module_dir() / "build" / "pause" / "linux" / "pause.c"


def _build_pause(archive: Path, reference: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        rootfs = Path(scratch) / "rootfs"
        rootfs.mkdir()
        subprocess.run(
            ["gcc", "-Os", "-static", "-o", str(rootfs / "pause"), str(_pause_source())],
            check=True,
        )
        subprocess.run(["strip", str(rootfs / "pause")], check=True)
        write_archive(archive, reference, rootfs, {"Entrypoint": ["/pause"]})


# ---- busybox -------------------------------------------------------------------------

BUSYBOX = Path("/bin/busybox")
PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def _build_busybox(archive: Path, reference: str) -> None:
    if not BUSYBOX.is_file():
        raise SystemExit("no /bin/busybox: run hack/install-node-packages.sh (busybox-static)")
    applets = subprocess.run(
        [str(BUSYBOX), "--list-full"], check=True, capture_output=True, text=True
    ).stdout.split()
    with tempfile.TemporaryDirectory() as scratch:
        rootfs = Path(scratch) / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
        for applet in applets:  # e.g. bin/sh, usr/bin/env
            link = rootfs / applet
            if link.name == "busybox" or link.exists():
                continue
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
        (rootfs / "etc").mkdir()
        (rootfs / "etc" / "passwd").write_text(PASSWD)
        (rootfs / "etc" / "group").write_text(GROUP)
        (rootfs / "tmp").mkdir(mode=0o1777)
        write_archive(archive, reference, rootfs, {"Cmd": ["sh"], "Env": [ENV_PATH]})


ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# ---- python-base: debootstrap --------------------------------------------------------


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses (never a host named in the code)."""
    for source in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for line in source.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["deb"] and "security" not in line:
                return parts[1]
    raise SystemExit("no Debian mirror found in /etc/apt: cannot debootstrap a base image")


def _build_python_base(archive: Path, reference: str) -> None:
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        rootfs = Path(scratch) / "rootfs"
        _log(f"debootstrap of {reference} (about 75 s, first time only)")
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3", "bookworm",
             str(rootfs), apt_mirror()],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / leftover, ignore_errors=True)
        (rootfs / "proc").mkdir(exist_ok=True)
        write_archive(archive, reference, rootfs, {"Cmd": ["python3"], "Env": [ENV_PATH]})


# ---- Dockerfiles: buildah ------------------------------------------------------------

BUILDAH_STORE = CACHE / "buildah"


def _buildah(*args: str) -> None:
    # A private store: nothing is written to /var/lib/containers; vfs needs no overlay.
    subprocess.run(
        ["buildah", "--storage-driver", "vfs", "--root", str(BUILDAH_STORE / "root"),
         "--runroot", str(BUILDAH_STORE / "run"), *args],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def build_dockerfile(context: Path, dockerfile: Path, base: str, archive: Path, ref: str) -> None:
    """buildah bud on a locally built base, with no network and no registry."""
    base_archive = ensure("python-base")
    _buildah("pull", f"docker-archive:{base_archive}")
    _buildah("tag", _archive_reference(base_archive), base)
    # --network=none: no CNI bridge or iptables chain is left behind by the build.
    build_args = ["--build-arg", f"BASE={base}", "-f", str(dockerfile), "-t", ref]
    _buildah("bud", "--pull-never", "--isolation=oci", "--network=none", *build_args, str(context))
    archive.unlink(missing_ok=True)  # buildah cannot push into an existing archive
    _buildah("push", ref, f"docker-archive:{archive}:{ref}")


def _archive_reference(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        return str(json.load(member)[0]["RepoTags"][0])


EXAMPLE = REPO / "examples" / "service"


def _build_example(archive: Path, reference: str) -> None:
    build_dockerfile(EXAMPLE, EXAMPLE / "Dockerfile", IMAGES["python-base"].reference,
                     archive, reference)  # fmt: skip


def _files(*paths: Path) -> list[str]:
    return [
        f"{path.relative_to(REPO)}:{hashlib.sha256(path.read_bytes()).hexdigest()}"
        for root in paths
        for path in (sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root])
        if "__pycache__" not in path.parts
    ]


IMAGES: dict[str, Image] = {
    image.name: image
    for image in (
        Image(
            "pause",
            "localhost/sundial/pause:3.10",
            lambda: [hashlib.sha256(_pause_source().read_bytes()).hexdigest()],
            _build_pause,
        ),
        Image(
            "busybox",
            "localhost/sundial/busybox:1.35",
            lambda: [hashlib.sha256(BUSYBOX.read_bytes()).hexdigest()],
            _build_busybox,
        ),
        Image(
            "python-base",
            "localhost/sundial/python-base:bookworm",
            lambda: ["bookworm", "minbase", "python3"],
            _build_python_base,
        ),
        Image(
            "example-service",
            "localhost/sundial/example-service:dev",
            lambda: _files(EXAMPLE),
            _build_example,
        ),
    )
}


def ensure(name: str) -> Path:
    """The archive of one image, built the first time (or when its inputs change)."""
    image = IMAGES[name]
    key = hashlib.sha256(
        json.dumps([FORMAT, image.reference, *image.inputs()]).encode()
    ).hexdigest()[:16]
    archive = CACHE / f"{name}-{key}.tar"
    if archive.is_file():
        return archive
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob(f"{name}-*.tar"):
        stale.unlink()
    _log(f"building image {image.reference}")
    image.build(archive, image.reference)
    return archive


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="print one archive path per image name")
    build.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(IMAGES)}")
    commands.add_parser("list", help="the image names and references")
    args = parser.parse_args(argv)
    if args.command == "list":
        for image in IMAGES.values():
            print(image.name, image.reference)
        return 0
    unknown = [name for name in args.names if name not in IMAGES]
    if unknown:
        parser.error(f"unknown image {', '.join(unknown)}: choose from {', '.join(IMAGES)}")
    for name in args.names or list(IMAGES):
        print(ensure(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
