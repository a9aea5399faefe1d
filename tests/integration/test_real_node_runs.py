"""What only a real node shows (issue 13): Replace kills a running Job, TTL removes finished
Jobs, a Forbid job that really outlives its interval, activeDeadlineSeconds. One timeline of
minute slots serves all four, so their waits overlap; Sundial must report no false miss."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    eventually,
    kubernetes_scheduledjob,
    owned_jobs,
    parse_time,
    sj_status,
    wait_until,
)

pytestmark = pytest.mark.cluster

ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"


@pytest.mark.timeout(600)
def test_replace_ttl_forbid_and_deadlines_on_a_real_node(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    busybox = stack.images["busybox"]

    def apply(name: str, job: dict[str, Any], **spec: Any) -> None:
        kubectl.apply(kubernetes_scheduledjob(name, namespace, job, **spec))

    now = datetime.now(UTC)
    m1 = now.replace(second=0, microsecond=0) + timedelta(minutes=1 if now.second < 40 else 2)
    apply("replaced", {"image": busybox, "command": ["sleep", "90"]}, concurrencyPolicy="Replace")
    apply("ttl", {"image": busybox, "command": ["sh", "-c", "exit 0"],
                  "ttlSecondsAfterFinished": 5})  # fmt: skip
    # Runs 85 s, past the next slot and past that slot's 15 s starting deadline: the
    # controller can neither start the next slot on time nor late, so it is skipped.
    # (Without a deadline it would start late, once the run ends.)
    apply(
        "forbid",
        {"image": busybox, "command": ["sleep", "85"], "ttlSecondsAfterFinished": 3600},
        concurrencyPolicy="Forbid",
        startingDeadlineSeconds=15,
        successfulRunsHistoryLimit=10,
    )  # every Job kept: the spans below need them all
    apply("deadline", {"template": {"spec": {
        "activeDeadlineSeconds": 5, "backoffLimit": 0, "ttlSecondsAfterFinished": 3600,
        "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "job", "image": busybox, "command": ["sleep", "60"]}]}},
    }}})  # fmt: skip

    # Replace: at M2 the controller kills M1's Job (still sleeping) and starts M2's.
    wait_until(m1 + timedelta(minutes=1, seconds=25))
    replaced = {parse_time(j["metadata"]["annotations"][ANNOTATION]) for j in
                owned_jobs(kubectl, namespace, "replaced")}  # fmt: skip
    assert m1 not in replaced, "Replace deleted the running Job of M1"
    assert m1 + timedelta(minutes=1) in replaced

    # activeDeadlineSeconds: M1's Job is killed after 5 s and fails with DeadlineExceeded.
    failed = [
        c for j in owned_jobs(kubectl, namespace, "deadline")
        for c in j.get("status", {}).get("conditions", [])
        if c["type"] == "Failed" and c["status"] == "True"
    ]  # fmt: skip
    assert any(c["reason"] == "DeadlineExceeded" for c in failed), failed

    # By M4+20s every slot up to M3 is certain (the next slot has passed).
    m3 = m1 + timedelta(minutes=2)
    wait_until(m3 + timedelta(minutes=1, seconds=20))
    for name in ("replaced", "ttl", "deadline"):
        current = eventually(
            lambda n=name: (s := sj_status(kubectl, n, namespace)).get("runAccounting", {})
            .get("accountedUntil") and parse_time(s["runAccounting"]["accountedUntil"]) >= m3 and s,
            timeout=60, what=f"{name} judged up to M3",
        )  # fmt: skip
        assert current.get("missedRuns", 0) == 0, (name, current)
        assert current.get("skippedRuns", 0) == 0, (name, current)
        assert current.get("recentMissedRuns", []) == [], (name, current)
    # TTL really removed the finished Jobs of M1 and M2.
    left = {
        parse_time(j["metadata"]["annotations"][ANNOTATION])
        for j in owned_jobs(kubectl, namespace, "ttl")
    }
    assert m1 not in left, left
    assert m1 + timedelta(minutes=1) not in left, left

    # Forbid: exactly the slots that a real run covered and that got no Job of their own.
    forbid_jobs = owned_jobs(kubectl, namespace, "forbid")
    started = {parse_time(j["metadata"]["annotations"][ANNOTATION]) for j in forbid_jobs}
    spans = [(parse_time(j["status"]["startTime"]),
              parse_time(j["status"].get("completionTime") or "2999-01-01T00:00:00Z"))
             for j in forbid_jobs if j.get("status", {}).get("startTime")]  # fmt: skip
    # From the first slot after creation: that is M0 (a minute before M1) when the test
    # began late in a minute, and M0's run covers M1.
    first = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    slots = [
        first + timedelta(minutes=i) for i in range(int((m3 - first).total_seconds() // 60) + 1)
    ]
    covered = {s for s in slots if s not in started and any(a <= s < b for a, b in spans)}
    assert covered, f"an 85 s run covers a later slot: {spans}"
    current = sj_status(kubectl, "forbid", namespace)
    skips = [parse_time(r["scheduledTime"]) for r in current.get("recentMissedRuns", [])
             if r["reason"] == "OverlapSkipped"]  # fmt: skip
    skipped = {when for when in skips if when <= m3}
    assert skipped == covered, (skipped, covered, spans)
    assert current.get("missedRuns", 0) == 0, current
