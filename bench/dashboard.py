"""`kubectl sundial dashboard` at scale, on a fresh local stack (never a timed test).

    .venv/bin/python bench/dashboard.py                   # 5,000 ScheduledJobs
    .venv/bin/python bench/dashboard.py --size 1000 --updates 200

N ScheduledJobs in 10 namespaces, each with a status as the operator writes it (20 recent
runs of mixed results, two missed slots, three next runs; no operator serves them), then
the plugin's dashboard (the admin kubeconfig) and headless Chromium (tests/cdp.py):

1. the dashboard's start: the plugin started until the first page has every row (listing
   and watching the N objects, their rows computed, the snapshot sent and drawn);
2. page load with the server running: navigation to every row in the page's memory and
   the visible ones drawn (the page's own `sundial-synced` mark), median of --loads;
3. memory: the page's JavaScript heap and DOM nodes after the load, after --updates
   status changes streamed to it, and after scrolling the whole list; the browser's
   processes' RSS; the dashboard process's RSS;
4. the filters: a name search answered (a new stream) until drawn.

Results: printed, and in .stack-bench/dashboard.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests"), str(REPO / "bench")]
os.environ.setdefault("SUNDIAL_TEMPORAL_TLS", "0")  # no Temporal is asked here

from kubernetes import client, config  # noqa: E402

from cdp import Browser  # noqa: E402
from dashboard_history import iso, run, scheduledjob  # noqa: E402
from localstack import LocalStack, Ports  # noqa: E402
from support import CRD_DIR, CRD_NAMES, Kubectl, free_port  # noqa: E402

NAMESPACES = 10
RESULTS = ("Succeeded",) * 8 + ("Failed", "TimedOut")


def status(index: int, now: datetime, runs: int) -> dict[str, Any]:
    slots = [now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=h)
             for h in range(runs + 3)]  # fmt: skip
    recent = [run(slots[h + 1], RESULTS[(index + h) % len(RESULTS)], 30.0 + (index + h) % 300,
                  name=f"job-{index}-{h}", reason=None if h % 10 else "BackoffLimitExceeded",
                  message="exit code 1" if h % 10 == 0 else None) for h in range(runs)]  # fmt: skip
    return {
        "backend": "kubernetes", "recentRuns": recent, "lastResult": recent[0]["result"],
        "recentMissedRuns": [{"scheduledTime": iso(slots[runs + 1]), "reason": "ControllerDown"},
                             {"scheduledTime": iso(slots[runs + 2]), "reason": "OverlapSkipped"}],
        "missedRuns": 1, "skippedRuns": 1,
        "nextRunTimes": [iso(slots[0] + timedelta(hours=h)) for h in (1, 2, 3)],
        "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled", "message": "",
                        "lastTransitionTime": iso(slots[-1])}],
    }  # fmt: skip


def fill(api: client.CustomObjectsApi, size: int, runs: int) -> float:
    now = datetime.now(UTC)

    def one(index: int) -> None:
        namespace, name = f"bench-{index % NAMESPACES}", f"job-{index:05d}"
        body = scheduledjob(name, namespace, labels={"team": f"t{index % 7}"})
        api.create_namespaced_custom_object("sundial.dev", "v1alpha1", namespace,
                                            "scheduledjobs", body)  # fmt: skip
        api.patch_namespaced_custom_object_status(
            "sundial.dev", "v1alpha1", namespace, "scheduledjobs", name,
            {"status": status(index, now, runs)},
        )  # fmt: skip

    began = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(size)))
    return time.monotonic() - began


def rss(pid: int) -> float:
    """MiB resident, of the process and its descendants."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(child) for child in children)
    return total / 1024


def loaded(browser: Browser, url: str) -> float:
    """Seconds from navigation to every row in the page and the visible ones drawn."""
    browser.goto(url)
    browser.wait_for("document.documentElement.dataset.synced === '1'", timeout=120)
    mark: float = browser.evaluate("performance.getEntriesByName('sundial-synced')[0].startTime")
    return mark / 1000


def heap(browser: Browser) -> dict[str, float]:
    browser.evaluate("new Promise((done) => setTimeout(done, 200))")
    metrics = browser.heap()
    return {"js_heap_mib": round(metrics["JSHeapUsedSize"] / 2**20, 1),
            "dom_nodes": metrics["Nodes"]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=20, help="recent runs per object")
    parser.add_argument("--updates", type=int, default=1000, help="status changes streamed")
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    state = REPO / ".stack-bench"
    state.mkdir(exist_ok=True)
    ports = Ports(etcd=free_port(1), apiserver=free_port(1), kcm=free_port(1),
                  temporal=free_port(4))  # fmt: skip
    result: dict[str, Any] = {"size": args.size, "runs_per_object": args.runs}
    with LocalStack(state, ports, node=False) as stack:
        kubectl = Kubectl(stack.kubectl, stack.kubeconfig)
        kubectl.run("apply", "--server-side", "-f", str(CRD_DIR))
        kubectl.run("wait", "--for=condition=Established", *CRD_NAMES)
        for n in range(NAMESPACES):
            kubectl.run("create", "namespace", f"bench-{n}")
        api = client.CustomObjectsApi(config.new_client_from_config(str(stack.kubeconfig)))
        result["fill_seconds"] = round(fill(api, args.size, args.runs), 1)
        print(f"{args.size} ScheduledJobs with status in {result['fill_seconds']}s", flush=True)
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        log = (stack.log_dir / "dashboard-bench.log").open("ab")
        began = time.monotonic()
        plugin = subprocess.Popen(
            [sys.executable, "-m", "sundial.plugin", "--kubeconfig", str(stack.kubeconfig),
             "dashboard", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            with Browser.start(state / "browser") as browser:
                while True:
                    try:
                        urllib.request.urlopen(url, timeout=1).close()
                        break
                    except OSError:
                        time.sleep(0.05)
                loaded(browser, url)
                result["start_to_first_page_seconds"] = round(time.monotonic() - began, 2)
                rows = browser.evaluate("window.sundial.rows.size")
                assert rows == args.size, rows
                loads = [loaded(browser, url) for _ in range(args.loads)]
                result["page_load_seconds"] = {
                    "median": round(statistics.median(loads), 3), "max": round(max(loads), 3),
                    "each": [round(x, 3) for x in loads],
                }  # fmt: skip
                result["after_load"] = heap(browser)
                result["browser_rss_mib_after_load"] = round(rss(browser.process.pid), 1)
                # Status changes streamed to the open page (no reload).
                now = datetime.now(UTC)
                events = browser.evaluate("window.sundial.events")

                def change(index: int) -> tuple[str, str]:
                    namespace, name = f"bench-{index % NAMESPACES}", f"job-{index:05d}"
                    written = api.patch_namespaced_custom_object_status(
                        "sundial.dev", "v1alpha1", namespace, "scheduledjobs", name,
                        {"status": status(index + 1, now, args.runs)},
                    )  # fmt: skip
                    return f"{namespace}/{name}", str(written["metadata"]["resourceVersion"])

                began = time.monotonic()
                with ThreadPoolExecutor(8) as pool:
                    written = dict(pool.map(change, range(args.updates)))
                browser.wait_for(
                    f"Object.entries({json.dumps(written)}).every(([key, rv]) => "
                    "window.sundial.rows.get(key).rv === rv)", timeout=120,
                )  # fmt: skip
                result["updates"] = {
                    "count": args.updates,
                    "seconds_until_all_shown": round(time.monotonic() - began, 2),
                    "stream_events": browser.evaluate("window.sundial.events") - events,
                }
                result["after_updates"] = heap(browser)
                # Scroll the whole list, a screen at a time: only the rows in view are drawn.
                began = time.monotonic()
                browser.evaluate("""(async () => {
                    const v = document.getElementById('viewport');
                    while (v.scrollTop + v.clientHeight < v.scrollHeight) {
                      v.scrollTop += v.clientHeight;
                      await new Promise((done) => requestAnimationFrame(done));
                    }
                })()""")
                result["scroll_all_seconds"] = round(time.monotonic() - began, 2)
                result["after_scrolling"] = heap(browser)
                # A name search: a new stream, answered by the server, drawn.
                began = time.monotonic()
                loaded(browser, url + "?q=job-0421")
                result["search_seconds"] = round(time.monotonic() - began, 3)
                result["search_rows"] = browser.evaluate("window.sundial.rows.size")
                result["browser_rss_mib_end"] = round(rss(browser.process.pid), 1)
                result["dashboard_rss_mib"] = round(rss(plugin.pid), 1)
                result["console_errors"] = browser.errors()
        finally:
            plugin.terminate()
            plugin.wait(10)
            log.close()
    (state / "dashboard.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
