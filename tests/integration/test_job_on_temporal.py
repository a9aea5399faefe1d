"""A container job on temporal (issue 27): `backend: temporal` with `spec.job`. The
Temporal Schedule starts Sundial's RunJob workflow; Sundial's worker (a real process,
`python -m sundial worker`) makes the Job on the real node, waits for it and reports its
outcome. Runs are started with run-now requests (a trigger of the object's own schedule)
so no test waits for a minute boundary; ground truth is the apiserver's audit log and
Temporal's own record of the workflow."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    audit_events,
    eventually,
    no_retry_job,
    owned_jobs,
    sj_status,
)

pytestmark = pytest.mark.cluster

RUN_JOB = "sundial.RunJob"
TASK_QUEUE = "sundial/jobs"  # the default schedule id prefix's (worker_task_queue)
# A run on the node: the worker takes it up, the kubelet pulls nothing (images are local),
# the Pod runs; generous for a loaded 2-core machine.
RUN_SECONDS = 120


@pytest.fixture(scope="module")
def sundial_worker(stack: LocalStack, operator: OperatorProcess) -> Iterator[OperatorProcess]:
    if not stack.with_node:
        pytest.skip("a container job needs a node to run on")
    worker = OperatorProcess.on(stack, "worker", args=("worker",))
    worker.start()
    yield worker
    worker.stop()


def job_on_temporal(name: str, namespace: str, job: dict[str, Any], **spec: Any) -> dict[str, Any]:
    spec.setdefault("schedule", "0 0 1 1 *")  # once a year: runs come from run-now here
    return {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backend": "temporal", "job": job, **spec},
    }  # fmt: skip


def run_now(kubectl: Kubectl, name: str, namespace: str) -> str:
    request = uuid.uuid4().hex[:8]
    kubectl.run("annotate", "--overwrite", "-n", namespace, f"scheduledjob/{name}",
                f"sundial.dev/run-now={request}")  # fmt: skip
    return request


def ended_run(kubectl: Kubectl, name: str, namespace: str) -> dict[str, Any]:
    runs = [r for r in sj_status(kubectl, name, namespace).get("recentRuns", [])
            if r.get("result") not in (None, "Running")]  # fmt: skip
    assert runs, "no ended run yet"
    return runs[-1]


def script_job(busybox: str, script: str) -> dict[str, Any]:
    return {"image": busybox, "command": ["sh", "-c", script], "ttlSecondsAfterFinished": 3600}


def test_a_container_job_runs_on_temporal_and_reports_like_any_run(
    stack: LocalStack, kubectl: Kubectl, namespace: str, sundial_worker: OperatorProcess,
    temporal: TemporalSide,
) -> None:  # fmt: skip
    busybox = stack.images["busybox"]
    kubectl.apply(job_on_temporal("ok", namespace, script_job(
        busybox, "echo 'all 3 reports written' > /dev/termination-log")))  # fmt: skip
    kubectl.apply(job_on_temporal("boom", namespace, no_retry_job(
        busybox, "echo 'no input for today' > /dev/termination-log; exit 3")))  # fmt: skip
    for name in ("ok", "boom"):
        eventually(lambda name=name: sj_status(kubectl, name, namespace).get("backendRef"),
                   what=f"{name}'s schedule")  # fmt: skip
        run_now(kubectl, name, namespace)

    ok = eventually(lambda: ended_run(kubectl, "ok", namespace), timeout=RUN_SECONDS,
                    what="ok's run")  # fmt: skip
    assert ok["result"] == "Succeeded", ok
    assert ok["workflowId"].startswith(f"sundial/{namespace}/ok"), ok
    assert ok["jobName"].startswith("ok-t"), ok
    assert ok.get("message") == "all 3 reports written", ok
    jobs = {j["metadata"]["name"]: j for j in owned_jobs(kubectl, namespace, "ok")}
    assert list(jobs) == [ok["jobName"]], jobs
    job = jobs[ok["jobName"]]
    owner = job["metadata"]["ownerReferences"][0]
    sj = kubectl.get("scheduledjob", "ok", namespace)
    assert sj is not None
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "ScheduledJob", sj["metadata"]["uid"], True)  # fmt: skip
    assert job["metadata"]["annotations"]["sundial.dev/workflow-id"] == ok["workflowId"]
    # Temporal's own record: the workflow completed.
    handle = temporal.client.get_workflow_handle(ok["workflowId"])
    described = temporal.run(lambda: handle.describe())
    assert described.status == WorkflowExecutionStatus.COMPLETED

    boom = eventually(lambda: ended_run(kubectl, "boom", namespace), timeout=RUN_SECONDS,
                      what="boom's run")  # fmt: skip
    assert boom["result"] == "Failed", boom
    assert boom["reason"] == "BackoffLimitExceeded", boom
    assert boom["message"] == "no input for today", boom
    # One Job per run, by the audit log (not Sundial's word): the worker created each once.
    for name, run in (("ok", ok), ("boom", boom)):
        created = [e for e in audit_events(stack.log_dir / "audit.log") if e.get("verb") == "create"
                   and e.get("objectRef", {}).get("resource") == "jobs"
                   and e.get("objectRef", {}).get("namespace") == namespace
                   and e.get("objectRef", {}).get("name") == run["jobName"]
                   and e.get("responseStatus", {}).get("code") == 201]  # fmt: skip
        assert len(created) == 1, (name, created)


def test_a_run_of_sundials_workflow_not_started_by_the_schedule_creates_nothing(
    stack: LocalStack, kubectl: Kubectl, namespace: str, sundial_worker: OperatorProcess,
    temporal: TemporalSide,
) -> None:  # fmt: skip
    """Access to Temporal is never the right to run Pods: a RunJob started by hand, with a
    true reference to a real ScheduledJob, makes no Job and fails saying why; so does one
    that claims the schedule started it (its search attribute), where Temporal accepts
    the claim at all."""
    kubectl.apply(job_on_temporal("target", namespace, script_job(stack.images["busybox"],
                                                                 "exit 0")))  # fmt: skip
    eventually(lambda: sj_status(kubectl, "target", namespace).get("backendRef"),
               what="the schedule")  # fmt: skip
    sj = kubectl.get("scheduledjob", "target", namespace)
    assert sj is not None
    reference = {"namespace": namespace, "name": "target", "uid": sj["metadata"]["uid"],
                 "jobHash": "forged"}  # fmt: skip

    def start(workflow_id: str, **options: Any) -> Any:
        return temporal.run(lambda: temporal.client.start_workflow(
            RUN_JOB, reference, id=workflow_id, task_queue=TASK_QUEUE, **options))  # fmt: skip

    def failure(handle: Any) -> str:
        try:
            temporal.run(lambda: handle.result(), timeout=90)
        except WorkflowFailureError as error:
            return str(getattr(error.cause, "type", None) or error.cause)
        raise AssertionError("a forged run succeeded")

    assert failure(start(f"forged-{namespace}")) == "NotScheduledBySundial"
    claimed = SearchAttributePair(
        SearchAttributeKey.for_keyword("TemporalScheduledById"), f"sundial/{namespace}/target"
    )
    try:
        forged = start(f"forged-claim-{namespace}",
                       search_attributes=TypedSearchAttributes([claimed]))  # fmt: skip
    except RPCError:
        forged = None  # Temporal refuses a start that sets its reserved attribute
    if forged is not None:
        assert failure(forged) == "NotScheduledBySundial"
    assert owned_jobs(kubectl, namespace, "target") == []
