"""A headless Chromium (Debian's chromium-headless-shell, from
`hack/install-node-packages.sh browser`) driven over the Chrome DevTools Protocol: enough to
load a page, read it, hover and click, and collect every console error, uncaught exception
and failed load the page had.

    with Browser.start(tmp_path) as browser:
        browser.goto("http://127.0.0.1:8080/")
        browser.wait_for("document.documentElement.dataset.synced === '1'")
        assert browser.errors() == []
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import websocket  # websocket-client, which the kubernetes client depends on

BINARIES = ("chromium-headless-shell", "chromium", "chromium-browser")


def find_chromium() -> str:
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(
        "no headless Chromium on PATH: `hack/install-node-packages.sh browser` installs "
        "chromium-headless-shell (make test runs it)"
    )


class Browser:
    def __init__(self, process: subprocess.Popen[bytes], ws: websocket.WebSocket) -> None:
        self.process = process
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    @classmethod
    @contextmanager
    def start(cls, workdir: Path, width: int = 1400, height: int = 900) -> Iterator[Browser]:
        profile = workdir / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        log = (workdir / "chromium.log").open("ab")
        process = subprocess.Popen(
            [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--disable-extensions", "--disable-background-networking",
             "--disable-component-update", "--remote-debugging-port=0",
             "--remote-allow-origins=*",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=log, stderr=log,
            # Its own process group: Debian's chromium-headless-shell is a shell script
            # that runs the browser as its child, and a terminate of the script alone
            # left the browser (and its helpers) running after every test.
            start_new_session=True,
        )  # fmt: skip
        try:
            port = _devtools_port(profile / "DevToolsActivePort", process)
            pages = _json(f"http://127.0.0.1:{port}/json/list")
            page = next(p for p in pages if p["type"] == "page")
            ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
            browser = cls(process, ws)
            for domain in ("Page", "Runtime", "Log", "Network", "Performance"):
                browser.call(f"{domain}.enable")
            browser.call("Emulation.setDeviceMetricsOverride",
                         width=width, height=height, deviceScaleFactor=1, mobile=False)  # fmt: skip
            yield browser
        finally:
            _stop_group(process)
            log.close()

    # ---- the protocol ----------------------------------------------------------------------

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        asked = self.next_id
        self.ws.send(json.dumps({"id": asked, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == asked:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def pump(self, seconds: float) -> None:
        """Take the events that arrive within `seconds` (the page's console, its loads)."""
        self.ws.settimeout(seconds)
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                try:
                    message = json.loads(self.ws.recv())
                except websocket.WebSocketTimeoutException:
                    break
                if "method" in message:
                    self.events.append(message)
        finally:
            self.ws.settimeout(30)

    # ---- what a test does ------------------------------------------------------------------

    def goto(self, url: str, timeout: float = 30.0) -> None:
        """Navigate, and return once the new page has loaded (its load event)."""
        before = len(self.events)
        self.call("Page.navigate", url=url)
        end = time.monotonic() + timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self.events[before:]):
            if time.monotonic() > end:
                raise AssertionError(f"{url} did not load within {timeout:g}s")
            self.pump(0.1)

    def evaluate(self, expression: str) -> Any:
        answer = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)  # fmt: skip
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """The expression's value once truthy; fails after `timeout` seconds."""
        end = time.monotonic() + timeout
        value: Any = None
        while time.monotonic() < end:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            self.pump(0.1)
        raise AssertionError(f"not true within {timeout:g}s: {expression} (last: {value!r})")

    def center(self, selector: str) -> tuple[float, float]:
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
            ".getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        return float(box[0]), float(box[1])

    def hover(self, selector: str) -> None:
        x, y = self.center(selector)
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def click(self, selector: str) -> None:
        x, y = self.center(selector)
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                      clickCount=1)  # fmt: skip

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        shot = self.call("Page.captureScreenshot", format="png",
                         captureBeyondViewport=full_page)  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def heap(self) -> dict[str, float]:
        """The page's JavaScript heap and DOM node count (Performance.getMetrics)."""
        metrics = self.call("Performance.getMetrics")["metrics"]
        return {m["name"]: float(m["value"]) for m in metrics}

    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, failed loads (a 404, a
        refused connection), as they were reported."""
        self.pump(0.2)
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in (
                "error",
                "warning",
                "assert",
            ):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in
                                params.get("args", []))  # fmt: skip
                found.append(f"console.{params['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                thrown = details.get("exception", {}).get("description") or details.get("text")
                found.append(f"exception: {thrown}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                entry = params["entry"]
                found.append(f"log {entry['level']}: {entry['text']} {entry.get('url', '')}")
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                found.append(f"load failed: {params.get('errorText')}")
        return found

    def console(self) -> list[str]:
        return [" ".join(str(a.get("value", "")) for a in e["params"].get("args", []))
                for e in self.events if e["method"] == "Runtime.consoleAPICalled"]  # fmt: skip


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """The browser, its helpers and the script that started them: the whole group, asked
    to go, then killed if it has not within ten seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            process.poll()  # reaps the script: a zombie would still count as the group's
            if not _group_alive(process.pid):
                return
            time.sleep(0.1)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _devtools_port(path: Path, process: subprocess.Popen[bytes]) -> int:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if path.is_file():
            lines = path.read_text().splitlines()
            if lines and lines[0].isdigit():
                return int(lines[0])
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited {process.returncode} before listening")
        time.sleep(0.05)
    raise RuntimeError("chromium did not open its DevTools port within 30s")


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())
