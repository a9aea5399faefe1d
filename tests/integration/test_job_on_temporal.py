"""A container job on temporal (issue 27): `backend: temporal` with `spec.job`. The
Temporal Schedule starts Sundial's RunJob workflow; Sundial's worker (a real process,
`python -m sundial worker`) makes the Job on the real node, waits for it and reports its
outcome. Most runs are started with run-now requests (a trigger of the object's own
schedule) so that few tests wait for a slot; ground truth is the apiserver's audit log and
Temporal's own record of the workflows.

Every scenario starts at once on the shared timeline (tests/shared_timeline.py), each in a
namespace of its own, so that their waits overlap (the flip's minute slots are the longest)
with one another's and the other modules' there; each test joins its own scenario. The
two that stop or kill a worker run their own worker and operator (a shard, a schedule-id
prefix, a task queue of their own), so no other scenario's run meets that fault."""

from __future__ import annotations

import itertools
import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError

from localstack import LocalStack
from shared_timeline import Servers
from sundial.planning.run_job import run_job_name
from support import (
    OPERATOR_NAMESPACE,
    Background,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    audit_events,
    conditions_of,
    created_jobs,
    deleted_jobs,
    eventually,
    faulted_operator,
    in_shard,
    job_slots,
    no_retry_job,
    one_create_per_job,
    owned_jobs,
    parse_time,
    schedule_executions,
    service_account_kubeconfig,
    sj_status,
    temporal_connection,
    wait_until,
    worker_overlay_rbac,
)

pytestmark = pytest.mark.cluster

RUN_JOB = "sundial.RunJob"
SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
TASK_QUEUE = "sundial/jobs"  # the default schedule id prefix's (worker_task_queue)
# A run on the node: the worker takes it up, the kubelet pulls nothing (images are local),
# the Pod runs; generous for a loaded 2-core machine.
RUN_SECONDS = 120
HEARTBEAT_TIMEOUT_SECONDS = 30  # sundial.worker.workflows.HEARTBEAT_TIMEOUT
# Each answer of the apiserver to a slowed worker: long enough for the test to see the Job
# and cancel its run before the worker hears that it was made.
ANSWER_DELAY_SECONDS = 8
# A run that outlasts the next minute slot, for a switch made while it runs.
LONG_RUN_SECONDS = 75


SCENARIO_SECONDS = 480  # the longest, the flip: M1 up to 80 s away, three slots, settling


@contextmanager
def on_the_timeline(servers: Servers) -> Iterator[dict[str, Callable[[str], None]]]:
    """Every scenario, by test name, for the shared timeline (tests/shared_timeline.py),
    with the session's worker beside the session's operator. The two that stop or kill a
    worker have one of their own."""
    stack, kubectl, temporal = servers.stack, servers.kubectl, servers.temporal
    if not stack.with_node:
        yield {f"test_job_on_temporal[{case}]": needs_a_node for case in SCENARIOS}
        return
    worker = OperatorProcess.on(stack, "worker", args=("worker",))
    worker.start()
    try:
        yield {f"test_job_on_temporal[{case}]": partial(story, stack, kubectl, temporal)
               for case, story in SCENARIOS.items()}  # fmt: skip
    finally:
        worker.stop()


def needs_a_node(namespace: str) -> None:
    pytest.skip("a container job needs a node to run on")


@contextmanager
def own_worker(
    stack: LocalStack, kubectl: Kubectl, namespace: str, shard: str,
    worker_kubeconfig: Path | None = None, **settings: str,
) -> Iterator[tuple[OperatorProcess, str]]:  # fmt: skip
    """A worker of its own, and an operator serving `shard` (objects made in_shard) with
    schedule ids, hence a task queue, of their own (`<shard>/`): a worker stopped or
    killed here takes no other scenario's run. Its objects are deleted before the
    operator stops (their finalizers are its)."""
    prefix = f"{shard}/"
    operator = faulted_operator(stack, shard, shard, user=f"sundial-{shard}",
                                schedule_id_prefix=prefix, **settings)  # fmt: skip
    worker = OperatorProcess.on(stack, f"{shard}-worker", args=("worker",),
                                schedule_id_prefix=prefix, **settings)  # fmt: skip
    if worker_kubeconfig is not None:
        worker.env["KUBECONFIG"] = str(worker_kubeconfig)
    operator.start()
    worker.start()
    try:
        yield worker, shard
    finally:
        kubectl.run("delete", "scheduledjobs", "--all", "-n", namespace, "--timeout=90s",
                    check=False)  # fmt: skip
        worker.stop()
        operator.stop()


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


def outcomes(stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str) -> None:
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


def forged_runs(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
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


def job_gone(kubectl: Kubectl, namespace: str, name: str) -> bool:
    return kubectl.get("job", name, namespace) is None


def ended_by_temporal(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
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


def cancelled_while_made(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
    """A run cancelled while its Job is being made: the create has reached the apiserver
    (the Job exists) but its answer is still on the way back to the worker (its apiserver
    answers slowed). The run waits for the making to end, then deletes the Job: no Job
    outlives its cancelled run. (Before: the run ended Cancelled at once and its Job ran
    on.)"""
    api = stack.faults.apiserver_relay("made-slowly-api")
    kubeconfig = stack.faults.kubeconfig("sundial-made-slowly-worker", via=api)
    # Resync as the session's operator does: a run whose Job is gone shows its end at the
    # next description of its schedule (nothing else wakes the object then).
    with own_worker(stack, kubectl, namespace, "made-slowly", worker_kubeconfig=kubeconfig,
                    temporal_resync_seconds="5") as (_, shard):  # fmt: skip
        kubectl.apply(in_shard(job_on_temporal("made", namespace, script_job(
            stack.images["busybox"], "sleep 300")), shard))  # fmt: skip
        eventually(lambda: sj_status(kubectl, "made", namespace).get("backendRef"),
                   what="the schedule")  # fmt: skip
        with api.slowed(ANSWER_DELAY_SECONDS, "answer"):
            run_now(kubectl, "made", namespace)
            (job,) = eventually(lambda: owned_jobs(kubectl, namespace, "made"), interval=0.2,
                                timeout=RUN_SECONDS, what="the run's Job")  # fmt: skip
            handle = temporal.client.get_workflow_handle(
                job["metadata"]["annotations"]["sundial.dev/workflow-id"])  # fmt: skip
            temporal.run(lambda: handle.cancel())
            eventually(lambda: job_gone(kubectl, namespace, job["metadata"]["name"]), timeout=90,
                       what="the Job of the run cancelled while it was made")  # fmt: skip
        # The run ends once the worker hears its delete was done (an answer slowed too).
        eventually(lambda: temporal.run(lambda: handle.describe()).status
                   == WorkflowExecutionStatus.CANCELED, timeout=60,
                   what="the run cancelled in Temporal")  # fmt: skip
        run = eventually(lambda: ended_run(kubectl, "made", namespace), timeout=60,
                         what="the cancelled run in status")  # fmt: skip
        assert run["result"] == "Cancelled", run
        assert created_jobs(stack, namespace) == [job["metadata"]["name"]]


def worker_killed(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
    """A worker SIGKILLed while it waits on a run's Job: restarted, it (or another) waits on
    the same Job again, and the run ends with it; one Job made. A worker of the scenario's
    own, so the kill reaches no other scenario's run."""
    with own_worker(stack, kubectl, namespace, "worker-killed") as (worker, shard):
        kubectl.apply(in_shard(job_on_temporal("steady", namespace, script_job(
            stack.images["busybox"], "sleep 25")), shard))  # fmt: skip
        eventually(lambda: sj_status(kubectl, "steady", namespace).get("backendRef"),
                   what="the schedule")  # fmt: skip
        run_now(kubectl, "steady", namespace)
        eventually(lambda: owned_jobs(kubectl, namespace, "steady"), timeout=RUN_SECONDS,
                   what="the run's Job")  # fmt: skip
        worker.signal(signal.SIGKILL)
        worker.start()
        run = eventually(lambda: ended_run(kubectl, "steady", namespace), timeout=RUN_SECONDS,
                         what="the run, waited on by the restarted worker")  # fmt: skip
        assert run["result"] == "Succeeded", run
        assert created_jobs(stack, namespace) == [run["jobName"]]


def worker_stalled(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
    """The worker's connection to Temporal stalls (a relay holds every byte) for longer
    than the wait's heartbeat timeout while its run's Job runs, and its connections to the
    apiserver are reset every ten seconds: Temporal times the wait's
    attempt out and retries it; when the stall ends the old attempt learns it is gone
    (its heartbeat: not found) and the new one waits on the same Job. The Job is not
    deleted (the run is not over: Temporal's own record says so), the run succeeds, and one
    Job was made (the audit log)."""
    relay = stack.faults.temporal_relay("worker-stall")
    api = stack.faults.apiserver_relay("worker-stall-api")
    kubeconfig = stack.faults.kubeconfig("sundial-worker-stall-worker", via=api)
    connection = {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ClusterTemporalConnection",
        "metadata": {"name": "worker-stall"},
        "spec": {"address": relay.address, "namespace": "default", "namespaceSelector": {}},
    }  # fmt: skip
    kubectl.apply(connection)
    try:
        with own_worker(stack, kubectl, namespace, "worker-stall", worker_kubeconfig=kubeconfig,
                        default_connection="worker-stall") as (_, shard):  # fmt: skip
            kubectl.apply(in_shard(job_on_temporal("stalled", namespace, script_job(
                stack.images["busybox"], "sleep 45")), shard))  # fmt: skip
            eventually(lambda: sj_status(kubectl, "stalled", namespace).get("backendRef"),
                       what="the schedule")  # fmt: skip
            run_now(kubectl, "stalled", namespace)
            (job,) = eventually(lambda: owned_jobs(kubectl, namespace, "stalled"),
                                timeout=RUN_SECONDS, what="the run's Job")  # fmt: skip
            with relay.stalled():
                # Its reads of the Job meanwhile: connections reset under them.
                for _ in range(4):
                    time.sleep((HEARTBEAT_TIMEOUT_SECONDS + 10) / 4)
                    api.cut()
            run = eventually(lambda: ended_run(kubectl, "stalled", namespace),
                             timeout=RUN_SECONDS, what="the run, after the stall")  # fmt: skip
            assert run["result"] == "Succeeded", run
            assert created_jobs(stack, namespace) == [job["metadata"]["name"]]
            assert deleted_jobs(stack, namespace) == [], "the running run's Job was deleted"
            handle = temporal.client.get_workflow_handle(run["workflowId"])
            described = temporal.run(lambda: handle.describe())
            assert described.status == WorkflowExecutionStatus.COMPLETED
    finally:
        kubectl.run("delete", "clustertemporalconnection", "worker-stall", "--wait=false",
                    check=False)  # fmt: skip


def backfill_and_suspend(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
    """The day-2 verbs, unchanged: a backfill of a container job's last three hourly slots
    is three Jobs, one for each slot (the audit log), listed as backfilled, never late or
    missed; suspend with a note pauses the schedule with it."""
    kubectl.apply(job_on_temporal("hourly", namespace, script_job(stack.images["busybox"],
                                  "exit 0"), schedule="0 * * * *"))  # fmt: skip
    eventually(lambda: sj_status(kubectl, "hourly", namespace).get("backendRef"),
               what="the schedule")  # fmt: skip
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    slots = [end - timedelta(hours=hours) for hours in (2, 1, 0)]
    kubectl.run("annotate", "--overwrite", "-n", namespace, "scheduledjob/hourly",
                f"sundial.dev/backfill=three;{iso_slot(slots[0] - timedelta(minutes=30))};"
                f"{iso_slot(end + timedelta(seconds=1))}")  # fmt: skip

    def backfilled() -> list[dict[str, Any]]:
        runs = [r for r in sj_status(kubectl, "hourly", namespace).get("recentRuns", [])
                if r.get("requested") == "Backfill/three" and "completionTime" in r]  # fmt: skip
        assert len(runs) == len(slots), runs
        return runs

    runs = eventually(backfilled, timeout=RUN_SECONDS, what="three backfilled runs ended")
    assert sorted(r["scheduledTime"] for r in runs) == [iso_slot(slot) for slot in slots]
    assert all(r["result"] == "Succeeded" and "late" not in r for r in runs), runs
    made = created_jobs(stack, namespace)
    assert sorted(made) == sorted(r["jobName"] for r in runs), made
    by_slot = sorted(parse_time(j["metadata"]["annotations"][SCHEDULED])
                     for j in owned_jobs(kubectl, namespace, "hourly"))  # fmt: skip
    assert by_slot == slots
    status = sj_status(kubectl, "hourly", namespace)
    assert not status.get("missedRuns"), status
    request = next(r for r in status["requests"] if r["id"] == "three")
    assert (request["outcome"], request["runsRequested"]) == ("Done", 3), request

    suspend = '{"spec": {"suspend": true, "suspendNote": "db migration, ask #data"}}'
    kubectl.run("patch", "scheduledjob", "hourly", "-n", namespace, "--type=merge", "-p", suspend)
    schedule_id = status["backendRef"]["scheduleId"]

    def paused_with_the_note() -> bool:
        described = temporal.run(lambda: temporal.client.get_schedule_handle(
            schedule_id).describe())  # fmt: skip
        state = described.schedule.state
        return state.paused and "db migration, ask #data" in (state.note or "")

    eventually(paused_with_the_note, timeout=60, what="the schedule paused with the note")


SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def flip(stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str) -> None:
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


def switch_mid_run(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
    """A switch while the old backend's Job is still running, in both directions, under
    Forbid: that Job runs to its end (never deleted; on temporal its workflow completes),
    Switching says WaitingForRunningJob meanwhile, and the new backend starts nothing until
    the Job has ended: the slots in the wait are not run; the first slot after it runs on
    the new backend. One Job per slot (the audit log); the CronJob is created only after
    the Job's end (its audit-log create), the schedule starts nothing before it (Temporal's
    listing)."""
    busybox = stack.images["busybox"]
    names = {"to-kubernetes": ("temporal", "kubernetes"), "to-temporal": ("kubernetes", "temporal")}

    def apply(name: str, backend: str) -> None:
        kubectl.apply({
            "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"backend": backend, "schedule": "* * * * *", "concurrencyPolicy": "Forbid",
                     "successfulRunsHistoryLimit": 10,
                     "job": script_job(busybox, f"sleep {LONG_RUN_SECONDS}")},
        })  # fmt: skip

    def first_job(name: str) -> dict[str, Any]:
        jobs = owned_jobs(kubectl, namespace, name)
        assert jobs, f"{name}: no Job yet"
        assert jobs[0].get("status", {}).get("active"), f"{name}: its Job is not running yet"
        return jobs[0]

    now = datetime.now(UTC)
    m1 = now.replace(second=0, microsecond=0) + timedelta(minutes=1 if now.second < 40 else 2)
    for name, (old, _) in names.items():
        apply(name, old)
    first = {name: eventually(partial(first_job, name), timeout=(m1 - now).total_seconds()
                              + RUN_SECONDS, what=f"{name}'s first Job running")
             for name in names}  # fmt: skip
    schedule_id = sj_status(kubectl, "to-kubernetes", namespace)["backendRef"]["scheduleId"]
    for name, (_, new) in names.items():
        apply(name, new)

    def waiting(name: str) -> bool:
        switching = conditions_of(sj_status(kubectl, name, namespace)).get("Switching", {})
        assert switching.get("reason") == "WaitingForRunningJob", (name, switching)
        return True

    for name in names:
        eventually(partial(waiting, name), timeout=60, what=f"{name} waiting for its Job")
        # Seen while that Job still runs: a switch that did not wait would not say so.
        assert first_job(name)["metadata"]["uid"] == first[name]["metadata"]["uid"]

    def ended(name: str) -> datetime:
        job = kubectl.get("job", first[name]["metadata"]["name"], namespace)
        assert job, f"{name}'s first Job is gone"
        status = job.get("status", {})
        assert status.get("succeeded") == 1, (name, status)
        return parse_time(status["completionTime"])

    ends = {name: eventually(partial(ended, name), timeout=LONG_RUN_SECONDS + RUN_SECONDS,
                             what=f"{name}'s first Job ran to its end")
            for name in names}  # fmt: skip

    def next_run(name: str) -> tuple[datetime, str]:
        later = sorted((slot, job) for slot, job in job_slots(kubectl, namespace, name).items()
                       if slot > ends[name])  # fmt: skip
        assert later, f"{name}: no slot run after the first Job ended"
        return later[0]

    after = {name: eventually(partial(next_run, name), timeout=60 + RUN_SECONDS,
                              what=f"{name}'s first run on its new backend")
             for name in names}  # fmt: skip
    for name, (_, new) in names.items():
        slots = job_slots(kubectl, namespace, name)
        first_slot, first_name = parse_time(first[name]["metadata"]["annotations"][SCHEDULED]), \
            first[name]["metadata"]["name"]  # fmt: skip
        # Nothing ran in the wait: the slots between the first Job's and the next run.
        assert sorted(slots) == [first_slot, after[name][0]], (name, slots, ends[name])
        assert slots[first_slot] == first_name, (name, slots)
        by_new = after[name][1]
        if new == "kubernetes":
            assert by_new == f"{name}-{int(after[name][0].timestamp()) // 60}", by_new
        else:
            assert by_new.startswith(f"{name}-t"), by_new
        eventually(partial(one_create_per_job, stack, kubectl, namespace, name), timeout=30,
                   what=f"{name}: the audit log's creates")  # fmt: skip
        assert first_name not in deleted_jobs(stack, namespace), f"{first_name} was deleted"
    # The CronJob made back only once the worker's Job had ended (audit log, apiserver time;
    # the switch's dry run, which stores nothing, aside).
    (made,) = [e for e in audit_events(stack.log_dir / "audit.log")
               if e.get("verb") == "create" and e["objectRef"].get("resource") == "cronjobs"
               and e["objectRef"].get("namespace") == namespace
               and e["objectRef"].get("name") == "to-kubernetes"
               and e.get("responseStatus", {}).get("code") == 201
               and "dryRun" not in e.get("requestURI", "")]  # fmt: skip
    assert parse_time(made["stageTimestamp"]) >= ends["to-kubernetes"] - timedelta(seconds=1)
    # On Temporal: the worker's run completed although its schedule was deleted under it.
    (run,) = schedule_executions(temporal, schedule_id)
    assert run.status == WorkflowExecutionStatus.COMPLETED, run.status
    # The new schedule started nothing before the CronJob's Job had ended.
    started = schedule_executions(
        temporal, sj_status(kubectl, "to-temporal", namespace)["backendRef"]["scheduleId"]
    )
    assert [r.start_time for r in started if r.start_time < ends["to-temporal"]] == [], started


def overlap_and_deletion(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
    """Forbid is Temporal's skip: a run that outlasts the interval makes the next actions
    skipped, counted as OverlapSkipped, and no second Job while it runs. BufferOne: the
    next slot waits and starts as soon as the run ends; the ones after it are skipped. Deleting the
    object mid-run takes its Job, its Pods and its schedule along."""
    busybox = stack.images["busybox"]
    kubectl.apply(job_on_temporal("skipping", namespace, script_job(busybox, "sleep 45"),
                                  schedule=None, interval={"every": "20s"},
                                  concurrencyPolicy="Forbid"))  # fmt: skip
    kubectl.apply(job_on_temporal("buffering", namespace, script_job(busybox, "sleep 30"),
                                  schedule=None, interval={"every": "12s"},
                                  concurrencyPolicy="BufferOne"))  # fmt: skip
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
    eventually(lambda: not kubectl.list("pods", namespace,
                                        labels=f"job-name={job['metadata']['name']}"),
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

    # BufferOne: the slot that came while a run went is started as soon as it ends (not at
    # a later slot), one Job at a time; the slots after it are skipped.
    def buffered() -> tuple[dict[str, Any], dict[str, Any]]:
        made = sorted(owned_jobs(kubectl, namespace, "buffering"),
                      key=lambda j: j["metadata"]["creationTimestamp"])  # fmt: skip
        assert len(made) >= 2, "one run so far"
        assert made[0]["status"].get("completionTime"), "the first still runs"
        return made[0], made[1]

    first, second = eventually(buffered, timeout=RUN_SECONDS, what="buffering's second run")
    ended = parse_time(first["status"]["completionTime"])
    made_at = parse_time(second["metadata"]["creationTimestamp"])
    slot = parse_time(second["metadata"]["annotations"][SCHEDULED])
    assert ended is not None
    assert made_at is not None
    assert slot is not None
    # Not before the first ended; soon after (the worker looks every 5 s).
    assert ended - timedelta(seconds=1) <= made_at <= ended + timedelta(seconds=30), (
        "the buffered run did not follow the first", ended, made_at)  # fmt: skip
    # Its slot is older than one interval: the buffered slot, not a fresh one.
    assert made_at - slot > timedelta(seconds=12), ("it was not buffered", slot, made_at)
    # The slots beyond the one buffered are Temporal's overlap skips (its own counter),
    # and Sundial's skippedRuns.
    buffering_id = sj_status(kubectl, "buffering", namespace)["backendRef"]["scheduleId"]

    def skipped_in_temporal() -> int:
        described = temporal.run(lambda: temporal.client.get_schedule_handle(
            buffering_id).describe())  # fmt: skip
        return described.info.num_actions_skipped_overlap

    eventually(skipped_in_temporal, timeout=60, what="BufferOne's extra slots skipped")
    eventually(lambda: sj_status(kubectl, "buffering", namespace).get("skippedRuns"),
               timeout=60, what="the skips counted")  # fmt: skip


# The catch-up pair's slots: while the worker is down (OUTAGE seconds), Temporal starts
# runs that wait; "within" may wait ten minutes, "beyond" ten seconds.
EVERY_SECONDS = 15
OUTAGE_SECONDS = 50
ADMITTED_LABEL = "sundial-test.dev/worker-admitted"
WITHIN, BEYOND = "catchup-within", "catchup-beyond"


def worker_outage(
    stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, namespace: str
) -> None:
    """What a Temporal user cannot see: a run Temporal started that waits for a worker.
    With the worker stopped, the run shows WorkerUnavailable after startGrace; a worker
    back takes it up, and it runs, once. The catch-up window (startingDeadlineSeconds)
    holds for a worker as for Temporal's scheduler: runs that waited past it are not run,
    and their slots are missed (WorkerUnavailable); within it they run late, not missed.
    The worker here runs with a ServiceAccount's token bound exactly as the install binds
    the worker's (its ClusterRole and the base's Role): its rights suffice for every run,
    and the apiserver refuses it what it must not do. A run started by its own schedule
    whose connection no longer admits the namespace when a worker takes it up (the
    namespace unlabelled meanwhile) makes no Job: the worker asks the connection itself."""
    config = worker_account(stack, kubectl, namespace, "worker-outage")
    admitting = f"admits-{namespace}"[:63]
    kubectl.run("label", "namespace", namespace, f"{ADMITTED_LABEL}=yes")
    kubectl.apply(
        temporal_connection(
            admitting,
            address=temporal.address,
            namespace="default",
            namespaceSelector={"matchLabels": {ADMITTED_LABEL: "yes"}},
        )
    )
    with own_worker(stack, kubectl, namespace, "worker-outage",
                    worker_kubeconfig=config) as (worker, shard):  # fmt: skip
        busybox = stack.images["busybox"]
        kubectl.apply(in_shard(job_on_temporal("orphan", namespace, script_job(
            busybox, "exit 0"), monitoring={"startGrace": "10s"}), shard))  # fmt: skip
        for name, window in ((WITHIN, 600), (BEYOND, 10)):
            kubectl.apply(in_shard(job_on_temporal(
                name, namespace, script_job(busybox, "exit 0"), schedule=None,
                interval={"every": f"{EVERY_SECONDS}s"}, concurrencyPolicy="Allow",
                startingDeadlineSeconds=window,
                monitoring={"startGrace": "10s", "recentRunsLimit": 30},
            ), shard))  # fmt: skip
        kubectl.apply(in_shard(job_on_temporal("revoked", namespace, script_job(
            busybox, "exit 0"), temporalConnectionRef={
                "kind": "ClusterTemporalConnection", "name": admitting}), shard))  # fmt: skip
        for name in ("orphan", WITHIN, BEYOND, "revoked"):
            eventually(lambda name=name: sj_status(kubectl, name, namespace).get("backendRef"),
                       what=f"{name}'s schedule")  # fmt: skip
        worker.stop()
        down = datetime.now(UTC)
        try:
            run_now(kubectl, "orphan", namespace)
            run_now(kubectl, "revoked", namespace)
            revoked_id = f"{shard}/{namespace}/revoked"
            (waiting_run,) = eventually(lambda: schedule_runs(temporal, revoked_id).items(),
                                        what="revoked's run started")  # fmt: skip
            # The worker reads the namespace's labels itself when it takes the run up.
            kubectl.run("label", "namespace", namespace, f"{ADMITTED_LABEL}-")

            def waiting() -> dict[str, Any]:
                runs = sj_status(kubectl, "orphan", namespace).get("recentRuns", [])
                assert runs, "no run yet"
                assert runs[-1].get("reason") == "WorkerUnavailable", runs[-1]
                return dict(runs[-1])

            run = eventually(waiting, timeout=90, what="the run waiting for a worker")
            assert run["result"] == "Running", run
            assert owned_jobs(kubectl, namespace, "orphan") == []
            wait_until(down + timedelta(seconds=OUTAGE_SECONDS))
        finally:
            worker.start()
        up = datetime.now(UTC)
        ended = eventually(lambda: ended_run(kubectl, "orphan", namespace), timeout=RUN_SECONDS,
                           what="the run, taken up by the worker back")  # fmt: skip
        assert ended["result"] == "Succeeded", ended
        made = created_jobs(stack, namespace)
        assert [job for job in made if job.startswith("orphan-")] == [ended["jobName"]]
        # The run its schedule started before the revocation: refused by the worker.
        refused = eventually(lambda: failure_type(temporal, waiting_run[0]), timeout=RUN_SECONDS,
                             what="revoked's run ended")  # fmt: skip
        assert refused == "ConnectionNotAllowed", refused
        assert not [job for job in created_jobs(stack, namespace) if job.startswith("revoked-")]

        # Temporal's own record of the runs started while no worker was there.
        def outage_runs(name: str) -> dict[str, Any]:
            listed = schedule_runs(temporal, f"{shard}/{namespace}/{name}")
            return {wid: run for wid, run in listed.items()
                    if down < run.start_time < up - timedelta(seconds=15)}  # fmt: skip

        beyond = eventually(lambda: settled(outage_runs(BEYOND), 2), timeout=RUN_SECONDS,
                            what="beyond's outage runs ended")  # fmt: skip
        within = eventually(lambda: settled(outage_runs(WITHIN), 2), timeout=RUN_SECONDS,
                            what="within's outage runs ended")  # fmt: skip
        made = created_jobs(stack, namespace)
        for wid, run in beyond.items():
            assert run.status == WorkflowExecutionStatus.FAILED, (wid, run.status)
            assert failure_type(temporal, wid) == "WorkerUnavailable", wid
            assert run_job_name(BEYOND, wid, run.run_id) not in made, "a run past the window ran"
        for wid, run in within.items():
            assert run.status == WorkflowExecutionStatus.COMPLETED, (wid, run.status)
            assert made.count(run_job_name(WITHIN, wid, run.run_id)) == 1, wid

        # Sundial's status says the same: beyond's slots missed with the reason, once each;
        # within's runs late, none missed.
        slots = {iso_slot(run.scheduled) for run in beyond.values()}

        def beyond_missed() -> set[str]:
            status = sj_status(kubectl, BEYOND, namespace)
            missed = {m["scheduledTime"] for m in status.get("recentMissedRuns", [])
                      if m["reason"] == "WorkerUnavailable"}  # fmt: skip
            assert slots <= missed, (slots, missed)
            return missed

        missed = eventually(beyond_missed, timeout=60, what="beyond's slots missed")
        status = sj_status(kubectl, BEYOND, namespace)
        assert status["missedRuns"] == len(missed), status
        said = {(e["involvedObject"]["name"], e["reason"]) for e in kubectl.events(namespace)}
        assert (BEYOND, "RunMissed") in said, said
        assert not status.get("consecutiveFailures"), "a run that never ran is no failure"

        def within_ran_late() -> list[dict[str, Any]]:
            runs = {r.get("workflowId"): r for r in sj_status(kubectl, WITHIN, namespace).get(
                "recentRuns", [])}  # fmt: skip
            shown = [runs.get(wid) or {} for wid in within]
            assert all(r.get("result") == "Succeeded" and r.get("late") for r in shown), shown
            return shown

        eventually(within_ran_late, timeout=60, what="within's outage runs succeeded, late")
        assert not sj_status(kubectl, WITHIN, namespace).get("missedRuns")


WORKER_MUST_NOT = [
    ("create", "cronjobs"), ("update", "scheduledjobs"), ("patch", "scheduledjobs/status"),
    ("create", "pods"), ("delete", "pods"), ("list", "secrets"), ("create", "leases"),
]  # fmt: skip
WORKER_MAY = [("create", "jobs"), ("delete", "jobs"), ("get", "scheduledjobs"), ("list", "pods")]


def worker_account(stack: LocalStack, kubectl: Kubectl, namespace: str, name: str) -> Path:
    """A kubeconfig with a token of a ServiceAccount bound as the install binds the
    worker's (manifests/overlays/cluster-wide, renamed); what it may and may not do in
    `namespace`, asked of the apiserver (SubjectAccessReview through `kubectl auth can-i`)."""
    account = f"sundial-worker-{name}"
    kubectl.run("create", "serviceaccount", account, "-n", OPERATOR_NAMESPACE)
    documents = worker_overlay_rbac(kubectl, suffix=name, account=account)
    kubectl.run("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in documents))
    who = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{account}"
    for verb, resource in [*WORKER_MAY, *WORKER_MUST_NOT]:
        answer = kubectl.run("auth", "can-i", verb, resource, "-n", namespace, "--as", who,
                             check=False).stdout.strip()  # fmt: skip
        assert answer == ("yes" if (verb, resource) in WORKER_MAY else "no"), (verb, resource)
    path = stack.state_dir / "faults" / f"{account}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    return service_account_kubeconfig(kubectl, stack.apiserver_url, stack.pki.ca_cert, path,
                                      account=account)  # fmt: skip


@dataclass(frozen=True)
class ScheduleRun:
    run_id: str
    status: WorkflowExecutionStatus | None
    start_time: datetime
    scheduled: datetime


def schedule_runs(temporal: TemporalSide, schedule_id: str) -> dict[str, ScheduleRun]:
    """The workflows a schedule started, as Temporal lists them."""
    query = f'TemporalScheduledById = "{schedule_id}"'

    async def listing() -> dict[str, ScheduleRun]:
        found: dict[str, ScheduleRun] = {}
        async for execution in temporal.client.list_workflows(query):
            scheduled = execution.typed_search_attributes.get(SCHEDULED_START_TIME)
            found[execution.id] = ScheduleRun(execution.run_id, execution.status,
                                              execution.start_time, scheduled or
                                              execution.start_time)  # fmt: skip
        return found

    return temporal.run(listing)


def settled(runs: dict[str, ScheduleRun], at_least: int) -> dict[str, ScheduleRun]:
    assert len(runs) >= at_least, f"{len(runs)} runs in the outage"
    going = [wid for wid, run in runs.items() if run.status == WorkflowExecutionStatus.RUNNING]
    assert not going, going
    return runs


def failure_type(temporal: TemporalSide, workflow_id: str) -> str:
    try:
        temporal.run(lambda: temporal.client.get_workflow_handle(workflow_id).result())
    except WorkflowFailureError as error:
        return str(getattr(error.cause, "type", None) or error.cause)
    return "completed"


def iso_slot(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# ---- the test: one per scenario, each joins its own ------------------------------------

SCENARIOS: dict[str, Callable[[LocalStack, Kubectl, TemporalSide, str], None]] = {
    "a_container_job_runs_on_temporal_and_reports_like_any_run": outcomes,
    "a_run_of_sundials_workflow_not_started_by_the_schedule_creates_nothing": forged_runs,
    "a_run_temporal_ends_takes_its_job_and_pods_along": ended_by_temporal,
    "a_run_cancelled_while_its_job_is_made_deletes_the_job": cancelled_while_made,
    "a_worker_killed_mid_run_leaves_one_job_waited_on_again": worker_killed,
    "a_worker_cut_off_from_temporal_past_the_heartbeat_leaves_its_job_running": worker_stalled,
    "backfill_and_suspend_with_a_note_work_on_a_job_on_temporal": backfill_and_suspend,
    "flipping_backend_with_the_same_job_runs_each_slot_once": flip,
    "a_switch_waits_for_the_old_backends_running_job_in_both_directions": switch_mid_run,
    "overlap_skip_buffer_one_and_a_deleted_object_taking_its_run_along": overlap_and_deletion,
    "a_run_no_worker_takes_up_says_so_and_the_catchup_window_holds": worker_outage,
}


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
@pytest.mark.parametrize("case", list(SCENARIOS))
def test_job_on_temporal(case: str, scenario: Background) -> None:
    scenario.join(SCENARIO_SECONDS)
