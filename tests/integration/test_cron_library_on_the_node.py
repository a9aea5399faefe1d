"""sundial-cron on the real node (issue 28): the example service's image, run by a
kubernetes-backed ScheduledJob, reports the slot it ran for, the one its Job was made for,
for a CronJob's own slot, a run now and a backfill, and its summary reaches
status.recentRuns[].message through the ended Pod's termination message.

The temporal backend starts no Job of its own yet (the "one job, either backend" issue, 27):
when it does, a third case belongs here."""

from __future__ import annotations

import json
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
    ready,
    sj_status,
)

pytestmark = pytest.mark.cluster

SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"
REQUEST = "sundial.dev/request"
# A minute slot up to 60 s away, the Pod's start on a loaded two-core node, the pass after.
WAIT_SECONDS = 240


def ended_pod(kubectl: Kubectl, namespace: str, job: str) -> dict[str, Any] | None:
    listed = kubectl.run("get", "pods", "-n", namespace, "-l",
                         f"batch.kubernetes.io/job-name={job}", "-o", "json")  # fmt: skip
    pods = json.loads(listed.stdout)["items"]
    ended = [pod for pod in pods if pod["status"].get("phase") in ("Succeeded", "Failed")]
    return ended[0] if ended else None


KINDS = {None: "slot", "RunNow/first": "run-now", "Backfill/past": "backfill"}


def runs_to_check(kubectl: Kubectl, namespace: str) -> dict[str, dict[str, Any]] | None:
    """One Job of each path Sundial starts a run on (a CronJob slot, a run now, a
    backfill), by kind, once all three exist."""
    found: dict[str, dict[str, Any]] = {}
    for job in owned_jobs(kubectl, namespace, "hello"):
        kind = KINDS.get((job["metadata"].get("annotations") or {}).get(REQUEST), "")
        if kind and kind not in found:
            found[kind] = job
    return found if len(found) == len(KINDS) else None


def test_the_job_knows_its_slot_and_its_summary_reaches_status(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    if not stack.with_node:
        pytest.skip("needs the node (SUNDIAL_NODE=0 runs without one)")
    image = stack.images["example-service"]
    job = {"image": image, "cronJob": "hello", "ttlSecondsAfterFinished": 3600}
    kubectl.apply(kubernetes_scheduledjob("hello", namespace, job, concurrencyPolicy="Allow",
                                          successfulRunsHistoryLimit=10))  # fmt: skip
    eventually(lambda: ready(kubectl, "hello", namespace), what="hello Ready")
    kubectl.run("annotate", "scheduledjob", "hello", "-n", namespace, "sundial.dev/run-now=first")
    # A backfill of one past minute slot, before the object existed.
    past = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=3)
    kubectl.run("annotate", "scheduledjob", "hello", "-n", namespace,
                f"sundial.dev/backfill=past;{past:%Y-%m-%dT%H:%M:%SZ};"
                f"{past + timedelta(seconds=30):%Y-%m-%dT%H:%M:%SZ}")  # fmt: skip

    jobs = eventually(lambda: runs_to_check(kubectl, namespace), timeout=WAIT_SECONDS,
                      what="a Job of a CronJob slot, the run now's and the backfill's")  # fmt: skip
    for kind, made in jobs.items():
        name = made["metadata"]["name"]
        scheduled = parse_time(made["metadata"]["annotations"][SCHEDULED])
        pod = eventually(lambda n=name: ended_pod(kubectl, namespace, n), timeout=WAIT_SECONDS,
                         what=f"the Pod of {name} ({kind}) ended")  # fmt: skip
        assert pod["status"]["phase"] == "Succeeded", (kind, pod["status"])
        (container,) = pod["status"]["containerStatuses"]
        summary = json.loads(container["state"]["terminated"]["message"])
        # The slot the job reports is the one its Job was made for: from the Job's name
        # (the downward API) for the controller's, from SUNDIAL_SLOT for the requested.
        assert parse_time(summary["slot"]) == scheduled, (kind, summary)
        requested = {v: k for k, v in KINDS.items()}[kind]
        assert summary["requested"] == requested, (kind, summary)
        if kind == "backfill":
            assert scheduled == past
        assert (summary["result"], summary["exitCode"]) == ("succeeded", 0)
        said = f"hello for slot {summary['slot']} (greetings=1)"

        def listed(n: str = name, said: str = said) -> dict[str, Any] | None:
            runs = sj_status(kubectl, "hello", namespace).get("recentRuns", [])
            run = next((r for r in runs if r.get("jobName") == n), None)
            return run if run is not None and run.get("message") == said else None

        run = eventually(listed, timeout=WAIT_SECONDS,
                         what=f"{name}'s summary in status.recentRuns: {said!r}")  # fmt: skip
        assert parse_time(run["scheduledTime"]) == scheduled
        assert run["result"] == "Succeeded"
