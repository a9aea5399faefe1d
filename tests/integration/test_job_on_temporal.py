"""A container job on temporal (issue 27): `backend: temporal` with `spec.job`. The
Temporal Schedule starts Sundial's RunJob workflow; Sundial's worker (a real process,
`python -m sundial worker`) makes the Job on the real node, waits for it and reports its
outcome. Runs are started with run-now requests (a trigger of the object's own schedule)
so no test waits for a minute boundary; ground truth is the apiserver's audit log and
Temporal's own record of the workflow."""

from __future__ import annotations

import itertools
import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError

from localstack import LocalStack
from support import (
    Background,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    audit_events,
    conditions_of,
    eventually,
    fresh_namespace,
    namespace_name,
    no_retry_job,
    owned_jobs,
    parse_time,
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


@pytest.fixture(scope="module")
def flip(
    stack: LocalStack, kubectl: Kubectl, sundial_worker: OperatorProcess
) -> Iterator[Background]:
    """The flip scenario (minute slots), started with the module's first test so that its
    waits overlap the others'; `test_flipping_backend...` joins it."""
    with fresh_namespace(kubectl, namespace_name("flip-backend")) as namespace:
        running = Background(partial(flip_scenario, stack, kubectl, namespace))
        yield running
        running.thread.join(FLIP_SECONDS)


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
    temporal: TemporalSide, flip: Background,
) -> None:  # fmt: skip
    busybox = stack.images["busybox"]
    kubectl.apply(job_on_temporal("ok", namespace, script_job(
        busybox, "echo 'all 3 reports written' > /dev/termination-log")))  # fmt: skip
    kubectl.apply(job_on_temporal("boom", namespace, no_retry_job(
        busybox, "echo 'no input for today' > /dev/termination-log; exit 3")))  # fmt: skip
    kubectl.apply(job_on_temporal("slow", namespace, {
        **script_job(busybox, "sleep 60"), "activeDeadlineSeconds": 5}))  # fmt: skip
    for name in ("ok", "boom", "slow"):
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
    slow = eventually(lambda: ended_run(kubectl, "slow", namespace), timeout=RUN_SECONDS,
                      what="slow's run")  # fmt: skip
    assert (slow["result"], slow["reason"]) == ("TimedOut", "DeadlineExceeded"), slow
    # One Job per run, by the audit log (not Sundial's word): the worker created each once.
    assert sorted(created_jobs(stack, namespace)) == sorted(
        run["jobName"] for run in (ok, boom, slow)
    )


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


def created_jobs(stack: LocalStack, namespace: str) -> list[str]:
    """The Jobs the apiserver created in `namespace` (audit log: 201 answers)."""
    return [
        event["objectRef"]["name"]
        for event in audit_events(stack.log_dir / "audit.log")
        if event.get("verb") == "create"
        and event.get("objectRef", {}).get("resource") == "jobs"
        and event.get("objectRef", {}).get("namespace") == namespace
        and event.get("responseStatus", {}).get("code") == 201
    ]


def job_gone(kubectl: Kubectl, namespace: str, name: str) -> bool:
    result = kubectl.run("get", "job", "-n", namespace, name, "--ignore-not-found", "-o", "name")
    return not result.stdout.strip()


def test_a_run_temporal_ends_takes_its_job_and_pods_along(
    stack: LocalStack, kubectl: Kubectl, namespace: str, sundial_worker: OperatorProcess,
    temporal: TemporalSide,
) -> None:  # fmt: skip
    """A run cancelled by hand, or terminated by the overlap policy (Replace), deletes its
    Job, and with it its Pods: neither outlives the other."""
    busybox = stack.images["busybox"]
    kubectl.apply(job_on_temporal("cancelled", namespace, script_job(busybox, "sleep 300")))
    kubectl.apply(job_on_temporal("replaced", namespace, script_job(busybox, "sleep 300"),
                                  schedule=None, interval={"every": "30s"},
                                  concurrencyPolicy="Replace"))  # fmt: skip
    eventually(lambda: sj_status(kubectl, "cancelled", namespace).get("backendRef"),
               what="the schedule")  # fmt: skip
    run_now(kubectl, "cancelled", namespace)
    first = eventually(lambda: owned_jobs(kubectl, namespace, "cancelled"), timeout=RUN_SECONDS,
                       what="the Job of the run to cancel")[0]  # fmt: skip
    workflow_id = first["metadata"]["annotations"]["sundial.dev/workflow-id"]
    handle = temporal.client.get_workflow_handle(workflow_id)
    temporal.run(lambda: handle.cancel())
    eventually(lambda: job_gone(kubectl, namespace, first["metadata"]["name"]), timeout=60,
               what="the cancelled run's Job deleted")  # fmt: skip
    run = eventually(lambda: ended_run(kubectl, "cancelled", namespace), timeout=60,
                     what="the cancelled run in status")  # fmt: skip
    assert run["result"] == "Cancelled", run

    # Replace: the next action terminates the running one; its Job goes, the new one stays.
    made = eventually(lambda: [j for j in created_jobs(stack, namespace) if j.startswith(
        "replaced-")][1:], timeout=RUN_SECONDS, what="a second run of replaced")  # fmt: skip
    replaced = next(j for j in created_jobs(stack, namespace) if j.startswith("replaced-"))
    eventually(lambda: job_gone(kubectl, namespace, replaced), timeout=60,
               what="the terminated run's Job deleted")  # fmt: skip
    assert not job_gone(kubectl, namespace, made[0]), "the running run's Job was deleted"


def test_a_worker_killed_mid_run_leaves_one_job_waited_on_again(
    stack: LocalStack, kubectl: Kubectl, namespace: str, sundial_worker: OperatorProcess,
) -> None:  # fmt: skip
    kubectl.apply(job_on_temporal("steady", namespace, script_job(stack.images["busybox"],
                                                                 "sleep 25")))  # fmt: skip
    eventually(lambda: sj_status(kubectl, "steady", namespace).get("backendRef"),
               what="the schedule")  # fmt: skip
    run_now(kubectl, "steady", namespace)
    eventually(lambda: owned_jobs(kubectl, namespace, "steady"), timeout=RUN_SECONDS,
               what="the run's Job")  # fmt: skip
    sundial_worker.signal(signal.SIGKILL)
    sundial_worker.start()
    run = eventually(lambda: ended_run(kubectl, "steady", namespace), timeout=RUN_SECONDS,
                     what="the run, waited on by the restarted worker")  # fmt: skip
    assert run["result"] == "Succeeded", run
    assert created_jobs(stack, namespace) == [run["jobName"]]


# The flip's worst case: M1 up to 80 s away, three slots, each switch's settling.
FLIP_SECONDS = 420
SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def flip_scenario(stack: LocalStack, kubectl: Kubectl, namespace: str) -> None:
    """kubernetes -> temporal -> kubernetes with the same job across minute boundaries:
    M1 by the CronJob, M2 by Temporal through the worker, M3 by the CronJob again, each
    slot one Job, nothing made and deleted in between (the audit log)."""
    busybox = stack.images["busybox"]

    def apply(backend: str) -> None:
        kubectl.apply({
            "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": "flip", "namespace": namespace},
            "spec": {"backend": backend, "schedule": "* * * * *", "concurrencyPolicy": "Forbid",
                     "successfulRunsHistoryLimit": 10, "job": script_job(busybox, "sleep 5")},
        })  # fmt: skip

    def jobs() -> list[tuple[datetime, str]]:
        return sorted((parse_time(j["metadata"]["annotations"][SCHEDULED]), j["metadata"]["name"])
                      for j in owned_jobs(kubectl, namespace, "flip"))  # fmt: skip

    def on(backend: str) -> bool:
        status = sj_status(kubectl, "flip", namespace)
        switching = conditions_of(status).get("Switching", {})
        return status.get("backend") == backend and switching.get("status") != "True"

    now = datetime.now(UTC)
    m1 = now.replace(second=0, microsecond=0) + timedelta(minutes=1 if now.second < 40 else 2)
    m2, m3 = m1 + timedelta(minutes=1), m1 + timedelta(minutes=2)
    apply("kubernetes")
    eventually(lambda: m1 in dict(jobs()), timeout=(m1 - now).total_seconds() + 90,
               what="M1's Job, by the CronJob")  # fmt: skip
    apply("temporal")
    eventually(lambda: on("temporal"), timeout=60, what="the switch to temporal")
    eventually(lambda: m2 in dict(jobs()), timeout=(m2 - datetime.now(UTC)).total_seconds() + 90,
               what="M2's Job, by the worker")  # fmt: skip
    apply("kubernetes")
    eventually(lambda: on("kubernetes"), timeout=60, what="the switch back")
    eventually(lambda: m3 in dict(jobs()), timeout=(m3 - datetime.now(UTC)).total_seconds() + 90,
               what="M3's Job, by the CronJob")  # fmt: skip
    made = jobs()
    by_slot = [slot for slot, _ in made]
    assert len(by_slot) == len(set(by_slot)), f"a slot ran twice: {made}"
    names = dict(made)
    minutes = {slot: int(slot.timestamp()) // 60 for slot in (m1, m3)}
    assert names[m1] == f"flip-{minutes[m1]}", made  # the CronJob controller's name
    assert names[m2].startswith("flip-t"), made  # the worker's
    assert names[m3] == f"flip-{minutes[m3]}", made
    # Ground truth: every Job the apiserver created in the namespace is one of these.
    assert sorted(created_jobs(stack, namespace)) == sorted(names.values())


@pytest.mark.timeout(FLIP_SECONDS + 60)
def test_flipping_backend_with_the_same_job_runs_each_slot_once(flip: Background) -> None:
    flip.join(FLIP_SECONDS)


def test_overlap_skips_in_temporal_and_a_deleted_object_takes_its_run_along(
    stack: LocalStack, kubectl: Kubectl, namespace: str, sundial_worker: OperatorProcess,
    temporal: TemporalSide,
) -> None:  # fmt: skip
    """Forbid is Temporal's skip: a run that outlasts the interval makes the next actions
    skipped, counted as OverlapSkipped, and no second Job while it runs. Deleting the
    object mid-run takes its Job, its Pods and its schedule along."""
    busybox = stack.images["busybox"]
    kubectl.apply(job_on_temporal("skipping", namespace, script_job(busybox, "sleep 45"),
                                  schedule=None, interval={"every": "20s"},
                                  concurrencyPolicy="Forbid"))  # fmt: skip
    kubectl.apply(job_on_temporal("doomed", namespace, script_job(busybox, "sleep 300")))
    eventually(lambda: sj_status(kubectl, "doomed", namespace).get("backendRef"),
               what="the schedule")  # fmt: skip
    schedule_id = sj_status(kubectl, "doomed", namespace)["backendRef"]["scheduleId"]
    run_now(kubectl, "doomed", namespace)
    (job,) = eventually(lambda: owned_jobs(kubectl, namespace, "doomed"), timeout=RUN_SECONDS,
                        what="the doomed run's Job")  # fmt: skip
    kubectl.run("delete", "scheduledjob", "doomed", "-n", namespace, "--wait=false")
    eventually(lambda: job_gone(kubectl, namespace, job["metadata"]["name"]), timeout=90,
               what="the Job garbage-collected with its object")  # fmt: skip
    eventually(lambda: not kubectl.run("get", "pods", "-n", namespace, "-l",
                                       f"job-name={job['metadata']['name']}", "-o",
                                       "name").stdout.strip(),
               timeout=90, what="its Pods gone")  # fmt: skip
    handle = temporal.client.get_schedule_handle(schedule_id)

    def schedule_gone() -> bool:
        try:
            temporal.run(lambda: handle.describe())
        except RPCError:
            return True
        return False

    eventually(schedule_gone, timeout=60, what="the schedule deleted by the finalizer")

    skipped = eventually(lambda: sj_status(kubectl, "skipping", namespace).get("skippedRuns"),
                         timeout=RUN_SECONDS, what="an overlap skip counted")  # fmt: skip
    assert skipped >= 1
    jobs = sorted(owned_jobs(kubectl, namespace, "skipping"),
                  key=lambda j: j["metadata"]["creationTimestamp"])  # fmt: skip
    for earlier, later in itertools.pairwise(jobs):
        ended = parse_time(earlier["status"].get("completionTime"))
        assert ended is not None, "a second Job while the first still ran"
        assert parse_time(later["metadata"]["creationTimestamp"]) >= ended - timedelta(seconds=1)


def test_a_run_no_worker_takes_up_says_so_and_runs_once_one_does(
    stack: LocalStack, kubectl: Kubectl, namespace: str, sundial_worker: OperatorProcess,
) -> None:  # fmt: skip
    """What a Temporal user cannot see: a run Temporal started that waits for a worker.
    With the worker stopped, the run shows WorkerUnavailable after startGrace; a worker
    back takes it up, and it runs, once."""
    kubectl.apply(job_on_temporal("orphan", namespace, script_job(stack.images["busybox"],
                                  "exit 0"), monitoring={"startGrace": "10s"}))  # fmt: skip
    eventually(lambda: sj_status(kubectl, "orphan", namespace).get("backendRef"),
               what="the schedule")  # fmt: skip
    sundial_worker.stop()
    try:
        run_now(kubectl, "orphan", namespace)

        def waiting() -> dict[str, Any]:
            runs = sj_status(kubectl, "orphan", namespace).get("recentRuns", [])
            assert runs, "no run yet"
            assert runs[-1].get("reason") == "WorkerUnavailable", runs[-1]
            return dict(runs[-1])

        run = eventually(waiting, timeout=90, what="the run waiting for a worker")
        assert run["result"] == "Running", run
        assert owned_jobs(kubectl, namespace, "orphan") == []
    finally:
        sundial_worker.start()
    ended = eventually(lambda: ended_run(kubectl, "orphan", namespace), timeout=RUN_SECONDS,
                       what="the run, taken up by the worker back")  # fmt: skip
    assert ended["result"] == "Succeeded", ended
    assert created_jobs(stack, namespace) == [ended["jobName"]]
