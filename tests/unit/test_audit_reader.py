"""The audit log as the tests read it (support.AuditReader): each line parsed once, the
line being written left for the next read, a file made anew read from its start."""

from __future__ import annotations

import json
from pathlib import Path

from support import AuditReader


def line(n: int) -> bytes:
    return json.dumps({"auditID": str(n)}).encode() + b"\n"


def ids(events: list[dict[str, str]]) -> list[str]:
    return [event["auditID"] for event in events]


def test_appended_events_are_read_once_each_and_a_half_written_line_waits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.log"
    reader = AuditReader()
    assert reader.events(path) == []
    path.write_bytes(line(1) + line(2))
    assert ids(reader.events(path)) == ["1", "2"]
    half = line(3)[:5]
    with path.open("ab") as log:
        log.write(half)
    assert ids(reader.events(path)) == ["1", "2"]
    with path.open("ab") as log:
        log.write(line(3)[5:] + line(4))
    assert ids(reader.events(path)) == ["1", "2", "3", "4"]
    assert ids(reader.events(path)) == ["1", "2", "3", "4"]


def test_a_log_made_anew_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    reader = AuditReader()
    path.write_bytes(line(1) + line(2))
    assert ids(reader.events(path)) == ["1", "2"]
    path.unlink()
    assert reader.events(path) == []
    path.write_bytes(line(7))
    assert ids(reader.events(path)) == ["7"]
    replaced = tmp_path / "new.log"
    replaced.write_bytes(line(8) + line(9))
    replaced.replace(path)  # a new file under the old name, longer than what was read
    assert ids(reader.events(path)) == ["8", "9"]
