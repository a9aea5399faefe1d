"""The job side of the `cronJob:` convention, for real: the CronJob Sundial makes runs the
sample service's image on the node with MODE=cron CRON_JOB=<name> (issue 13)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from localstack import LocalStack
from support import Kubectl, OperatorProcess, eventually, ready

pytestmark = pytest.mark.cluster


def service_job(name: str, namespace: str, image: str, cron_job: str) -> dict[str, Any]:
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedule": "0 3 * * *", "job": {"image": image, "cronJob": cron_job}},
    }


def pod_of(kubectl: Kubectl, job: str, namespace: str) -> dict[str, Any] | None:
    found = kubectl.run("get", "pods", "-n", namespace, "-l", f"job-name={job}", "-o", "json")
    pods: list[dict[str, Any]] = json.loads(found.stdout)["items"]
    finished = [p for p in pods if p["status"].get("phase") in ("Succeeded", "Failed")]
    return finished[0] if finished else None


CASES = [
    # (job name, Pod phase, exit code, in the log)
    ("hello", "Succeeded", 0, "hello job ran"),
    ("fail", "Failed", 1, "the fail job failed"),
    ("nope", "Failed", 2, "no job named 'nope'"),
]


def test_the_cronjob_runs_the_named_job_of_the_service_image(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    image = stack.images["example-service"]
    for cron_job, *_ in CASES:
        kubectl.apply(service_job(f"svc-{cron_job}", namespace, image, cron_job))
    for cron_job, *_ in CASES:
        name = f"svc-{cron_job}"
        eventually(lambda n=name: ready(kubectl, n, namespace), what=f"{name} Ready")
        # Run the CronJob's own template now instead of waiting for 03:00.
        kubectl.run("create", "job", f"{name}-now", f"--from=cronjob/{name}", "-n", namespace)
    for cron_job, phase, exit_code, logged in CASES:
        job = f"svc-{cron_job}-now"
        pod = eventually(lambda j=job: pod_of(kubectl, j, namespace), timeout=120,
                         what=f"the Pod of {job} finished")  # fmt: skip
        assert pod["status"]["phase"] == phase, cron_job
        state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert state["exitCode"] == exit_code, cron_job
        log = kubectl.run("logs", pod["metadata"]["name"], "-n", namespace).stdout
        assert logged in log, (cron_job, log)
