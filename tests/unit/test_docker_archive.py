"""The docker-save archive writer: the layout containerd and buildah import."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from docker_archive import ImageConfig, write_docker_archive

REFERENCE = "localhost/sundial/tiny:1"
# The tree's files belong to a user other than root (as root, the test hands them to one).
OWNER = 12345 if os.getuid() == 0 else os.getuid()


def tiny_rootfs(root: Path) -> Path:
    rootfs = root / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin" / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (rootfs / "bin" / "tool").chmod(0o755)
    (rootfs / "bin" / "alias").symlink_to("/bin/tool")
    os.link(rootfs / "bin" / "tool", rootfs / "bin" / "hardlink")
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    if os.getuid() == 0:
        for path in [rootfs, *rootfs.rglob("*")]:
            os.lchown(path, OWNER, OWNER)
    return rootfs


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            member.name: tar.extractfile(member).read()  # type: ignore[union-attr]
            for member in tar.getmembers()
            if member.isfile()
        }


def test_archive_has_manifest_config_and_one_layer_named_by_their_digests(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "tiny.tar"
    config = ImageConfig(entrypoint=("/bin/tool",), user="65534:65534")
    image_id = write_docker_archive(tiny_rootfs(tmp_path), REFERENCE, config, archive)

    files = members(archive)
    (manifest,) = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == [REFERENCE]
    assert manifest["Config"] == f"{image_id}.json"
    assert hashlib.sha256(files[manifest["Config"]]).hexdigest() == image_id
    (layer_name,) = manifest["Layers"]
    layer = files[layer_name]
    image_config = json.loads(files[manifest["Config"]])
    assert image_config["rootfs"] == {
        "type": "layers",
        "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"],
    }
    assert layer_name == f"{hashlib.sha256(layer).hexdigest()}/layer.tar"
    assert image_config["os"] == "linux"
    assert image_config["architecture"] in {"amd64", "arm64"}
    assert image_config["config"]["Entrypoint"] == ["/bin/tool"]
    assert image_config["config"]["User"] == "65534:65534"
    assert image_config["config"]["Env"][0].startswith("PATH=")


def test_layer_holds_the_tree_owned_by_root_with_links_kept(tmp_path: Path) -> None:
    archive = tmp_path / "tiny.tar"
    write_docker_archive(tiny_rootfs(tmp_path), REFERENCE, ImageConfig(), archive)
    (layer_name,) = json.loads(members(archive)["manifest.json"])[0]["Layers"]

    with tarfile.open(fileobj=io.BytesIO(members(archive)[layer_name])) as layer:
        entries = {member.name: member for member in layer.getmembers()}
        assert list(entries) == [
            "bin",
            "bin/alias",
            "bin/hardlink",
            "bin/tool",
            "etc",
            "etc/passwd",
        ]  # no "." entry; parents before children, in name order
        assert all(m.uid == 0 and m.gid == 0 and m.uname == "root" for m in entries.values())
        assert all(m.mtime == 0 for m in entries.values())
        assert entries["bin/alias"].issym()
        assert entries["bin/alias"].linkname == "/bin/tool"
        # One copy of the bytes: the first name in order holds them, the second links to it.
        assert entries["bin/hardlink"].isreg()
        assert entries["bin/tool"].islnk()
        assert entries["bin/tool"].linkname == "bin/hardlink"
        assert entries["bin/hardlink"].mode & 0o777 == 0o755
        content = layer.extractfile("bin/hardlink").read()  # type: ignore[union-attr]
        assert content == b"#!/bin/sh\necho tool\n"


def test_same_tree_gives_the_same_image_id(tmp_path: Path) -> None:
    rootfs = tiny_rootfs(tmp_path)
    first = write_docker_archive(rootfs, REFERENCE, ImageConfig(), tmp_path / "a.tar")
    (rootfs / "etc" / "passwd").touch()  # a new mtime alone changes nothing
    second = write_docker_archive(rootfs, REFERENCE, ImageConfig(), tmp_path / "b.tar")
    assert first == second
    (rootfs / "etc" / "group").write_text("root:x:0:\n")
    assert write_docker_archive(rootfs, REFERENCE, ImageConfig(), tmp_path / "c.tar") != first


def test_owners_on_disk_are_kept_when_asked(tmp_path: Path) -> None:
    rootfs = tiny_rootfs(tmp_path)
    archive = tmp_path / "tiny.tar"
    write_docker_archive(rootfs, REFERENCE, ImageConfig(), archive, root_owned=False, mtime=None)
    (layer_name,) = json.loads(members(archive)["manifest.json"])[0]["Layers"]
    with tarfile.open(fileobj=io.BytesIO(members(archive)[layer_name])) as layer:
        passwd = layer.getmember("etc/passwd")
    assert passwd.uid == OWNER
    assert passwd.mtime == int((rootfs / "etc" / "passwd").stat().st_mtime)
