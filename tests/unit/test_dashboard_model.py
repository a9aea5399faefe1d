"""The dashboard's pure parts (dashboard/model.py: rows, cells, states, filters; the Store's
share of rows per page) and its server without a cluster: what it serves, to whom, and what
a page is told when the cluster has no ScheduledJob API. The page itself, in a browser
against the real API server: tests/integration/test_dashboard.py."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from dashboard_history import EXPECTED_CELLS, EXPECTED_STATES, HISTORY, scheduledjob
from sundial.dashboard import model, server
from sundial.dashboard.source import made
from sundial.dashboard.store import Store

NOW = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "operator" / "sundial" / "dashboard" / "static"


def history(name: str, namespace: str = "shop") -> dict[str, Any]:
    backend, build, suspend, note = HISTORY[name]
    obj = scheduledjob(name, namespace, backend=backend, suspend=suspend, note=note,
                       labels={"team": "web" if backend == "temporal" else "data"})  # fmt: skip
    obj["status"] = build(NOW, namespace)
    obj["metadata"]["resourceVersion"] = "1"
    return obj


def test_each_row_has_the_cells_states_and_marks_of_its_history() -> None:
    for name, cells in EXPECTED_CELLS.items():
        row = model.row(history(name))
        assert [cell[0] for cell in row["cells"]] == cells, name
        assert row["state"] == EXPECTED_STATES[name], name
        assert row["key"] == f"shop/{name}"
    nightly = model.row(history("nightly"))
    # Compact cells: kind, glyph (as the terminal draws it), slot, duration, late.
    assert [cell[1] for cell in nightly["cells"]] == ["+", "+", "x", "C", "s", "+", ">"]
    failed = nightly["cells"][2]
    assert failed[2] == (NOW.replace(minute=0) - timedelta(hours=4)).timestamp()
    assert failed[3:] == [48.0, False]
    assert nightly["cells"][5][4] is True, "the late start"
    assert nightly["next"] == [(NOW.replace(minute=0) + timedelta(hours=h)).timestamp()
                               for h in (1, 2, 3)]  # fmt: skip
    assert nightly["marks"] == []
    assert nightly["maxRun"] == 600.0
    since = (NOW.replace(minute=0) - timedelta(hours=1)).timestamp()
    note = "suspended (db migration, ask #data)"
    marks = [{"kind": "suspended", "note": note, "since": since}]
    assert model.row(history("cleanup"))["marks"] == marks


def test_the_detail_has_each_cells_run_or_missed_slot_in_the_rows_order() -> None:
    found = model.detail(history("nightly"))
    assert [c["kind"] for c in found["cells_detail"]] == EXPECTED_CELLS["nightly"]
    failed = found["cells_detail"][2]
    assert failed["result"] == "Failed"
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == "loaded 0 of 1200 rows: connection refused"
    assert failed["job"] == "nightly-28999760"
    assert failed["start"] - failed["scheduled"] == 2.0
    assert found["cells_detail"][3] == {
        "kind": "missed", "glyph": "C", "words": "ControllerDown",
        "scheduled": (NOW.replace(minute=0) - timedelta(hours=3)).timestamp(),
        "reason": "ControllerDown", "approximate": False,
    }  # fmt: skip
    assert found["cells_detail"][-1]["requested"] == "RunNow/rerun-after-fix"
    assert found["backendRef"] == {"kind": "CronJob", "name": "nightly", "namespace": "shop"}
    assert [c["type"] for c in found["conditions"]] == ["Ready", "RunsMissed", "RunsFailing"]
    temporal = model.detail(history("reports"))["cells_detail"]
    assert temporal[-1]["workflowId"] == "reports-wf-3"
    assert temporal[-1]["reason"] == "MaxRunDurationExceeded"


def with_status(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    obj = scheduledjob("x", "shop")
    obj["spec"].update(spec)
    obj["status"] = status
    return obj


def ready(reason: str, status: str = "True") -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": "",
            "lastTransitionTime": "2026-12-04T09:00:00Z"}  # fmt: skip


@pytest.mark.parametrize(
    ("status", "spec", "expected"),
    [
        ({}, {}, "new"),
        ({"conditions": [ready("PausedInTemporal")]}, {}, "paused"),
        ({"conditions": [ready("ConnectionNotAllowed", "False")]}, {}, "paused"),
        ({"conditions": [ready("InvalidSchedule", "False")]}, {}, "notready"),
        ({"lastResult": "Failed", "consecutiveFailures": 1}, {"suspend": True}, "suspended"),
        ({"lastResult": "Failed", "consecutiveFailures": 1,
          "conditions": [ready("InvalidSchedule", "False")]}, {}, "failing"),
        ({"active": 1}, {}, "running"),
        ({"recentMissedRuns": [{"scheduledTime": "2026-12-04T09:00:00Z",
                                "reason": "OverlapSkipped"}]}, {}, "ok"),
    ],
)  # fmt: skip
def test_the_state_is_the_most_pressing(
    status: dict[str, Any], spec: dict[str, Any], expected: str
) -> None:
    assert model.row(with_status(status, **spec))["state"] == expected


def test_a_status_the_model_cannot_read_is_said_not_raised() -> None:
    row = model.row(with_status({"recentRuns": [{"result": "Exploded"}]}))
    assert row["state"] == "notready"
    assert row["cells"] == []
    assert row["error"].startswith("status unreadable: recentRuns.0.")
    assert model.detail(with_status({"recentRuns": "no"}))["cells_detail"] == []


def test_the_filters_match_namespace_labels_backend_state_and_a_part_of_the_name() -> None:
    rows = [model.row(history(name, ns)) for name in HISTORY for ns in ("shop", "bank")]

    def shown(**query: str) -> set[str]:
        wanted = model.Filter.from_query(query)
        return {row["key"] for row in rows if wanted.matches(row)}

    assert len(shown()) == 6
    assert shown(ns="bank") == {"bank/nightly", "bank/reports", "bank/cleanup"}
    assert shown(ns="bank", q="NiGh") == {"bank/nightly"}
    assert shown(label="team=web") == {"shop/reports", "bank/reports"}
    assert shown(label="team!=web,sundial.dev/shard", ns="shop") == {"shop/nightly", "shop/cleanup"}
    assert shown(label="!team") == set()
    assert shown(backend="temporal", ns="shop") == {"shop/reports"}
    assert shown(state="suspended") == {"shop/cleanup", "bank/cleanup"}
    with pytest.raises(model.FilterError, match="set-based"):
        model.Filter.from_query({"label": "team in (a,b)"})
    with pytest.raises(model.FilterError, match="state 'broken'"):
        model.Filter.from_query({"state": "broken"})
    assert model.facets(rows) == {
        "ns": {"bank": 3, "shop": 3},
        "backend": {"kubernetes": 4, "temporal": 2},
        "state": {"failing": 2, "missed": 2, "suspended": 2},
    }


def test_a_page_gets_its_filters_rows_then_only_the_changes_coalesced() -> None:
    async def scenario() -> None:
        store = Store()
        early, _ = store.subscribe(model.Filter())  # a page open before the listing ends
        store.scope(["shop"], False, "")
        assert not store.synced
        store.replace("shop", [made(history(name)) for name in HISTORY])
        assert store.synced
        told = dict(early.drain())
        order = list(told)
        assert order.index("facets") < order.index("synced"), "the choices before synced"
        assert json.loads(told["facets"])["ns"] == {"shop": 3}
        store.unsubscribe(early)
        page, snapshot = store.subscribe(model.Filter.from_query({"state": "missed"}))
        assert [row["key"] for row in json.loads(snapshot)["rows"]] == ["shop/nightly"]
        assert list(page.drain()) == []
        # The same resourceVersion again: nothing to send.
        store.put(*made(history("nightly")))
        assert not page.wake.is_set()
        # Two changes of one object before the page reads: one row, the latest.
        for version, result in (("2", "Succeeded"), ("3", "Failed")):
            obj = history("nightly")
            obj["metadata"]["resourceVersion"] = version
            obj["status"]["lastResult"] = result
            store.put(*made(obj))
        # Another object becomes "missed": it is added; then nightly stops being missed.
        reports = history("reports")
        reports["metadata"]["resourceVersion"] = "4"
        reports["status"]["conditions"] = [
            ready("Reconciled"), {**ready("ControllerDown"), "type": "RunsMissed"}]  # fmt: skip
        reports["status"]["consecutiveFailures"] = 0
        store.put(*made(reports))
        assert page.wake.is_set()
        ((event, data),) = list(page.drain())
        sent = json.loads(data)
        assert event == "rows"
        assert [(r["key"], r["rv"], r["lastResult"]) for r in sent["upsert"]] == [
            ("shop/nightly", "3", "Failed"), ("shop/reports", "4", "TimedOut")]  # fmt: skip
        assert sent["remove"] == []
        store.replace("shop", [made(history("cleanup"))])  # nightly and reports are gone
        store.problem("watch shop", "lost")
        events = dict(page.drain())
        assert json.loads(events["rows"])["remove"] == ["shop/nightly", "shop/reports"]
        assert json.loads(events["problems"]) == [{"name": "watch shop", "message": "lost"}]
        store.unsubscribe(page)
        assert store.subscribers == set()

    asyncio.run(scenario())


# ---- the server -------------------------------------------------------------------------


def test_every_asset_ships_in_the_package_and_nothing_is_fetched_from_elsewhere() -> None:
    """The page works offline: index.html names only assets the server serves, which the
    wheel carries (pyproject's package-data), and no asset names another host."""
    index = (STATIC / "index.html").read_text()
    named = set(re.findall(r'(?:src|href)="/static/([^"]+)"', index))
    assert named == set(server.STATIC), named
    shipped = {path.name for path in STATIC.iterdir()}
    assert shipped == set(server.STATIC) | {"index.html"}
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["sundial.dashboard"]  # fmt: skip
    for name in shipped:
        assert any(fnmatch.fnmatch(f"static/{name}", glob) for glob in globs), name
    for name in shipped:
        text = (STATIC / name).read_text()
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text.replace(
            "http://www.w3.org/2000/svg", "")), name  # fmt: skip


async def _client(store: Store) -> TestClient[web.Request, web.Application]:
    app = server.application(store, lambda: {f"127.0.0.1:{test_server.port}"})
    test_server = TestServer(app, host="127.0.0.1")
    test = TestClient(test_server)
    await test.start_server()
    return test


def test_the_server_serves_its_page_to_the_loopback_host_only() -> None:
    async def scenario() -> None:
        store = Store()
        store.put(*made(history("reports")))
        test = await _client(store)
        try:
            page = await test.get("/")
            assert page.status == 200
            assert "script-src 'self'" in page.headers["Content-Security-Policy"]
            assert (await test.get("/static/app.js")).status == 200
            assert (await test.get("/static/../server.py")).status == 404
            assert (await test.get("/static/model.py")).status == 404
            rebound = await test.get("/", headers={"Host": "evil.example:80"})
            assert rebound.status == 403
            found = await test.get("/api/object/shop/reports")
            assert (await found.json())["cells_detail"][0]["workflowId"] == "reports-wf-1"
            assert (await test.get("/api/object/shop/nope")).status == 404
        finally:
            await test.close()

    asyncio.run(scenario())


async def _events(test: TestClient[web.Request, web.Application], query: str,
                  until: str) -> dict[str, Any]:  # fmt: skip
    """The stream's events (name -> data, the latest of each) until `until` arrives."""
    answer = await test.get(f"/api/stream?{query}")
    assert answer.headers["Content-Type"] == "text/event-stream"
    seen: dict[str, Any] = {}
    event = ""
    async with asyncio.timeout(10):
        async for line in answer.content:
            text = line.decode().rstrip("\n")
            if text.startswith("event: "):
                event = text[7:]
            elif text.startswith("data: "):
                seen[event] = json.loads(text[6:])
                if event == until:
                    break
    answer.close()
    return seen


def test_the_stream_says_hello_sends_the_snapshot_and_a_bad_filter_is_said() -> None:
    async def scenario() -> None:
        store = Store()
        store.scope([], True, "every namespace")
        store.replace(None, [made(history(name)) for name in HISTORY])
        test = await _client(store)
        try:
            seen = await _events(test, "backend=temporal", "snapshot")
            assert seen["hello"]["synced"] is True
            assert seen["hello"]["facets"]["backend"] == {"kubernetes": 2, "temporal": 1}
            assert [row["name"] for row in seen["snapshot"]["rows"]] == ["reports"]
            seen = await _events(test, "label=a+in+(b)", "snapshot")
            assert "set-based" in seen["filter"]["error"]
            assert len(seen["snapshot"]["rows"]) == 3, "a bad filter shows everything, said"
        finally:
            await test.close()

    asyncio.run(scenario())


def test_a_cluster_without_the_crd_is_said_on_the_page() -> None:
    """The API server's 404 for sundial.dev (no CRD) is a problem the page's hello
    carries, in words that say what to install; a 403 says what rights to ask for."""
    from kubernetes.client.exceptions import ApiException

    from sundial.dashboard.source import refusal_problem

    no_crd = ApiException(status=404, reason="Not Found")
    no_crd.body = '{"message": "the server could not find the requested resource"}'
    name, message = refusal_problem(no_crd)
    assert name == "crd"
    assert "no ScheduledJob API" in message
    assert "scheduledjobs.sundial.dev" in message
    refused = ApiException(status=403, reason="Forbidden")
    refused.body = '{"message": "scheduledjobs.sundial.dev is forbidden: User \\"ann\\""}'
    forbidden, words = refusal_problem(refused)
    assert forbidden == "forbidden"
    assert "is forbidden" in words

    async def scenario() -> None:
        store = Store()
        store.problem(name, message)
        test = await _client(store)
        try:
            seen = await _events(test, "", "snapshot")
            (problem,) = seen["hello"]["problems"]
            assert (problem["name"], problem["message"]) == ("crd", message)
            assert seen["snapshot"]["rows"] == []
            assert seen["hello"]["synced"] is False
        finally:
            await test.close()

    asyncio.run(scenario())


def test_the_plugin_has_the_verb() -> None:
    from sundial import plugin

    args = plugin.parser().parse_args(["-n", "shop", "dashboard", "--port", "8765", "--open"])
    assert args.verb is plugin.dashboard
    assert (args.namespace, args.port, args.open) == ("shop", 8765, True)
    assert plugin.parser().parse_args(["dashboard"]).port == 0
