"""What the bench reads off the running world: the apiserver's audit log (who asked for
what, by User-Agent), the operator's process (CPU, memory), and a watch of the
ScheduledJobs (when each became Ready, when each showed a slot missed)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

OPERATOR_AGENTS = ("sundial/", "kopf/")
READS = ("get", "list", "watch")


class AuditLog:
    """Counts the audit log's lines from a mark on: requests by who and what."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        time.sleep(2)  # the batch backend flushes about every second
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def since_mark(self) -> list[dict[str, Any]]:
        time.sleep(2)
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        return [json.loads(line) for line in data.splitlines() if line.strip()]


def operator_requests(events: list[dict[str, Any]]) -> Counter[str]:
    """The operator's requests as "verb resource[/subresource]"."""
    counts: Counter[str] = Counter()
    for event in events:
        if not event.get("userAgent", "").startswith(OPERATOR_AGENTS):
            continue
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "?") + (
            "/" + ref["subresource"] if ref.get("subresource") else ""
        )
        counts[f"{event['verb']} {resource}"] += 1
    return counts


def controller_status_writes(events: list[dict[str, Any]]) -> int:
    """The CronJob controller's own writes of CronJob status: the floor for status writes."""
    return sum(
        1 for e in events
        if "kube-controller-manager" in e.get("userAgent", "")
        and (e.get("objectRef") or {}).get("resource") == "cronjobs"
        and (e.get("objectRef") or {}).get("subresource") == "status"
        and e["verb"] in ("update", "patch")
    )  # fmt: skip


def job_load(events: list[dict[str, Any]]) -> Counter[str]:
    """What the real node's Jobs cost the platform: Jobs and Pods made by the controllers,
    the kubelet's Pod status writes."""
    counts: Counter[str] = Counter()
    for event in events:
        ref, agent = event.get("objectRef") or {}, event.get("userAgent", "")
        resource = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource")
                                               else "")  # fmt: skip
        if event["verb"] == "create" and resource in ("jobs", "pods"):
            counts[f"{resource} created"] += 1
        elif agent.startswith("kubelet/") and resource == "pods/status":
            counts["kubelet pod status writes"] += 1
    return counts


def reads(counts: Counter[str]) -> int:
    return sum(n for key, n in counts.items() if key.split(" ")[0] in READS)


def writes(counts: Counter[str]) -> Counter[str]:
    return Counter({k: n for k, n in counts.items() if k.split(" ")[0] not in READS})


class Process:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def memory_mib(self, which: str = "VmRSS") -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(which + ":"):
                return int(line.split()[1]) / 1024
        return float("nan")


@dataclass
class Seen:
    ready_at: float | None = None
    missed: set[str] = field(default_factory=set)
    # Each slot's last reported outcome: a run's result, or "missed: <reason>".
    outcomes: dict[str, str] = field(default_factory=dict)


class ScheduledJobWatch:
    """One watch of the namespace's ScheduledJobs, in a thread: cheap to ask, unlike
    listing thousands of objects every few seconds (which would load the apiserver the
    bench is measuring)."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.seen: dict[str, Seen] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        version = None
        while True:
            try:
                stream = watch.Watch().stream(
                    self.custom.list_namespaced_custom_object, "sundial.dev", "v1alpha1",
                    self.namespace, "scheduledjobs", resource_version=version,
                    timeout_seconds=300, allow_watch_bookmarks=True,
                )  # fmt: skip
                for event in stream:
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._note(obj)
            except Exception:
                version = None
                time.sleep(1)

    def _note(self, obj: dict[str, Any]) -> None:
        status = obj.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or [])  # fmt: skip
        now = time.time()
        with self.lock:
            seen = self.seen.setdefault(obj["metadata"]["name"], Seen())
            if ready and seen.ready_at is None:
                seen.ready_at = now
            for run in status.get("recentMissedRuns") or []:
                seen.missed.add(run["scheduledTime"])
                seen.outcomes[run["scheduledTime"]] = f"missed: {run['reason']}"
            for run in status.get("recentRuns") or []:
                seen.outcomes[run["scheduledTime"]] = run["result"]

    def ready(self, names: list[str] | None = None) -> int:
        with self.lock:
            pool = self.seen if names is None else {n: self.seen.get(n, Seen()) for n in names}
            return sum(s.ready_at is not None for s in pool.values())

    def ready_at(self, name: str) -> float | None:
        with self.lock:
            seen = self.seen.get(name)
            return seen.ready_at if seen else None

    def outcomes(self, names: list[str], start: str, end: str) -> Counter[str]:
        """The reported outcome of each slot in [start, end) of these objects, counted
        (RFC 3339 UTC times compare as strings)."""
        with self.lock:
            return Counter(
                outcome for n in names
                for slot, outcome in self.seen.get(n, Seen()).outcomes.items()
                if start <= slot < end
            )  # fmt: skip

    def showing(self, names: list[str], slot: str) -> int:
        with self.lock:
            return sum(slot in self.seen.get(n, Seen()).missed for n in names)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def histogram_quantile(buckets: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding quantile q (cumulative counts by `le`)."""
    total = max(buckets.values(), default=0.0)
    for bound in sorted(buckets):
        if total and buckets[bound] >= q * total:
            return bound
    return float("nan")


def wait_for(what: str, check: object, timeout: float, every: float = 1.0) -> float:
    """Seconds until `check()` holds; the bench stops, saying what, past `timeout`."""
    began = time.monotonic()
    while not check():  # type: ignore[operator]
        if time.monotonic() - began > timeout:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic() - began
