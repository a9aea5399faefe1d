"""Container images for the local node, built without a registry or a Docker engine.

Each image is a docker-archive tarball (the `docker save` layout) in a cache, keyed by a hash
of everything it is built from, so a second call returns at once. The node imports them with
``ctr -n k8s.io images import FILE``; each has a fixed ``localhost/sundial/...`` reference.

- pause: Kubernetes' own build/pause/linux/pause.c (the k8s.io/kubernetes module hack/kube
  pins, from the Go module cache), ``gcc -static``; written by docker_archive.py.
- busybox: Debian's busybox-static, a link per applet, /etc/passwd and /etc/group.
- python-base: ``debootstrap --variant=minbase`` of bookworm with python3 (and its venv
  module), from the mirror in the machine's apt sources.
- example-service, operator: examples/service/Dockerfile and the repository's Dockerfile,
  built FROM python-base with buildah (buildah.py); the operator's wheels are downloaded on
  the host first, from the hashed pins of requirements.lock and requirements-build.lock
  (``make lock``), since the build has no network; the example service's context gets the
  sundial-cron library's source (lib/sundial-cron/src/sundial_cron).

Command line::

    python hack/images.py build [NAME ...] [--rebuild]  # one archive path per image (stdout)
    python hack/images.py list                           # NAME  REFERENCE  ARCHIVE-or-"-"
    python hack/images.py --list                         # the same
    python hack/images.py build-args                     # the operator's label --build-args

Library use (``hack`` on sys.path)::

    import images
    images.build(["pause", "busybox"])   # {"pause": Path(...), "busybox": Path(...)}
    images.ensure("pause")               # one archive
    images.IMAGES["pause"].reference     # "localhost/sundial/pause:3.10"

Environment: SUNDIAL_CACHE_DIR (default ~/.cache/sundial; archives in its images/),
SUNDIAL_DEBIAN_MIRROR (default: the bookworm URI in the machine's apt sources), GO (default:
go on PATH, else the one beside this Python). Figures and details: docs/local-images.md.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from buildah import BuildahError, build_dockerfile
from debian_base import mirror_from_apt_sources, prune, unmount_under
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


def run(argv: Sequence[str | Path], *, log: Path | None = None, cwd: Path | None = None) -> str:
    """Runs one build step and returns its stdout, or, with ``log``, appends all output there."""
    args = [str(arg) for arg in argv]
    if shutil.which(args[0]) is None:
        hint = "hack/install-node-packages.sh installs the build tools; Go: hack/build-binaries.sh"
        raise BuildError(f"{args[0]} not found ({hint})")
    if log is None:
        done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
        output, errors = done.stdout, done.stderr
    else:
        with log.open("a") as sink:
            print(f"$ {shlex.join(args)}", file=sink, flush=True)
            done = subprocess.run(args, cwd=cwd, stdout=sink, stderr=sink, check=False)
        output, errors = "", log.read_text()[-3000:]
    if done.returncode != 0:
        where = f" (log: {log})" if log else ""
        raise BuildError(f"exit {done.returncode}{where}: {' '.join(args)}\n{errors}")
    return output


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
    if not busybox_binary().is_file():
        raise BuildError("no /bin/busybox: hack/install-node-packages.sh installs busybox-static")
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


# ---- python-base: a Debian root file system made by debootstrap -----------------------------

DEBIAN_SUITE = "bookworm"
# python3-venv: the operator's Dockerfile installs into a venv (Debian's python3 has no pip).
PYTHON_BASE_PACKAGES = ("python3", "python3-venv")
PYTHON_BASE_VERSION = "3.11"  # bookworm's python3; the operator's wheels are fetched for it


def debian_mirror() -> str:
    """Where debootstrap fetches from: SUNDIAL_DEBIAN_MIRROR, else apt's mirror for the suite."""
    mirror = os.environ.get("SUNDIAL_DEBIAN_MIRROR") or mirror_from_apt_sources(DEBIAN_SUITE)
    if not mirror:
        raise BuildError(f"no {DEBIAN_SUITE} mirror in /etc/apt; set SUNDIAL_DEBIAN_MIRROR to one")
    return mirror


def python_base_inputs() -> list[str]:
    debootstrap = run(["debootstrap", "--version"]).strip()
    return [debootstrap, DEBIAN_SUITE, debian_mirror(), ",".join(PYTHON_BASE_PACKAGES)]


def make_python_base(image: Image, work: Path, archive: Path, _base: Path | None) -> None:
    rootfs = work / "rootfs"
    log = _fresh_log(image.name)
    include = "--include=" + ",".join(PYTHON_BASE_PACKAGES)
    try:
        run(
            ["debootstrap", "--variant=minbase", include, DEBIAN_SUITE, rootfs, debian_mirror()],
            log=log,
        )
    finally:
        unmount_under(rootfs)  # before the scratch directory is deleted
    if not (rootfs / "usr" / "bin" / f"python{PYTHON_BASE_VERSION}").exists():
        raise BuildError(f"{DEBIAN_SUITE} did not install python{PYTHON_BASE_VERSION} (log: {log})")
    prune(rootfs)
    config = ImageConfig(cmd=("python3",), env=(DEFAULT_PATH, "LANG=C.UTF-8"))
    # debootstrap ran as root: the owners on disk (root, and e.g. group shadow) are the image's.
    write_docker_archive(
        rootfs, image.reference, config, archive, root_owned=False, mtime=None,
        created_by=f"debootstrap --variant=minbase {include} {DEBIAN_SUITE}",
    )  # fmt: skip


def _fresh_log(name: str) -> Path:
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    log.write_text("")
    return log


# ---- images built from a Dockerfile, FROM python-base ----------------------------------------

# Never in a build context: they would change the key without changing the image.
CONTEXT_IGNORED = ("__pycache__", "*.pyc", "*.egg-info")


@dataclass(frozen=True)
class DockerfileBuild:
    """A Dockerfile build: the files of its context, relative to ``directory``."""

    directory: Path
    files: tuple[str, ...]
    build_args: tuple[tuple[str, str], ...] = ()
    # Adds generated files (e.g. a wheelhouse) to the context; extra_inputs name what they are.
    extra: Callable[[Path], None] | None = None
    extra_inputs: Callable[[], list[str]] = list

    def inputs(self) -> list[str]:
        digests = [f"{path} {file_digest(self.directory / path)}" for path in self.context_files()]
        arguments = [f"--build-arg {name}={value}" for name, value in self.build_args]
        return [*digests, *arguments, *self.extra_inputs()]

    def context_files(self) -> list[str]:
        ignored = shutil.ignore_patterns(*CONTEXT_IGNORED)
        found: list[str] = []
        for entry in self.files:
            path = self.directory / entry
            if path.is_file():
                found.append(entry)
                continue
            for directory, subdirs, files in os.walk(path):
                subdirs[:] = [d for d in subdirs if d not in ignored(directory, subdirs)]
                kept = set(files) - ignored(directory, files)
                found += [
                    (Path(directory) / f).relative_to(self.directory).as_posix() for f in kept
                ]
        return sorted(found)

    def make_context(self, context: Path) -> None:
        for path in self.context_files():
            (context / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.directory / path, context / path)
        if self.extra is not None:
            self.extra(context)


def dockerfile_image(name: str, reference: str, recipe: DockerfileBuild) -> Image:
    def make(image: Image, work: Path, archive: Path, base_archive: Path | None) -> None:
        assert image.base is not None
        assert base_archive is not None
        context = work / "context"
        recipe.make_context(context)
        build_dockerfile(
            context=context,
            reference=image.reference,
            archive=archive,
            base_reference=IMAGES[image.base].reference,
            base_archive=base_archive,
            build_args=recipe.build_args,
            storage=work / "buildah",
            log=_fresh_log(image.name),
        )

    return Image(name, reference, recipe.inputs, make, base="python-base")


# ---- the operator's wheels, fetched on the host: the build itself has no network --------------

GLIBC_MINOR = 36  # bookworm's glibc 2.36: manylinux wheels up to manylinux_2_36 run on it
# `make lock` writes both, pinned with hashes: the runtime dependencies of pyproject.toml, and
# the build backend (its [build-system] requires) that `pip wheel .` needs in the build stage.
LOCK_FILES = ("requirements.lock", "requirements-build.lock")


def wheel_platforms() -> list[str]:
    arch = platform.machine()
    return [
        *(f"manylinux_2_{minor}_{arch}" for minor in range(GLIBC_MINOR, 16, -1)),
        f"manylinux2014_{arch}",  # pip adds manylinux2010 and manylinux1 to this one
    ]


def lock_paths() -> list[Path]:
    missing = [lock for lock in LOCK_FILES if not (REPO / lock).is_file()]
    if missing:
        raise BuildError(f"no {', '.join(missing)}: `make lock` writes them")
    return [REPO / lock for lock in LOCK_FILES]


def wheelhouse_inputs() -> list[str]:
    locks = [f"{lock.name} {file_digest(lock)}" for lock in lock_paths()]
    return [f"python {PYTHON_BASE_VERSION}", *wheel_platforms(), *locks]


def wheelhouse() -> Path:
    """The wheels the lock files pin, for python-base's Python, hash-checked, cached like images."""
    key = hashlib.sha256("\n".join(wheelhouse_inputs()).encode()).hexdigest()[:20]
    wheels = cache_dir() / f"wheelhouse-{key}"
    with _locked("wheelhouse"):
        if wheels.is_dir():
            return wheels
        print(">> downloading the operator's wheels (pip download)", file=sys.stderr)
        partial = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=".wheelhouse-"))
        version = PYTHON_BASE_VERSION.replace(".", "")
        requirements = [f"--requirement={lock}" for lock in lock_paths()]
        run(
            [
                sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes",
                "--no-deps", "--only-binary=:all:", f"--python-version={PYTHON_BASE_VERSION}",
                "--implementation=cp", f"--abi=cp{version}",
                *(f"--platform={tag}" for tag in wheel_platforms()), f"--dest={partial}",
                *requirements,
            ],
            log=_fresh_log("wheelhouse"),
        )  # fmt: skip
        for stale in cache_dir().glob("wheelhouse-*"):
            shutil.rmtree(stale)
        partial.rename(wheels)
        return wheels


def add_wheelhouse(context: Path) -> None:
    shutil.copytree(wheelhouse(), context / "wheelhouse", copy_function=os.link)


def label_build_args() -> tuple[tuple[str, str], ...]:
    """The operator Dockerfile's label arguments, from pyproject.toml (`make image` uses them too).

    VERSION always; LICENSES and SOURCE only once pyproject.toml declares a license and a
    Source (or Repository) URL, else the Dockerfile's defaults stay.
    """
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    arguments = [("VERSION", str(project["version"]))]
    license_ = project.get("license")
    if isinstance(license_, dict):
        license_ = license_.get("text")  # the older table form; its file form names no SPDX id
    if license_:
        arguments.append(("LICENSES", str(license_)))
    urls = project.get("urls", {})
    source = urls.get("Source") or urls.get("Repository")
    if source:
        arguments.append(("SOURCE", str(source)))
    return tuple(arguments)


# The sundial-cron library the example service runs its jobs with: its source, copied into
# the build context as sundial_cron/ (pure Python, the standard library only: no wheel to
# build, no index to reach).
CRON_LIBRARY = DockerfileBuild(REPO / "lib" / "sundial-cron" / "src", ("sundial_cron",))


def add_cron_library(context: Path) -> None:
    CRON_LIBRARY.make_context(context)


EXAMPLE_SERVICE = DockerfileBuild(
    REPO / "examples" / "service",
    ("Dockerfile", "service"),
    extra=add_cron_library,
    extra_inputs=CRON_LIBRARY.inputs,
)
OPERATOR = DockerfileBuild(
    REPO,
    ("Dockerfile", ".dockerignore", "pyproject.toml", *LOCK_FILES, "operator"),
    # The wheelhouse is /src/wheelhouse in the build stage (WORKDIR /src, COPY . .).
    build_args=(("PIP_NO_INDEX", "1"), ("PIP_FIND_LINKS", "/src/wheelhouse"), *label_build_args()),
    extra=add_wheelhouse,
    extra_inputs=wheelhouse_inputs,
)


# ---- the registry of images ------------------------------------------------------------------

IMAGES: dict[str, Image] = {
    image.name: image
    for image in (
        Image("pause", f"localhost/sundial/pause:{PAUSE_VERSION}", pause_inputs, make_pause),
        Image(
            "busybox", f"localhost/sundial/busybox:{BUSYBOX_VERSION}", busybox_inputs, make_busybox
        ),
        Image(
            "python-base",
            f"localhost/sundial/python-base:{DEBIAN_SUITE}",
            python_base_inputs,
            make_python_base,
        ),
        dockerfile_image(
            "example-service", "localhost/sundial/example-service:dev", EXAMPLE_SERVICE
        ),
        dockerfile_image("operator", "localhost/sundial/operator:dev", OPERATOR),
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


def ensure(name: str, *, rebuild: bool = False) -> Path:
    """The archive of one image, built (with its base) only when its inputs changed."""
    image = IMAGES[name]
    base_archive = ensure(image.base) if image.base is not None else None
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
            # Only this module's own older archives (name-<20 hex>.tar), never another file.
            if stale != archive and re.fullmatch(
                rf"{re.escape(name)}-[0-9a-f]{{20}}\.tar", stale.name
            ):
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
    return {name: ensure(name, rebuild=rebuild) for name in (names or list(IMAGES))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--list", action="store_true", help="the same as the list command")
    commands = parser.add_subparsers(dest="command")
    build_parser = commands.add_parser("build", help="build (or find) archives; print their paths")
    build_parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(IMAGES)}")
    build_parser.add_argument("--rebuild", action="store_true", help="ignore the cache")
    commands.add_parser("list", help="name, reference and cached archive (or -) of each image")
    commands.add_parser(
        "build-args", help="the operator Dockerfile's label --build-arg options, shell-quoted"
    )
    args = parser.parse_args(argv)
    try:
        if args.list or args.command == "list":
            for name, image in IMAGES.items():
                archive = archive_path(name)
                print(f"{name}\t{image.reference}\t{archive if archive.exists() else '-'}")
            return 0
        if args.command == "build-args":
            print(shlex.join(f"--build-arg={name}={value}" for name, value in label_build_args()))
            return 0
        if args.command != "build":
            parser.print_usage(sys.stderr)
            return 2
        for archive in build(args.names, rebuild=args.rebuild).values():
            print(archive)
    except (BuildError, BuildahError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
