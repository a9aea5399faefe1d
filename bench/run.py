"""Scale measurements on the real local stack (never part of the timed test suite).

    make bench                         # defaults: 1000 kubernetes-backed, 200 temporal-backed
    python bench/run.py --kubernetes 5000 --temporal 500

Measures, for N ScheduledJobs in one operator:
- time from operator start to every ScheduledJob Ready, and the operator's memory (RSS);
- writes the operator made to converge (from the apiserver's own request counters);
- writes in a quiet minute afterwards (should be none), and on an operator restart;
- the request rate to Temporal with M temporal-backed ScheduledJobs (sundial_temporal_requests).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests")]

from localstack import LocalStack, Ports  # noqa: E402
from localstack.sundial_setup import (  # noqa: E402
    CLUSTER_RESOURCE_NAMESPACE,
    default_connection_manifest,
)
from support import CRD_DIR, CRD_NAMES, Kubectl, OperatorProcess, free_port, sample, scrape  # noqa: E402

NAMESPACE = "bench"


def manifests(count: int, backend: str) -> str:
    docs = []
    for i in range(count):
        spec: dict[str, object]
        if backend == "kubernetes":
            # Yearly: no Jobs during the bench, only the reconcile machinery is measured.
            spec = {"schedule": f"{i % 60} {i % 24} 1 1 *", "job": {"image": "bench:1"}}
        else:
            spec = {
                "backend": "temporal",
                "interval": {"every": "1h", "offset": f"{i % 3600}s"},
                "workflow": {"type": "BenchNoop", "taskQueue": "bench"},
            }
        docs.append(
            {
                "apiVersion": "sundial.dev/v1alpha1",
                "kind": "ScheduledJob",
                "metadata": {"name": f"{backend[:4]}-{i:05d}", "namespace": NAMESPACE},
                "spec": spec,
            }
        )
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})


def writes(kubectl: Kubectl) -> dict[str, int]:
    """Mutating requests the apiserver served, by resource, from its /metrics."""
    text = kubectl.run("get", "--raw", "/metrics").stdout
    totals: dict[str, int] = {}
    pattern = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
    for line in text.splitlines():
        match = pattern.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("verb") not in ("CREATE", "PATCH", "APPLY", "UPDATE", "DELETE"):
            continue
        resource = labels.get("resource", "") + (
            "/" + labels["subresource"] if labels.get("subresource") else ""
        )
        if resource in ("scheduledjobs", "scheduledjobs/status", "cronjobs", "events"):
            totals[resource] = totals.get(resource, 0) + int(float(match["value"]))
    return totals


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {
        k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)
    }


def ready_count(kubectl: Kubectl) -> int:
    data = json.loads(kubectl.run("get", "scheduledjobs", "-n", NAMESPACE, "-o", "json").stdout)
    return sum(
        any(c["type"] == "Ready" and c["status"] == "True"
            for c in item.get("status", {}).get("conditions", []))
        for item in data["items"]
    )  # fmt: skip


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_all_ready(kubectl: Kubectl, total: int, timeout: float) -> float:
    began = time.monotonic()
    while ready_count(kubectl) < total:
        if time.monotonic() - began > timeout:
            raise SystemExit(f"not all {total} Ready within {timeout:.0f}s")
        time.sleep(2)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubernetes", type=int, default=1000)
    parser.add_argument("--temporal", type=int, default=200)
    parser.add_argument("--quiet-seconds", type=float, default=60)
    args = parser.parse_args()
    total = args.kubernetes + args.temporal

    ports = Ports(etcd=free_port(), apiserver=free_port(), kcm=free_port(), temporal=free_port())
    with LocalStack(REPO / ".stack-bench", ports) as stack:
        kubectl = Kubectl(stack.kubectl, stack.kubeconfig)
        kubectl.run("apply", "--server-side", "-f", str(CRD_DIR))
        kubectl.run("wait", "--for=condition=Established", *CRD_NAMES)
        kubectl.run("apply", "-f", "-", stdin=default_connection_manifest(stack.temporal_address))
        kubectl.run("create", "namespace", NAMESPACE)
        for backend, count in (("kubernetes", args.kubernetes), ("temporal", args.temporal)):
            if count:
                kubectl.run("create", "-f", "-", stdin=manifests(count, backend))

        env = {
            **os.environ,
            **stack.env(),
            "SUNDIAL_CLUSTER_RESOURCE_NAMESPACE": CLUSTER_RESOURCE_NAMESPACE,
            "SUNDIAL_METRICS_PORT": str(free_port()),
            "SUNDIAL_HEALTH_PORT": str(free_port()),
            "SUNDIAL_LOG_LEVEL": "WARNING",
        }
        operator = OperatorProcess(env, stack.log_dir / "operator-bench.log")
        before = writes(kubectl)
        operator.start()
        assert operator.proc is not None
        converge = wait_all_ready(kubectl, total, timeout=1800)
        converged = writes(kubectl)
        rss = rss_mib(operator.proc.pid)
        metrics = scrape(operator.metrics_url)
        temporal_before = metrics.get(sample("sundial_temporal_requests_total"), 0.0)

        time.sleep(args.quiet_seconds)
        quiet = writes(kubectl)
        metrics = scrape(operator.metrics_url)
        temporal_after = metrics.get(sample("sundial_temporal_requests_total"), 0.0)
        rss_quiet = rss_mib(operator.proc.pid)

        operator.restart()
        restart_began = time.monotonic()
        # The restarted operator has worked through its listing when a new object is Ready.
        kubectl.apply({
            "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": "after-restart", "namespace": NAMESPACE},
            "spec": {"schedule": "0 0 1 1 *", "job": {"image": "bench:1"}},
        })  # fmt: skip
        wait_all_ready(kubectl, total + 1, timeout=1800)
        restart_seconds = time.monotonic() - restart_began
        restarted = writes(kubectl)
        operator.stop()

    print(f"\nScheduledJobs: {args.kubernetes} kubernetes-backed, {args.temporal} temporal-backed")
    print(f"all Ready after operator start:  {converge:.1f} s ({total / converge:.0f} objects/s)")
    print(f"writes to converge:              {delta(converged, before)}")
    print(f"operator RSS converged / quiet:  {rss:.0f} MiB / {rss_quiet:.0f} MiB")
    quiet_writes = delta(quiet, converged) or "none"
    print(f"writes in a quiet {args.quiet_seconds:.0f} s:          {quiet_writes}")
    rate = (temporal_after - temporal_before) / args.quiet_seconds
    print(f"Temporal requests in quiet time: {rate:.1f}/s for {args.temporal} schedules")
    restart_writes = delta(restarted, quiet)
    # The one new object accounts for a CronJob apply and a status write.
    print(f"operator restart: caught up in   {restart_seconds:.1f} s; writes {restart_writes}")


if __name__ == "__main__":
    main()
