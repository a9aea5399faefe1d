"""The shared timeline's bookkeeping (tests/shared_timeline.py), without servers: which
tests run back to back, and that its start is tried once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, cast

import pytest

from shared_timeline import Servers, SharedTimeline, operator_lines, ordered


def item(name: str, module: Any = None, *, on_it: bool = False) -> SimpleNamespace:
    fixtures = ["stack", "scenario"] if on_it else ["stack", "namespace"]
    return SimpleNamespace(name=name, module=module, fixturenames=fixtures)


def test_the_timelines_tests_run_together_where_the_first_of_them_was() -> None:
    items = [item("a"), item("t1", on_it=True), item("b"), item("c"), item("t2", on_it=True),
             item("t3", on_it=True), item("d")]  # fmt: skip
    ordered(items)
    assert [i.name for i in items] == ["a", "t1", "t2", "t3", "b", "c", "d"]


def test_without_the_timelines_tests_nothing_moves() -> None:
    items = [item("a"), item("b")]
    ordered(items)
    assert [i.name for i in items] == ["a", "b"]


def test_a_start_that_failed_is_not_tried_again() -> None:
    """A module whose shared part fails to start (its worker, say) fails every test on the
    timeline, and is not entered a second time beside what the first start left."""
    entered: list[str] = []

    @contextmanager
    def on_the_timeline(servers: Servers) -> Iterator[dict[str, Any]]:
        entered.append("worker")
        raise RuntimeError("the worker did not start")
        yield {}

    module = ModuleType("test_with_a_worker")
    module.on_the_timeline = on_the_timeline  # type: ignore[attr-defined]
    servers = Servers(*cast(Any, (None, None, None, None)))
    timeline = SharedTimeline(servers, [item("t1", module, on_it=True),
                                        item("t2", module, on_it=True)])  # fmt: skip
    with pytest.raises(RuntimeError, match="did not start"):
        timeline.scenario("t1")
    with pytest.raises(AssertionError, match="the shared timeline did not start"):
        timeline.scenario("t2")
    assert entered == ["worker"]


class RecordingKubectl:
    """Stands in for kubectl where no server is needed: the order of its calls is what
    these tests judge."""

    def __init__(self, said: list[str]) -> None:
        self.said = said

    def run(self, *args: str, check: bool = True) -> None:
        self.said.append(" ".join(args[:3]))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        return {"kind": kind}


def test_namespaces_are_made_before_any_scenario_starts_and_go_after_they_end() -> None:
    """Every namespace first, then every scenario at once (so all pick the same first
    slot); at the close each scenario is joined before its namespace goes, and the
    module's own operator stops last."""
    said: list[str] = []
    started = threading.Event()

    def story(namespace: str) -> None:
        said.append(f"started in {namespace}")
        started.wait(5)
        said.append(f"ended in {namespace}")

    @contextmanager
    def on_the_timeline(servers: Servers) -> Iterator[dict[str, Any]]:
        yield {"test_one": story, "test_two": story}
        said.append("its operator stopped")

    module = ModuleType("test_with_an_operator")
    module.on_the_timeline = on_the_timeline  # type: ignore[attr-defined]
    servers = Servers(*cast(Any, (None, RecordingKubectl(said), None, None)))
    timeline = SharedTimeline(servers, [item("test_one", module, on_it=True),
                                        item("test_two", module, on_it=True)])  # fmt: skip
    timeline.scenario("test_one")
    made = said.index("create namespace t-test-two")
    assert all(said.index(f"started in t-test-{n}") > made for n in ("one", "two")), said
    started.set()
    timeline.done("test_one")
    assert "its operator stopped" not in said, "closed before its last test was done"
    timeline.done("test_two")
    for n in ("one", "two"):
        assert said.index(f"ended in t-test-{n}") < said.index(f"delete namespace t-test-{n}")
    assert said[-1] == "its operator stopped", said


def test_a_failed_scenarios_report_has_what_the_operators_logged_about_its_namespace(
    tmp_path: Path,
) -> None:
    (tmp_path / "operator.log").write_text(
        "2026-12-07 12:51:14,477 DEBUG sundial.reconcile: writing status of t-a/ok\n"
        "2026-12-07 12:51:14,500 DEBUG urllib3.connectionpool: GET .../namespaces/t-a/x\n"
        "2026-12-07 12:51:14,600 DEBUG kopf.objects: Handler 'scheduledjob_event' t-a\n"
        "2026-12-07 12:51:16,000 WARNING sundial.workqueue: reconcile of ('t-a', 'ok') failed\n"
        "2026-12-07 12:51:17,000 INFO sundial.reconcile: t-b/other\n"
    )
    (tmp_path / "operator-own.log").write_text(
        "2026-12-07 12:51:15,000 INFO sundial.backends.temporal.backend: created t-a/mine\n"
    )
    (tmp_path / "kube-apiserver.log").write_text("2026-12-07 12:51:15,500 t-a\n")

    lines = operator_lines(tmp_path, "t-a")
    assert [line.split(" ", 1)[0] for line in lines] == [
        "operator:", "operator-own:", "operator:"]  # fmt: skip
    assert "writing status of t-a/ok" in lines[0]
    assert "created t-a/mine" in lines[1]
    assert operator_lines(tmp_path, "t-a", limit=1) == lines[-1:]
    assert operator_lines(tmp_path, "t-c") == []
