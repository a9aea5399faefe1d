"""Container images for the local node, built without a registry or a Docker engine.

Each image is a docker-archive tarball (the `docker save` layout) in a cache, keyed by a hash
of everything it is built from, so a second call returns at once. containerd loads one with
``ctr -n k8s.io images import FILE``; its reference is a fixed ``localhost/sundial/...`` name.

Command line::

    python hack/images.py build [NAME ...] [--rebuild]  # one archive path per image (stdout)
    python hack/images.py --list                         # NAME  REFERENCE  ARCHIVE or -

Library use::

    from images import IMAGES, build
    archives = build(["pause", "busybox"])           # {"pause": Path(...), ...}
    IMAGES["pause"].reference                         # "localhost/sundial/pause:3.10"

Environment: SUNDIAL_CACHE_DIR (default ~/.cache/sundial; archives in its images/),
SUNDIAL_DEBIAN_MIRROR (default: the bookworm URI in the machine's apt sources), GO (default:
go on PATH, else the one in this Python's bin/). How each image is made: docs/local-images.md.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from docker_archive import DEFAULT_PATH, ImageConfig, write_docker_archive

REPO = Path(__file__).resolve().parent.parent
# Bump when write_docker_archive's output changes for the same inputs.
ARCHIVE_FORMAT = "docker-archive-1"

PAUSE_VERSION = "3.10"
BUSYBOX_VERSION = "1.35"
PAUSE_CFLAGS = ("-Os", "-Wall", "-Werror", "-static", "-s")
BUSYBOX_PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
)
BUSYBOX_GROUP = "root:x:0:\nnobody:x:65534:\n"


class BuildError(RuntimeError):
    """An image could not be built; the message says which step and why."""


@dataclass(frozen=True)
class Image:
    """One image: its fixed reference, what it is made from, and how to make it."""

    name: str
    reference: str
    # Strings naming every input (file digests, tool versions, command lines): the cache key.
    inputs: Callable[[], list[str]]
    # Writes the archive: (this image, a scratch directory, the archive path, the base's archive).
    make: Callable[[Image, Path, Path, Path | None], None]
    base: str | None = None  # the name of the image this one is built FROM


def cache_dir() -> Path:
    root = os.environ.get("SUNDIAL_CACHE_DIR") or str(Path.home() / ".cache" / "sundial")
    return Path(root) / "images"


def run(
    argv: Sequence[str | Path],
    *,
    log: Path | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Runs one build step and returns its stdout; its stderr goes to ``log`` when given."""
    args = [str(arg) for arg in argv]
    if log is None:
        done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        errors = done.stderr
    else:
        with log.open("a") as sink:
            print(f"$ {' '.join(args)}", file=sink, flush=True)
            done = subprocess.run(
                args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=sink, text=True, check=False
            )
        errors = log.read_text()[-3000:]
    if done.returncode != 0:
        where = f" (log: {log})" if log else ""
        raise BuildError(f"exit {done.returncode}{where}: {' '.join(args)}\n{errors}")
    return done.stdout


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- pause and busybox: a file tree written straight into an archive -----------------------


def kubernetes_source() -> Path:
    """The k8s.io/kubernetes module source the other Kubernetes binaries are built from."""
    go = os.environ.get("GO") or shutil.which("go") or str(Path(sys.executable).parent / "go")
    module = run([go, "mod", "download", "-json", "k8s.io/kubernetes"], cwd=REPO / "hack" / "kube")
    return Path(json.loads(module)["Dir"])


def pause_source() -> Path:
    return kubernetes_source() / "build" / "pause" / "linux" / "pause.c"


def pause_inputs() -> list[str]:
    gcc = run(["gcc", "--version"]).splitlines()[0]
    return [f"pause.c {file_digest(pause_source())}", gcc, " ".join(PAUSE_CFLAGS)]


def make_pause(image: Image, work: Path, archive: Path, _base: Path | None) -> None:
    rootfs = work / "rootfs"
    rootfs.mkdir()
    version = f"-DVERSION=v{PAUSE_VERSION}-sundial"
    run(["gcc", *PAUSE_CFLAGS, version, "-o", rootfs / "pause", pause_source()])
    # The upstream image runs as 65535, a user no file on the node belongs to.
    config = ImageConfig(entrypoint=("/pause",), user="65535:65535")
    write_docker_archive(
        rootfs, image.reference, config, archive, created_by="hack/images.py pause"
    )


def busybox_binary() -> Path:
    return Path("/bin/busybox")  # Debian's busybox-static: statically linked, no libc needed


def busybox_inputs() -> list[str]:
    return [f"busybox {file_digest(busybox_binary())}", BUSYBOX_PASSWD, BUSYBOX_GROUP]


def make_busybox(image: Image, work: Path, archive: Path, _base: Path | None) -> None:
    rootfs = work / "rootfs"
    for directory, mode in (("bin", 0o755), ("etc", 0o755), ("root", 0o700), ("tmp", 0o1777)):
        (rootfs / directory).mkdir(parents=True)
        (rootfs / directory).chmod(mode)
    binary = rootfs / "bin" / "busybox"
    shutil.copyfile(busybox_binary(), binary)
    binary.chmod(0o755)
    for applet in run([binary, "--list-full"]).split():
        link = rootfs / applet
        if link == binary:
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("/bin/busybox")
    (rootfs / "etc" / "passwd").write_text(BUSYBOX_PASSWD)
    (rootfs / "etc" / "group").write_text(BUSYBOX_GROUP)
    config = ImageConfig(cmd=("sh",), env=(DEFAULT_PATH,))
    write_docker_archive(
        rootfs, image.reference, config, archive, created_by="hack/images.py busybox"
    )


# ---- the registry of images ------------------------------------------------------------------

IMAGES: dict[str, Image] = {
    image.name: image
    for image in (
        Image("pause", f"localhost/sundial/pause:{PAUSE_VERSION}", pause_inputs, make_pause),
        Image(
            "busybox", f"localhost/sundial/busybox:{BUSYBOX_VERSION}", busybox_inputs, make_busybox
        ),
    )
}


# ---- the cache ---------------------------------------------------------------------------------


def cache_key(name: str) -> str:
    """A digest of everything the image is made from, its base's key included."""
    image = IMAGES[name]
    parts = [ARCHIVE_FORMAT, image.name, image.reference, *image.inputs()]
    if image.base is not None:
        parts.append(f"base {cache_key(image.base)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def archive_path(name: str) -> Path:
    """Where the image's archive is (or will be) for its current inputs."""
    return cache_dir() / f"{name}-{cache_key(name)}.tar"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One build of an image at a time across processes; the second waits, then finds it."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    with (cache_dir() / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_one(name: str, *, rebuild: bool = False) -> Path:
    """The archive of one image, built (with its base) only when its inputs changed."""
    image = IMAGES[name]
    base_archive = build_one(image.base) if image.base is not None else None
    with _locked(name):
        archive = archive_path(name)
        if archive.exists() and not rebuild:
            return archive
        print(f">> building image {name} ({image.reference})", file=sys.stderr)
        started = time.monotonic()
        scratch = cache_dir() / "tmp"
        scratch.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(dir=scratch, prefix=f"{name}-") as work:
            partial = Path(work) / "image.tar"
            image.make(image, Path(work), partial, base_archive)
            partial.replace(archive)
        for stale in cache_dir().glob(f"{name}-*.tar"):
            if stale != archive:
                stale.unlink()
        size = archive.stat().st_size / 1e6
        took = time.monotonic() - started
        print(f">> built {name}: {archive} ({size:.1f} MB, {took:.1f}s)", file=sys.stderr)
        return archive


def build(names: Sequence[str] = (), *, rebuild: bool = False) -> dict[str, Path]:
    """Archives for ``names`` (every image when empty), in the order asked."""
    unknown = [name for name in names if name not in IMAGES]
    if unknown:
        raise BuildError(f"unknown image(s) {', '.join(unknown)}; known: {', '.join(IMAGES)}")
    return {name: build_one(name, rebuild=rebuild) for name in (names or list(IMAGES))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--list", action="store_true", help="list the images and their archives")
    commands = parser.add_subparsers(dest="command")
    build_parser = commands.add_parser("build", help="build (or find) archives; print their paths")
    build_parser.add_argument("names", nargs="*", metavar="NAME", help="images (default: all)")
    build_parser.add_argument("--rebuild", action="store_true", help="ignore the cache")
    args = parser.parse_args(argv)
    try:
        if args.list:
            for name, image in IMAGES.items():
                archive = archive_path(name)
                print(f"{name}\t{image.reference}\t{archive if archive.exists() else '-'}")
            return 0
        if args.command != "build":
            parser.print_usage(sys.stderr)
            return 2
        for archive in build(args.names, rebuild=args.rebuild).values():
            print(archive)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
