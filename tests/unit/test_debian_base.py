"""Where python-base's Debian mirror comes from: the machine's own apt sources."""

from __future__ import annotations

from pathlib import Path

from debian_base import mirror_from_apt_sources

DEB822 = """\
Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_sources_give_the_uri_of_the_suites_stanza(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    assert mirror_from_apt_sources("bookworm", tmp_path) == "http://mirror.example/debian"
    assert mirror_from_apt_sources("bookworm-security", tmp_path) == (
        "http://mirror.example/debian-security"
    )
    assert mirror_from_apt_sources("trixie", tmp_path) is None


def test_one_line_sources_with_options_are_read(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://line.example/debian bookworm main\n"
    )
    assert mirror_from_apt_sources("bookworm", tmp_path) == "http://line.example/debian"


def test_no_sources_gives_none(tmp_path: Path) -> None:
    assert mirror_from_apt_sources("bookworm", tmp_path) is None
