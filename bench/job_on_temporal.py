"""A container job on temporal beside the same job on a CronJob (issue 27), on the real
local stack with its node (never a timed test):

    python bench/job_on_temporal.py --objects 10 --slots 4
    python bench/job_on_temporal.py --objects 10 --slots 5 --mix 980   # 1,000 on temporal

`--objects` ScheduledJobs per backend run busybox `sleep 2` every minute for `--slots`
minute slots: half as CronJobs, half as Temporal Schedules whose runs Sundial's worker
(a real `python -m sundial worker`) makes. `--mix N` adds N more jobs on temporal on a
realistic mix (mix_schedule: most daily, a quarter hourly, a few every 15 minutes, each at
its own minute), all Ready before the window, so that the worker is measured beside a
thousand schedules, with the runs of theirs that fall in the window. Reported, per
backend: each run's start latency (its nominal time to its container's start, as the
kubelet recorded it) as median and worst; for the worker: CPU seconds and RSS over the
window, and its requests to the apiserver per run (its client's request lines in its
DEBUG log); and the requests Temporal's frontend served in the window per run, by
operation (the server's own `service_requests` counter on its metrics page, namespace
`default`: the worker's, the operator's and the scheduler's together). Task-queue polls are
long polls, counted apart: their number follows the time and the pollers, not the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests"), str(REPO / "bench")]

from observe import Process  # noqa: E402

from localstack import LocalStack  # noqa: E402
from support import Kubectl, OperatorProcess, install_sundial, parse_time, scrape  # noqa: E402

NAMESPACE = "bench-jobs"
SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def scheduledjob(name: str, backend: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"backend": backend, "schedule": "* * * * *", "concurrencyPolicy": "Forbid",
                 "successfulRunsHistoryLimit": 10,
                 "job": {"image": image, "command": ["sh", "-c", "sleep 2"],
                         "ttlSecondsAfterFinished": 3600}},
    }  # fmt: skip


def mix_schedule(i: int) -> str:
    """The i-th quiet job's schedule: 70 % daily, 25 % hourly, 5 % every 15 minutes, at a
    minute (and hour) of its own, spread the way teams pick them."""
    minute, hour = (i * 37) % 60, (i * 7) % 24
    kind = i % 20
    if kind == 0:
        return f"{minute % 15}/15 * * * *"
    if kind <= 5:
        return f"{minute} * * * *"
    return f"{minute} {hour} * * *"


def ready_count(kubectl: Kubectl) -> int:
    items = json.loads(kubectl.run("get", "scheduledjobs", "-n", NAMESPACE, "-o", "json").stdout)[
        "items"
    ]
    return sum(
        1
        for item in items
        if any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in item.get("status", {}).get("conditions", []))
    )  # fmt: skip


def latencies(kubectl: Kubectl, since: datetime) -> dict[str, list[float]]:
    """Start latency in seconds per backend, of the runs of slots at or after `since`."""
    jobs = json.loads(kubectl.run("get", "jobs", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    pods = json.loads(kubectl.run("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    started: dict[str, datetime] = {}
    for pod in pods:
        job = pod["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name")
        for status in pod.get("status", {}).get("containerStatuses") or []:
            state = status.get("state") or {}
            moment = (state.get("running") or state.get("terminated") or {}).get("startedAt")
            if job and moment:
                at = parse_time(moment)
                if at is not None:
                    started[job] = min(started.get(job, at), at)
    found: dict[str, list[float]] = {"kubernetes": [], "temporal": []}
    for job in jobs:
        meta = job["metadata"]
        nominal = parse_time(meta.get("annotations", {}).get(SCHEDULED))
        if nominal is None or nominal < since or meta["name"] not in started:
            continue
        backend = "temporal" if "sundial.dev/workflow-id" in meta["annotations"] else "kubernetes"
        found[backend].append((started[meta["name"]] - nominal).total_seconds())
    return found


LONG_POLLS = {"PollWorkflowTaskQueue", "PollActivityTaskQueue", "PollNexusTaskQueue"}


def temporal_requests(stack: LocalStack) -> dict[str, float]:
    """Requests Temporal's frontend has served in namespace `default`, by operation, from
    the server's own counter (ground truth, not Sundial's metrics)."""
    page = scrape(f"http://127.0.0.1:{stack.ports.temporal_metrics}/metrics")
    served: dict[str, float] = {}
    for (name, labels), value in page.items():
        tags = dict(labels)
        if (
            name in ("service_requests", "service_requests_total")
            and tags.get("namespace") == "default"
            and tags.get("service_name", "frontend") == "frontend"
        ):
            operation = tags.get("operation", "?")
            served[operation] = served.get(operation, 0.0) + value
    return served


def per_run(before: dict[str, float], after: dict[str, float], runs: int) -> dict[str, Any]:
    """The requests served between two readings, per run: in all, by operation, and the
    task-queue long polls apart."""
    grown = {op: after.get(op, 0.0) - before.get(op, 0.0) for op in after}
    grown = {op: n for op, n in grown.items() if n > 0}
    polls = sum(n for op, n in grown.items() if op in LONG_POLLS)
    others = {op: n for op, n in grown.items() if op not in LONG_POLLS}
    if not runs:
        return {"runs": 0}
    return {
        "per_run": round(sum(others.values()) / runs, 1),
        "by_operation": {op: round(n / runs, 2) for op, n in sorted(others.items())},
        "long_polls_per_run": round(polls / runs, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10, help="per backend")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--mix", type=int, default=0, help="more jobs on temporal, mixed")
    args = parser.parse_args()
    with LocalStack(node=True) as stack:
        kubectl = Kubectl(stack.kubectl, stack.kubeconfig)
        install_sundial(kubectl, stack.temporal_address)
        kubectl.run("create", "namespace", NAMESPACE)
        operator = OperatorProcess.on(stack, "bench-jobs", log_level="INFO")
        worker = OperatorProcess.on(stack, "bench-worker", args=("worker",))
        operator.start()
        worker.start()
        time.sleep(5)
        assert worker.proc is not None
        process = Process(worker.proc.pid)
        image = stack.images["busybox"]
        documents = [
            scheduledjob(f"{backend[0]}-{i}", backend, image)
            for backend in ("kubernetes", "temporal")
            for i in range(args.objects)
        ]
        for i in range(args.mix):
            quiet = scheduledjob(f"m-{i}", "temporal", image)
            quiet["spec"]["schedule"] = mix_schedule(i)
            documents.append(quiet)
        for start in range(0, len(documents), 200):
            batch = documents[start : start + 200]
            kubectl.run("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in batch))
        applied = time.monotonic()
        while ready_count(kubectl) < len(documents):
            time.sleep(5)
        ready_after = time.monotonic() - applied
        rss_ready = process.memory_mib()
        now = datetime.now(UTC)
        first = now.replace(second=0, microsecond=0) + timedelta(minutes=2)
        time.sleep(max(0.0, (first - datetime.now(UTC)).total_seconds()))
        cpu_before, log_before = process.cpu_seconds(), len(worker.log_text().splitlines())
        temporal_before = temporal_requests(stack)
        time.sleep(args.slots * 60 + 30)
        temporal_after = temporal_requests(stack)
        cpu = process.cpu_seconds() - cpu_before
        rss = process.memory_mib()
        lines = worker.log_text().splitlines()[log_before:]
        api_requests = sum(1 for line in lines if "urllib3.connectionpool" in line
                           and " HTTP/1.1\" " in line)  # fmt: skip
        found = latencies(kubectl, first)
        runs = len(found["temporal"])
        report = {
            "objects_per_backend": args.objects, "slots": args.slots,
            "mixed_temporal_objects": args.mix, "all_ready_after_s": round(ready_after, 1),
            "worker_rss_mib_when_ready": round(rss_ready, 1),
            **{f"{backend}_start_latency_s": {
                "runs": len(values),
                "median": round(statistics.median(values), 2) if values else None,
                "max": round(max(values), 2) if values else None,
            } for backend, values in found.items()},
            "worker_cpu_seconds": round(cpu, 2), "worker_rss_mib": round(rss, 1),
            "worker_apiserver_requests_per_run": round(api_requests / runs, 1) if runs else None,
            "temporal_requests": per_run(temporal_before, temporal_after, runs),
        }  # fmt: skip
        print(json.dumps(report, indent=2))
        worker.stop()
        operator.stop()


if __name__ == "__main__":
    main()
