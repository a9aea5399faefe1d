"""hack/images.py builds real images with the host's tools, and a second call finds them cached.

Marked ``images`` (deselect with -m 'not images'). The pause/busybox tests take about a second
and run by default. The example-service test builds with buildah FROM python-base (about 80 s
the first time on a machine, for python-base; about 25 s after): it runs only with
SUNDIAL_SLOW_IMAGE_TESTS=1.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import images
from buildah import buildah_command, network_state

pytestmark = pytest.mark.images
IMAGES_PY = Path(images.__file__)


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUNDIAL_CACHE_DIR", str(tmp_path))
    return tmp_path / "images"


def layer_of(archive: Path) -> tarfile.TarFile:
    with tarfile.open(archive) as outer:
        (manifest,) = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        (layer,) = manifest["Layers"]
        assert manifest["RepoTags"] == [images.IMAGES[archive.name.split("-")[0]].reference]
        data = outer.extractfile(layer).read()  # type: ignore[union-attr]
    return tarfile.open(fileobj=io.BytesIO(data))


def test_pause_and_busybox_are_built_then_found_in_the_cache(private_cache: Path) -> None:
    archives = images.build(["pause", "busybox"])

    assert list(archives) == ["pause", "busybox"]
    assert all(archive.parent == private_cache for archive in archives.values())
    with layer_of(archives["pause"]) as layer:
        pause = layer.getmember("pause")
        assert pause.mode & 0o111
        assert (pause.uid, pause.gid) == (0, 0)
        assert layer.extractfile(pause).read(4) == b"\x7fELF"  # type: ignore[union-attr]
    with layer_of(archives["busybox"]) as layer:
        names = set(layer.getnames())
        assert {"bin/busybox", "bin/sh", "bin/ls", "etc/passwd", "etc/group", "tmp"} <= names
        assert layer.getmember("bin/sh").linkname == "/bin/busybox"
        passwd = layer.extractfile("etc/passwd").read().decode()  # type: ignore[union-attr]
        group = layer.extractfile("etc/group").read().decode()  # type: ignore[union-attr]
        assert "nobody:x:65534:65534:" in passwd
        assert "nobody:x:65534:" in group
        assert all(member.uid == 0 for member in layer.getmembers())

    built = {name: archive.stat().st_mtime_ns for name, archive in archives.items()}
    started = time.monotonic()
    assert images.build(["pause", "busybox"]) == archives
    assert time.monotonic() - started < 5
    assert {name: archive.stat().st_mtime_ns for name, archive in archives.items()} == built


def test_the_command_line_prints_one_archive_per_image(private_cache: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(IMAGES_PY), "build", "busybox", "pause"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    paths = [Path(line) for line in done.stdout.splitlines()]
    assert [path.name.split("-")[0] for path in paths] == ["busybox", "pause"]
    assert all(path.is_file() for path in paths)

    listed = subprocess.run(
        [sys.executable, str(IMAGES_PY), "--list"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in listed}
    assert rows["pause"] == ["localhost/sundial/pause:3.10", str(paths[1])]
    assert rows["busybox"] == ["localhost/sundial/busybox:1.35", str(paths[0])]
    assert rows["example-service"][0] == "localhost/sundial/example-service:dev"


def test_an_unknown_image_is_refused_naming_the_known_ones(private_cache: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(IMAGES_PY), "build", "nope"], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "unknown image(s) nope; known: pause, busybox, python-base" in done.stderr
    assert done.stdout == ""


@pytest.mark.skipif(
    os.environ.get("SUNDIAL_SLOW_IMAGE_TESTS") != "1",
    reason="builds with buildah FROM python-base (80 s cold); set SUNDIAL_SLOW_IMAGE_TESTS=1",
)
def test_the_example_service_image_runs_the_job_cron_job_names(tmp_path: Path) -> None:
    """Uses the real cache (python-base is kept there); rebuilds only example-service."""
    var_lib_containers = Path("/var/lib/containers").exists()
    network_before = network_state()
    archive = images.ensure("example-service", rebuild=True)
    assert network_state() == network_before
    assert Path("/var/lib/containers").exists() == var_lib_containers

    storage = tmp_path / "buildah"
    buildah = buildah_command(storage)
    env = {**os.environ, "TMPDIR": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*buildah, *args], capture_output=True, text=True, env=env)

    try:
        assert run("pull", "--quiet", f"docker-archive:{archive}").returncode == 0
        container = run("from", "--pull-never", images.IMAGES["example-service"].reference)
        name = container.stdout.strip()
        inspected = json.loads(run("inspect", name).stdout)
        entrypoint = inspected["OCIv1"]["config"]["Entrypoint"]
        assert entrypoint == ["python3", "-m", "service"]
        outcomes = {}
        for job in ("hello", "fail", "nope"):
            done = run(
                "run", "--isolation=oci", "--network=none",
                f"--runtime-flag=root={storage / 'runc'}",
                "--env=MODE=cron", f"--env=CRON_JOB={job}", name, "--", *entrypoint,
            )  # fmt: skip
            outcomes[job] = (done.returncode, done.stdout)
        assert outcomes["hello"][0] == 0
        assert "hello job ran" in outcomes["hello"][1]
        assert outcomes["fail"][0] == 1
        assert outcomes["nope"][0] == 2
    finally:
        shutil.rmtree(storage, ignore_errors=True)
