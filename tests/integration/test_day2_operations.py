"""Day-2 operations (issue 12) through `kubectl sundial`, found by kubectl on PATH, against
the real stack: run now, backfill, suspend with a note, resume, status, list, on both
backends; repeated ids, the backfill cap, Forbid, bad input, and an operator restart
between a request and its acknowledgement."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    TemporalSide,
    conditions_of,
    consistently,
    eventually,
    kubectl_sundial,
    kubernetes_scheduledjob,
    no_retry_job,
    owned_jobs,
    parse_time,
    ready,
    sj_status,
    user_written,
)
from support import temporal_scheduledjob as temporal_sj
from temporal_workflows import TASK_QUEUE

pytestmark = pytest.mark.cluster

SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"
REQUEST = "sundial.dev/request"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def plugin(kubectl: Kubectl, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    return kubectl_sundial(kubectl, *args, "-n", namespace)


def requested_jobs(kubectl: Kubectl, namespace: str, owner: str, label: str) -> list[Any]:
    return [j for j in owned_jobs(kubectl, namespace, owner)
            if j["metadata"].get("annotations", {}).get(REQUEST) == label]  # fmt: skip


def entry(kubectl: Kubectl, name: str, namespace: str, kind: str, request_id: str) -> Any:
    sj = kubectl.get("scheduledjob", name, namespace) or {}
    return next((e for e in sj.get("status", {}).get("requests", [])
                 if (e["kind"], e["id"]) == (kind, request_id)), None)  # fmt: skip


def applied_ready(
    kubectl: Kubectl, namespace: str, name: str, image: str, script: str, **spec: Any
) -> None:
    spec = {"schedule": "0 * * * *", "successfulRunsHistoryLimit": 20, **spec}
    kubectl.apply(kubernetes_scheduledjob(name, namespace, no_retry_job(image, script), **spec))
    eventually(lambda: ready(kubectl, name, namespace), what=f"{name} Ready")


def last_hours(count: int) -> tuple[datetime, datetime, list[datetime]]:
    """A range holding exactly the last `count` hourly slots."""
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    slots = [end - timedelta(hours=i) for i in reversed(range(count))]
    return slots[0] - timedelta(minutes=30), end + timedelta(seconds=1), slots


@pytest.mark.timeout(600)
def backfill_over_the_cap(kubectl: Kubectl, namespace: str, end: datetime) -> dict[str, Any]:
    """A 200-hour backfill of `hourly` written by hand (past the plugin's own check): the
    operator's entry for it, which must say Refused."""
    kubectl.run("annotate", "--overwrite", "scheduledjob", "hourly", "-n", namespace,
                f"sundial.dev/backfill=huge;{iso(end - timedelta(hours=200))};"
                f"{iso(end)}")  # fmt: skip
    refused = eventually(lambda: entry(kubectl, "hourly", namespace, "Backfill", "huge"),
                         what="huge refused")  # fmt: skip
    assert refused["outcome"] == "Refused", refused
    return refused


def test_run_now_and_backfill_on_kubernetes_each_once(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    busybox = stack.images["busybox"]
    applied_ready(kubectl, namespace, "hourly", busybox, "sleep 1", concurrencyPolicy="Allow")

    # run now: one Job, the CronJob its controller, acknowledged.
    done = plugin(kubectl, namespace, "run", "hourly", "--id", "first")
    assert done.returncode == 0, done.stderr
    assert "RunNow first: Done" in done.stdout, done.stdout
    made = requested_jobs(kubectl, namespace, "hourly", "RunNow/first")
    assert len(made) == 1, made
    owner = made[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["controller"]) == ("CronJob", True)
    assert SCHEDULED in made[0]["metadata"]["annotations"]
    # The same id again: acknowledged at once, nothing made twice.
    again = plugin(kubectl, namespace, "run", "hourly", "--id", "first")
    assert again.returncode == 0, again.stderr
    assert len(requested_jobs(kubectl, namespace, "hourly", "RunNow/first")) == 1

    # backfill of 5 slots: 5 Jobs for exactly those slots.
    start, end, slots = last_hours(5)
    done = plugin(kubectl, namespace, "backfill", "hourly", "--from", iso(start), "--to",
                  iso(end), "--id", "five")  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    made = requested_jobs(kubectl, namespace, "hourly", "Backfill/five")
    assert sorted(parse_time(j["metadata"]["annotations"][SCHEDULED]) for j in made) == slots

    # Its runs are listed as backfilled, never late, never missed.
    def backfilled() -> list[Any]:
        runs = (kubectl.get("scheduledjob", "hourly", namespace) or {}).get("status", {}).get(
            "recentRuns", [])  # fmt: skip
        found = [r for r in runs if r.get("requested") == "Backfill/five"
                 and "completionTime" in r]  # fmt: skip
        return found if len(found) == 5 else []

    runs = eventually(backfilled, timeout=120, what="5 backfilled runs ended")
    assert all("late" not in r and "startDelaySeconds" not in r for r in runs), runs
    sj = kubectl.get("scheduledjob", "hourly", namespace) or {}
    assert sj["status"].get("missedRuns", 0) == 0
    # The same backfill id written by hand again: nothing new.
    kubectl.run("annotate", "--overwrite", "scheduledjob", "hourly", "-n", namespace,
                f"sundial.dev/backfill=five;{iso(start)};{iso(end)}", "touch=1")  # fmt: skip
    assert len(requested_jobs(kubectl, namespace, "hourly", "Backfill/five")) == 5

    # Over the cap: the plugin refuses before writing; the operator refuses it too.
    version = sj["metadata"]["resourceVersion"]
    over = plugin(kubectl, namespace, "backfill", "hourly", "--from",
                  iso(end - timedelta(hours=200)), "--to", iso(end))  # fmt: skip
    assert over.returncode == 1
    assert "split it" in over.stderr, over.stderr
    refused = backfill_over_the_cap(kubectl, namespace, end)
    assert "split it" in refused["message"], refused
    assert requested_jobs(kubectl, namespace, "hourly", "Backfill/huge") == []
    reasons = [e["reason"] for e in kubectl.events(namespace, involvedObject_name="hourly")]
    assert "RequestRefused" in reasons, reasons

    # Bad input: a clear error, a non-zero exit, and no change.
    def asked() -> tuple[Any, Any]:
        return user_written(kubectl.get("scheduledjob", "hourly", namespace) or {})

    version = asked()
    for args, says in [
        (["backfill", "hourly", "--from", iso(end), "--to", iso(start)], "must be after"),
        (["backfill", "hourly", "--from", "yesterday", "--to", iso(end)], "RFC 3339"),
        (["backfill", "hourly", "--from", iso(start), "--to",
          iso(datetime.now(UTC) + timedelta(hours=2))], "future"),
        (["run", "no-such-job"], "no ScheduledJob 'no-such-job'"),
        (["run", "hourly", "--id", "not valid!"], "--id"),
    ]:  # fmt: skip
        result = plugin(kubectl, namespace, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert says in result.stderr, (args, result.stderr)
    assert asked() == version, "bad input changed the object"
    usage = plugin(kubectl, namespace, "backfill", "hourly")
    assert usage.returncode == 2
    assert "--from" in usage.stderr

    # status and list read it all.
    shown = plugin(kubectl, namespace, "status", "hourly")
    assert shown.returncode == 0, shown.stderr
    for text in ("Backend:   kubernetes", "Next runs:", "Backfill/five", "RunNow first: Done"):
        assert text in shown.stdout, (text, shown.stdout)
    as_json = json.loads(plugin(kubectl, namespace, "status", "hourly", "-o", "json").stdout)
    assert as_json["metadata"]["name"] == "hourly"
    listed = plugin(kubectl, namespace, "list", "-A")
    assert namespace in listed.stdout, listed.stdout
    assert "hourly" in listed.stdout, listed.stdout

    # suspend with a note: the CronJob is suspended, Ready and LAST RESULT say so; resume.
    paused = plugin(kubectl, namespace, "suspend", "hourly", "--note", "quarter close")
    assert paused.returncode == 0, paused.stderr
    assert "Argo CD" not in paused.stderr, "warned for an object Argo CD does not manage"

    def suspended() -> dict[str, Any] | None:
        cronjob = kubectl.get("cronjob", "hourly", namespace) or {}
        current = sj_status(kubectl, "hourly", namespace)
        message = conditions_of(current).get("Ready", {}).get("message", "")
        ok = cronjob.get("spec", {}).get("suspend") is True and "quarter close" in message
        return current if ok else None

    assert eventually(suspended, what="suspended with the note")["lastResult"] == "Suspended"
    assert plugin(kubectl, namespace, "resume", "hourly").returncode == 0
    eventually(lambda: (kubectl.get("cronjob", "hourly", namespace) or {})["spec"]["suspend"]
               is False, what="resumed")  # fmt: skip


@pytest.mark.timeout(300)
def test_run_now_under_forbid_waits_for_the_running_job(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    busybox = stack.images["busybox"]
    applied_ready(kubectl, namespace, "forbid", busybox, "sleep 15", schedule="0 0 1 1 *",
                  concurrencyPolicy="Forbid")  # fmt: skip
    assert plugin(kubectl, namespace, "run", "forbid", "--id", "a").returncode == 0
    eventually(lambda: [j for j in requested_jobs(kubectl, namespace, "forbid", "RunNow/a")
                        if j.get("status", {}).get("active")], what="a running")  # fmt: skip
    waiting = plugin(kubectl, namespace, "run", "forbid", "--id", "b")
    assert waiting.returncode == 0, waiting.stderr
    assert "RunNow b: InProgress" in waiting.stdout, waiting
    assert "waiting" in waiting.stdout, waiting
    assert requested_jobs(kubectl, namespace, "forbid", "RunNow/b") == []
    done = eventually(lambda: (e := entry(kubectl, "forbid", namespace, "RunNow", "b"))
                      and e["outcome"] == "Done" and e, timeout=90, what="b started")  # fmt: skip
    assert done["runsStarted"] == 1
    first = requested_jobs(kubectl, namespace, "forbid", "RunNow/a")[0]
    second = requested_jobs(kubectl, namespace, "forbid", "RunNow/b")[0]
    ended = parse_time(first["status"]["completionTime"])
    assert parse_time(second["metadata"]["creationTimestamp"]) >= ended.replace(microsecond=0)


@pytest.mark.timeout(300)
def test_a_request_made_while_the_operator_is_down_is_handled_once(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    busybox = stack.images.get("busybox", "busybox")  # its run is not awaited
    applied_ready(kubectl, namespace, "restarted", busybox, "true", schedule="0 0 1 1 *")
    operator.stop()
    try:
        # Nobody answers: the plugin says so and exits 3; the request stays on the object.
        unanswered = plugin(kubectl, namespace, "run", "restarted", "--id", "while-down",
                            "--timeout", "3")  # fmt: skip
        assert unanswered.returncode == 3, unanswered
        assert "did not acknowledge" in unanswered.stderr, unanswered.stderr
    finally:
        operator.start()
    eventually(lambda: (e := entry(kubectl, "restarted", namespace, "RunNow", "while-down"))
               and e["outcome"] == "Done", timeout=90, what="handled")  # fmt: skip
    operator.restart()
    eventually(lambda: ready(kubectl, "restarted", namespace), what="Ready after restart")
    assert len(requested_jobs(kubectl, namespace, "restarted", "RunNow/while-down")) == 1


@pytest.mark.timeout(300)
def test_a_backfill_half_run_on_kubernetes_is_not_run_again_after_a_switch_to_temporal(
    kubectl: Kubectl, stack: LocalStack, operator: OperatorProcess, temporal: TemporalSide,
    namespace: str,
) -> None:  # fmt: skip
    """A request is acted on once, whichever backend runs it (found by the soak: a backfill
    whose first slot had run on kubernetes ran again in full on Temporal after a switch).
    Under Forbid the kubernetes backend starts the first slot's Job and holds the rest; the
    object then moves to temporal, which must run only the slots not yet started. Ground
    truth: the Jobs on the apiserver and the schedule's own actions in Temporal."""
    temporal.ensure_worker()
    image = stack.images.get("busybox", "busybox")
    applied_ready(kubectl, namespace, "moving", image, "sleep 30")  # Forbid, the default
    start, end, slots = last_hours(3)
    kubectl.run("annotate", "scheduledjob", "moving", "-n", namespace,
                f"sundial.dev/backfill=half;{iso(start)};{iso(end)}")  # fmt: skip
    first = eventually(lambda: (e := entry(kubectl, "moving", namespace, "Backfill", "half"))
                       and e.get("runsStarted") == 1 and e, what="the first Job")  # fmt: skip
    assert first["outcome"] == "InProgress", first

    kubectl.apply(temporal_sj("moving", namespace, schedule="0 * * * *"))
    done = eventually(
        lambda: (e := entry(kubectl, "moving", namespace, "Backfill", "half"))
        and e["outcome"] == "Done" and e, timeout=120, what="the backfill done on temporal",
    )  # fmt: skip
    assert done["runsStarted"] == done["runsRequested"] == 3, done
    handle = temporal.client.get_schedule_handle(f"sundial/{namespace}/moving")

    def on_temporal() -> list[datetime]:
        actions = temporal.run(handle.describe).info.recent_actions
        return sorted(a.scheduled_at for a in actions if a.scheduled_at in slots)

    ran = eventually(lambda: len(on_temporal()) >= 2 and on_temporal(), timeout=120,
                     what="the slots not yet started, run by Temporal")  # fmt: skip
    consistently(lambda: on_temporal() == ran, 5)
    assert ran == slots[1:], f"Temporal ran {ran}; the first slot had run as a Job"
    jobs = requested_jobs(kubectl, namespace, "moving", "Backfill/half")
    assert [parse_time(j["metadata"]["annotations"][SCHEDULED]) for j in jobs] == slots[:1]


@pytest.mark.timeout(300)
def test_run_now_backfill_and_a_suspend_note_on_temporal(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    temporal.ensure_worker()
    kubectl.apply(temporal_sj("hourly", namespace, schedule="0 * * * *"))
    eventually(lambda: ready(kubectl, "hourly", namespace), what="temporal hourly Ready")
    handle = temporal.client.get_schedule_handle(f"sundial/{namespace}/hourly")

    began = datetime.now(UTC)

    def actions() -> list[Any]:
        """The schedule's actions but its own hourly slots (the test may cross an hour)."""
        return [a for a in temporal.run(handle.describe).info.recent_actions
                if not (a.scheduled_at >= began and a.scheduled_at.minute == 0
                        and a.scheduled_at.second == 0)]  # fmt: skip

    done = plugin(kubectl, namespace, "run", "hourly", "--id", "now")
    assert done.returncode == 0, done
    assert "RunNow now: Done" in done.stdout, done
    eventually(lambda: len(actions()) == 1, what="the triggered run")
    assert plugin(kubectl, namespace, "run", "hourly", "--id", "now").returncode == 0
    start, end, slots = last_hours(5)
    done = plugin(kubectl, namespace, "backfill", "hourly", "--from", iso(start), "--to",
                  iso(end), "--id", "five")  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    backfilled = eventually(
        lambda: (found := sorted(a.scheduled_at for a in actions() if a.scheduled_at in slots))
        and len(found) == 5 and found, timeout=60, what="5 backfilled runs",
    )  # fmt: skip
    assert backfilled == slots
    assert len(actions()) == 6, "the repeated run-now id started a second run"

    # In the run history, marked as backfilled and never late.
    def marked() -> list[Any]:
        runs = sj_status(kubectl, "hourly", namespace).get("recentRuns", [])
        found = [r for r in runs if r.get("requested") == "Backfill/five"]
        return found if len(found) == 5 else []

    runs = eventually(marked, what="backfilled runs in recentRuns")
    assert sorted(parse_time(r["scheduledTime"]) for r in runs) == slots
    assert all("late" not in r for r in runs), runs
    # Over the cap, written by hand: refused, and Temporal is asked for nothing.
    backfill_over_the_cap(kubectl, namespace, end)
    assert len(actions()) == 6, "an over-the-cap backfill started runs"
    # status and list read the temporal object the same way.
    shown = plugin(kubectl, namespace, "status", "hourly")
    assert shown.returncode == 0, shown.stderr
    for text in ("Backend:   temporal", f"sundial/{namespace}/hourly", "Backfill/five"):
        assert text in shown.stdout, (text, shown.stdout)
    assert "hourly" in plugin(kubectl, namespace, "list").stdout

    # suspend with a note: Temporal's pause note carries it; resume lifts it.
    marked = temporal_sj("hourly", namespace, schedule="0 * * * *")
    marked["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": "app:sundial.dev/x"}
    kubectl.apply(marked)
    paused = plugin(kubectl, namespace, "suspend", "hourly", "--note", "db migration")
    assert paused.returncode == 0, paused.stderr
    assert "Argo CD" in paused.stderr, paused.stderr
    assert "git" in paused.stderr, paused.stderr
    eventually(lambda: (state := temporal.run(handle.describe).schedule.state).paused
               and "db migration" in (state.note or ""), what="paused with the note")  # fmt: skip
    ready_message = eventually(
        lambda: (c := [c for c in (kubectl.get("scheduledjob", "hourly", namespace) or {})
                       .get("status", {}).get("conditions", []) if c["type"] == "Ready"])
        and "db migration" in c[0]["message"] and c[0]["message"], what="note in Ready",
    )  # fmt: skip
    assert "suspended" in ready_message
    assert plugin(kubectl, namespace, "resume", "hourly").returncode == 0
    eventually(lambda: not temporal.run(handle.describe).schedule.state.paused, what="resumed")


@pytest.mark.timeout(300)
def test_run_now_never_kills_a_running_workflow_on_temporal(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str
) -> None:
    """Issue 25.4: under Replace a run now waits for the running workflow, as on
    kubernetes; Temporal's own describe and listing show it was neither terminated nor
    cancelled, and the requested run starts once it has ended."""
    temporal.ensure_worker()
    sleeper = {"type": "SundialSleep", "taskQueue": TASK_QUEUE, "args": [30]}
    kubectl.apply(temporal_sj("replace", namespace, schedule="0 0 1 1 *",
                              concurrencyPolicy="Replace", workflow=sleeper))  # fmt: skip
    eventually(lambda: ready(kubectl, "replace", namespace), what="Ready")
    schedule_id = f"sundial/{namespace}/replace"
    handle = temporal.client.get_schedule_handle(schedule_id)

    def run_now(request_id: str) -> None:
        kubectl.run("annotate", "--overwrite", "scheduledjob", "replace", "-n", namespace,
                    f"sundial.dev/run-now={request_id}")  # fmt: skip

    run_now("first")
    running = eventually(lambda: temporal.run(handle.describe).info.running_actions,
                         what="the first run going")  # fmt: skip
    first = temporal.client.get_workflow_handle(
        running[0].workflow_id, run_id=running[0].first_execution_run_id
    )

    def first_status() -> WorkflowExecutionStatus | None:
        return temporal.run(first.describe).status

    run_now("second")
    waiting = eventually(lambda: entry(kubectl, "replace", namespace, "RunNow", "second"),
                         what="the second request handled")  # fmt: skip
    assert first_status() == WorkflowExecutionStatus.RUNNING, "the request killed the run"
    assert waiting["outcome"] == "InProgress", waiting
    assert "waiting" in waiting["message"], waiting
    consistently(lambda: first_status() == WorkflowExecutionStatus.RUNNING, duration=8)

    done = eventually(lambda: (e := entry(kubectl, "replace", namespace, "RunNow", "second"))
                      and e["outcome"] == "Done" and e, timeout=90,
                      what="the second run started")  # fmt: skip
    assert done["runsStarted"] == 1
    assert first_status() == WorkflowExecutionStatus.COMPLETED

    async def executions() -> list[WorkflowExecutionStatus | None]:
        query = f'TemporalScheduledById = "{schedule_id}"'
        return [w.status async for w in temporal.client.list_workflows(query)]

    listed = eventually(lambda: (found := temporal.run(executions)) and len(found) == 2 and found,
                        what="both runs in Temporal's listing")  # fmt: skip
    killed = {WorkflowExecutionStatus.TERMINATED, WorkflowExecutionStatus.CANCELED}
    assert not killed & set(listed), listed
