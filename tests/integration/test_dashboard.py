"""`kubectl sundial dashboard` in a real browser (Debian's headless Chromium, tests/cdp.py)
against the stack's real API server, with the plugin run as a user runs it.

A known history: ScheduledJobs no operator serves, their status written by the test as the
operator writes it (tests/dashboard_history.py): the rows and cells the page must show for
it, the hover's words, live changes with no reload, the detail view with its duration
trend, no console error. A real run: a temporal ScheduledJob the operator serves, whose
runs the tests' own Temporal worker runs (no node needed), showing up on an open page.
And a user with rights in one namespace sees that namespace only; a user with none is told.

Screenshots of the list and the detail view are kept in the stack's log directory
(`dashboard-*.png`); with SUNDIAL_DASHBOARD_IMAGES=docs/images they are copied there for
the README.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cdp import Browser
from dashboard_history import (
    EXPECTED_CELLS,
    EXPECTED_STATES,
    HISTORY,
    iso,
    nightly_status,
    scheduledjob,
    write_history,
    write_status,
)
from dashboard_page import dashboard, keep, rows, tip
from localstack import LocalStack
from localstack.pki import write_kubeconfig
from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    eventually,
    fresh_namespace,
    temporal_scheduledjob,
)

pytestmark = pytest.mark.cluster

VIEWER = "sundial-dashboard-viewer"
NOBODY = "sundial-dashboard-nobody"


@pytest.mark.timeout(420)
def test_the_page_shows_the_history_live_with_hover_details_and_no_errors(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide,
    namespace: str, tmp_path: Path,
) -> None:  # fmt: skip
    now = datetime.now(UTC)
    write_history(kubectl, namespace, now)
    temporal.ensure_worker()
    kubectl.apply(temporal_scheduledjob("live", namespace, interval={"every": "20s"}))
    shots = stack.log_dir
    with (
        dashboard(stack.kubeconfig, stack.log_dir / "dashboard.log") as url,
        Browser.start(tmp_path) as browser,
    ):
        browser.goto(f"{url}?ns={namespace}")
        browser.wait_for("document.documentElement.dataset.synced === '1'")
        browser.wait_for(f"window.sundial.rows.size === {len(HISTORY) + 1}")
        keys = set(browser.evaluate("[...window.sundial.rows.keys()]"))
        assert keys == {f"{namespace}/{name}" for name in [*HISTORY, "live"]}
        drawn = rows(browser)
        for name, cells in EXPECTED_CELLS.items():
            assert drawn[name]["cells"] == cells, (name, drawn[name])
            assert drawn[name]["state"] == EXPECTED_STATES[name], (name, drawn[name])
        assert drawn["cleanup"]["marks"] == ["suspended (db migration, ask #data)"]
        assert drawn["cleanup"]["next"] == 0, "a suspended object shows no next runs"
        assert drawn["nightly"]["next"] == 3
        assert drawn["nightly"]["marks"] == []
        # The range the user chooses: 6 hours leaves out nightly's oldest slot (6 hours
        # before the top of this hour); the choice is kept in the page's address.
        choose_range = (
            "(() => {{ const r = document.getElementById('f-range'); "
            "r.value = '{}'; r.dispatchEvent(new Event('change')); }})()"
        )
        browser.evaluate(choose_range.format(21600))
        eventually(lambda: rows(browser)["nightly"]["cells"] == EXPECTED_CELLS["nightly"][1:],
                   timeout=20, what="the 6-hour range drawn")  # fmt: skip
        assert "range=21600" in browser.evaluate("location.search")
        browser.evaluate(choose_range.format(86400))
        eventually(lambda: rows(browser)["nightly"]["cells"] == EXPECTED_CELLS["nightly"],
                   timeout=20, what="the 24-hour range drawn again")  # fmt: skip
        # The scope and the filters' choices come from the server.
        assert "every namespace" in browser.evaluate("document.getElementById('scope').textContent")
        assert browser.evaluate("document.getElementById('problems').hidden") is True

        # Hover: the run's words, fetched from the object's detail.
        nightly = f'.row[data-key="{namespace}/nightly"]'
        said = tip(browser, f'{nightly} .cell[data-kind="failed"]', "BackoffLimitExceeded")
        words_of_the_run = (
            "scheduled",
            "started",
            "duration48s",
            "resultFailed",
            "loaded 0 of 1200 rows: connection refused",
            "Jobnightly-28999760",
        )
        for words in words_of_the_run:
            assert words in said, said
        said = tip(browser, f'{nightly} .cell[data-kind="missed"]', "ControllerDown")
        assert "missed" in said
        said = tip(browser, f'{nightly} .cell[data-kind="running"]', "RunNow/rerun-after-fix")
        assert "running for" in said
        reports = f'.row[data-key="{namespace}/reports"]'
        said = tip(browser, f'{reports} .cell[data-kind="timedout"]', "MaxRunDurationExceeded")
        assert "workflowreports-wf-3" in said
        said = tip(browser, f'.row[data-key="{namespace}/cleanup"] .mark', "db migration")
        browser.hover("h1")

        # Live: the running run ends, and the suspended object is resumed; no reload.
        loaded = browser.evaluate("window.sundial.loadedAt")
        ended = nightly_status(now, namespace)
        ended["recentRuns"][0].update(result="Succeeded", durationSeconds=200.0,
                                      completionTime=iso(datetime.now(UTC)))  # fmt: skip
        ended.update(lastResult="Succeeded", active=0)
        write_status(kubectl, namespace, "nightly", ended)
        resume = {"spec": {"suspend": False, "suspendNote": None}}
        kubectl.run("patch", "scheduledjob", "cleanup", "-n", namespace, "--type=merge",
                    "-p", json.dumps(resume))  # fmt: skip
        eventually(lambda: rows(browser)["nightly"]["cells"][-1] == "succeeded",
                   timeout=20, what="the ended run on the page")  # fmt: skip
        eventually(lambda: rows(browser)["cleanup"]["marks"] == [], timeout=20,
                   what="the suspension mark gone")  # fmt: skip
        assert rows(browser)["cleanup"]["state"] == "ok"
        assert browser.evaluate("window.sundial.loadedAt") == loaded, "the page was reloaded"

        # A real run, by the operator and the tests' Temporal worker, arrives on the page.
        eventually(lambda: "succeeded" in rows(browser).get("live", {}).get("cells", []),
                   timeout=120, what="the real run on the page")  # fmt: skip
        # Suspended again, with its note: the mark is back (and in the picture).
        suspend = {"spec": {"suspend": True, "suspendNote": "db migration, ask #data"}}
        kubectl.run("patch", "scheduledjob", "cleanup", "-n", namespace, "--type=merge",
                    "-p", json.dumps(suspend))  # fmt: skip
        eventually(lambda: rows(browser)["cleanup"]["marks"] != [], timeout=20,
                   what="the suspension mark back")  # fmt: skip
        tip(browser, f'{nightly} .cell[data-kind="failed"]', "BackoffLimitExceeded")
        keep(browser.screenshot(shots / "dashboard-list.png"))

        # The filters (the server's): state, name, labels.
        filtered = (
            ("state=failing", {"reports"}),
            ("q=NIGHT", {"nightly"}),
            ("label=team%3Dweb", {"reports"}),
            ("backend=temporal", {"reports", "live"}),
        )
        for query, names in filtered:
            browser.goto(f"{url}?ns={namespace}&{query}")
            browser.wait_for("document.documentElement.dataset.synced === '1'")
            assert set(rows(browser)) == names, query

        # The detail view: every run's duration against maxRunDuration.
        browser.goto(f"{url}?ns={namespace}")
        browser.wait_for("document.documentElement.dataset.synced === '1'")
        browser.wait_for(f"document.querySelector('{nightly} .name') !== null")
        browser.click(f"{nightly} .name")
        browser.wait_for(f"document.documentElement.dataset.detail === '{namespace}/nightly'")
        bars = browser.evaluate("document.querySelectorAll('#d-body svg.trend rect.bar').length")
        assert bars == 5, "one bar per run that started"
        limit = browser.evaluate("document.querySelector('#d-body svg.trend line.limit') !== null")
        assert limit, "the maxRunDuration line"
        text = browser.evaluate("document.getElementById('d-body').textContent")
        assert f"CronJob {namespace}/nightly" in text
        assert "OverlapSkipped" in text
        assert "ControllerDown" in text
        keep(browser.screenshot(shots / "dashboard-detail.png"))
        assert browser.errors() == []


def viewer_rights(namespace: str) -> list[dict[str, Any]]:
    """VIEWER: may list namespaces (cluster-wide) and read ScheduledJobs in `namespace`."""
    rbac = "rbac.authorization.k8s.io"
    subject = [{"apiGroup": rbac, "kind": "User", "name": VIEWER}]
    return [
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": VIEWER},
         "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": VIEWER},
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": VIEWER}, "subjects": subject},
        {"apiVersion": f"{rbac}/v1", "kind": "Role",
         "metadata": {"name": VIEWER, "namespace": namespace},
         "rules": [{"apiGroups": ["sundial.dev"], "resources": ["scheduledjobs"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
         "metadata": {"name": VIEWER, "namespace": namespace},
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": VIEWER}, "subjects": subject},
    ]  # fmt: skip


def user_kubeconfig(stack: LocalStack, user: str) -> Path:
    path = stack.state_dir / "faults" / f"{user}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_kubeconfig(path, stack.pki, stack.apiserver_url, stack.pki.client(user, user))
    return path


@pytest.mark.timeout(300)
def test_a_user_with_rights_in_one_namespace_sees_only_that_namespace(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, tmp_path: Path
) -> None:
    with fresh_namespace(kubectl, f"{namespace[:50]}-other") as other:
        for where in (namespace, other):
            for name in ("alpha", "beta"):
                kubectl.apply(scheduledjob(name, where))
        for document in viewer_rights(namespace):
            kubectl.apply(document)
        try:
            with (
                dashboard(user_kubeconfig(stack, VIEWER), stack.log_dir / "dashboard-viewer.log")
                as url,
                Browser.start(tmp_path) as browser,
            ):  # fmt: skip
                browser.goto(url)
                browser.wait_for("document.documentElement.dataset.synced === '1'")
                keys = set(browser.evaluate("[...window.sundial.rows.keys()]"))
                assert keys == {f"{namespace}/alpha", f"{namespace}/beta"}
                options = browser.evaluate(
                    "[...document.querySelectorAll('#f-ns option')].map((o) => o.value)"
                )
                assert options == ["", namespace]
                scope = browser.evaluate("document.getElementById('scope').textContent")
                assert namespace in scope
                assert other not in scope
                assert browser.evaluate("document.getElementById('problems').hidden") is True
                assert _status(f"{url}api/object/{other}/alpha") == 404
                assert _status(f"{url}api/object/{namespace}/alpha") == 200
                assert browser.errors() == []
        finally:
            for document in viewer_rights(namespace)[:2]:
                kubectl.run("delete", document["kind"].lower(), VIEWER, "--ignore-not-found")

    # No rights at all: the page says so, and what to ask for.
    with (
        dashboard(user_kubeconfig(stack, NOBODY), stack.log_dir / "dashboard-nobody.log") as url,
        Browser.start(tmp_path / "nobody") as browser,
    ):
        browser.goto(url)
        said = browser.wait_for(
            "!document.getElementById('problems').hidden && "
            "document.getElementById('problems').textContent"
        )
        assert "You may not read ScheduledJobs" in said, said
        assert "get, list and watch on scheduledjobs.sundial.dev" in said
        assert browser.evaluate("window.sundial.rows.size") == 0
        assert browser.errors() == []


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
