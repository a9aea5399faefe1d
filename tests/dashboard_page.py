"""The dashboard as a test uses it: `kubectl-sundial dashboard` started as a user starts it,
and what a page in tests/cdp.py's Browser draws (its rows, a cell's hover words). Shared by
the browser tests on a written history (test_dashboard.py) and on the real node's
(test_missed_runs_kubernetes.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cdp import Browser
from support import eventually, free_port


@contextmanager
def dashboard(kubeconfig: Path, log: Path, *args: str) -> Iterator[str]:
    """`kubectl-sundial dashboard` as a user starts it; its URL once it answers."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "sundial.plugin", "--kubeconfig", str(kubeconfig),
             "dashboard", "--port", str(port), *args],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        eventually(lambda: _answers(url, process), timeout=30, what="the dashboard answers")
        yield url
    finally:
        process.terminate()
        process.wait(10)
    assert "Traceback" not in log.read_text(), log.read_text()


def _answers(url: str, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, f"the dashboard exited {process.returncode}"
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


def rows(browser: Browser) -> dict[str, dict[str, Any]]:
    """The rows drawn: per name, its state, its cells' kinds, its marks, its next runs."""
    found: dict[str, dict[str, Any]] = browser.evaluate("""(() => {
        const out = {};
        for (const row of document.querySelectorAll('#rows .row')) {
          out[row.querySelector('.n').textContent] = {
            key: row.dataset.key, state: row.dataset.state,
            cells: [...row.querySelectorAll('.cell')].map((c) => c.dataset.kind),
            marks: [...row.querySelectorAll('.mark')].map((m) => m.dataset.mark),
            next: row.querySelectorAll('.next').length,
          };
        }
        return out;
    })()""")
    return found


def tip(browser: Browser, selector: str, waiting_for: str) -> str:
    browser.hover(selector)
    text: str = browser.wait_for(
        f"(() => {{ const t = document.getElementById('tip'); return !t.hidden && "
        f"t.textContent.includes({json.dumps(waiting_for)}) && t.textContent; }})()"
    )
    return text


def keep(shot: Path) -> None:
    target = os.environ.get("SUNDIAL_DASHBOARD_IMAGES")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(target) / shot.name)
