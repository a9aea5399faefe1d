"""Failure policy and maintenance windows on the real stack (issue 30), under faults, judged
by the servers' own word: Temporal's description of the schedule and its listing of
workflow executions, the CronJob as the apiserver holds it, and its audit log.

- A temporal job that keeps failing is paused by failurePolicy.pauseAfter although its
  Temporal connection stalls when the trip is due; `kubectl sundial resume` lifts the pause
  and pauseAfter new failures pause it again. (The kubernetes side, with real Pods failing
  on the node and the suspend refused by admission, is a scenario of test_real_node_runs.)
- A maintenance window set by label (`kubectl sundial suspend -l ... --for`) pauses a
  CronJob and a Temporal schedule, and both resume by themselves at its end although the
  operator was SIGKILLed inside it; no slot inside it is reported missed; repeating the
  bulk suspend writes nothing.
- spec.catchUp after a maintenance window over two minute slots, one job per policy on
  each backend: None runs neither slot, Latest the second, All both, the same on both
  (Jobs by the apiserver's listing and audit log, workflows by Temporal's listing); the
  held slots are not reported missed. The All pair's operator is down when they are made
  and over the first slot: the window held it all the same.
- Bad input is refused at apply time, or by the plugin, with the field named.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import ScheduleDescription

from localstack import LocalStack
from shared_timeline import Servers
from support import (
    SHARD_LABEL,
    Background,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    audit_events,
    conditions_of,
    eventually,
    faulted_operator,
    in_shard,
    job_slots,
    kubectl_sundial,
    kubernetes_scheduledjob,
    no_retry_job,
    one_create_per_job,
    parse_time,
    sample,
    schedule_executions,
    scrape,
    sj_status,
    temporal_connection,
    temporal_scheduledjob,
    user_written,
)
from temporal_workflows import TASK_QUEUE

pytestmark = pytest.mark.cluster

SHARD = "pause-policies"
# The window's scenario's own operator, on the shared timeline beside this module's tests.
WINDOW_SHARD = "pause-window"
# The catch-up scenario's All pair: its operator is down until their first slot has passed.
LATE_SHARD = "pause-late"
SCENARIO_SECONDS = 420
FAIL = {"type": "SundialFail", "taskQueue": TASK_QUEUE}
# Failures, 3 s apart, that trip the temporal job's policy: the connection stalls at the
# first one Temporal lists, so the trip falls due while it is stalled.
PAUSE_AFTER = 5


@contextmanager
def operator_of_its_own(
    stack: LocalStack, kubectl: Kubectl, shard: str, *, started: bool = True
) -> Iterator[OperatorProcess]:
    """An operator serving `shard` alone (objects made in_shard), free to be SIGKILLed;
    not `started`, it is down until the test starts it."""
    operator = faulted_operator(stack, shard, shard, user=f"sundial-{shard}",
                                schedule_id_prefix=f"{shard}/")  # fmt: skip
    if started:
        operator.start()
    try:
        yield operator
    finally:
        # Its objects go first: their finalizers are its own (a test that failed leaves some).
        if operator.proc is None or operator.proc.poll() is not None:
            operator.start()  # killed by a test that failed before it was started again
        kubectl.run("delete", "scheduledjobs", "-A", "-l", f"{SHARD_LABEL}={shard}",
                    "--timeout=90s", check=False)  # fmt: skip
        operator.stop()


@pytest.fixture(scope="module")
def own_operator(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None
) -> Iterator[OperatorProcess]:
    with operator_of_its_own(stack, kubectl, SHARD) as operator:
        yield operator


def schedule_of(temporal: TemporalSide, schedule_id: str) -> ScheduleDescription:
    return temporal.run(lambda: temporal.client.get_schedule_handle(schedule_id).describe())


def started_between(runs: list[Any], start: datetime, end: datetime) -> list[Any]:
    return [e for e in runs if start <= e.start_time <= end]


@contextmanager
def on_the_timeline(servers: Servers) -> Iterator[dict[str, Callable[[str], None]]]:
    """The three longer tests' scenarios, by test name, for the shared timeline
    (tests/shared_timeline.py): one on the session's operator, one on an operator of its own
    (WINDOW_SHARD, SIGKILLed inside its window), one on both backends' plain objects, some
    served by an operator that is down when they are made (LATE_SHARD)."""
    stack, kubectl, temporal = servers.stack, servers.kubectl, servers.temporal
    temporal.ensure_worker()
    with (
        operator_of_its_own(stack, kubectl, WINDOW_SHARD) as window_operator,
        operator_of_its_own(stack, kubectl, LATE_SHARD, started=False) as late_operator,
    ):
        yield {
            "test_a_failing_temporal_job_is_paused_through_a_stalled_connection_and_resume_lifts_it":
                partial(failing_temporal_job_paused, stack, kubectl, servers.operator, temporal),
            "test_a_window_by_label_pauses_both_backends_and_ends_by_itself_across_a_sigkill":
                partial(window_by_label, stack, kubectl, window_operator, temporal),
            "test_after_a_window_each_catch_up_policy_runs_the_same_slots_on_both_backends":
                partial(catch_up_after_a_window, stack, kubectl, late_operator, temporal),
        }  # fmt: skip


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_a_failing_temporal_job_is_paused_through_a_stalled_connection_and_resume_lifts_it(
    scenario: Background,
) -> None:
    scenario.join(SCENARIO_SECONDS)


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_a_window_by_label_pauses_both_backends_and_ends_by_itself_across_a_sigkill(
    scenario: Background,
) -> None:
    scenario.join(SCENARIO_SECONDS)


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_after_a_window_each_catch_up_policy_runs_the_same_slots_on_both_backends(
    scenario: Background,
) -> None:
    scenario.join(SCENARIO_SECONDS)


def failing_temporal_job_paused(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide,
    namespace: str,
) -> None:  # fmt: skip
    """pauseAfter failures of a workflow, 3 s apart, with the object's Temporal connection
    stalled when the trip falls due: Ready Unknown meanwhile and no pause guessed; once the
    connection flows, the schedule is paused in Temporal with Sundial's note, status names
    a run that Temporal lists as failed, nothing more starts, one Event and one count;
    `kubectl sundial resume` lifts it, and pauseAfter new failures pause it again."""
    relay = stack.faults.temporal_relay("failure-policy")
    kubectl.apply(temporal_connection("stalling", namespace, address=relay.address,
                                      namespace="default"))  # fmt: skip
    kubectl.apply(temporal_scheduledjob(
        "fails", namespace, interval={"every": "3s"}, workflow=FAIL,
        temporalConnectionRef={"name": "stalling"}, failurePolicy={"pauseAfter": PAUSE_AFTER},
    ))  # fmt: skip
    schedule_id = eventually(lambda: sj_status(kubectl, "fails", namespace).get(
        "backendRef", {}).get("scheduleId"), timeout=90, what="the schedule made")  # fmt: skip
    # The connection stalls at the first failure Temporal lists, while the next failures
    # happen: the trip is due while Sundial can reach neither the runs nor the schedule. It
    # says Unknown meanwhile, and pauses once it can. (Not at the first failure in status:
    # on a loaded machine Sundial's first look may come pauseAfter failures late.)
    eventually(lambda: any(e.status is not None and e.status.name == "FAILED"
                           for e in schedule_executions(temporal, schedule_id)),
               timeout=90, what="the first failure, in Temporal's listing")  # fmt: skip
    with relay.stalled():
        eventually(lambda: conditions_of(sj_status(kubectl, "fails", namespace))["Ready"]
                   ["status"] == "Unknown", timeout=90,
                   what="Ready Unknown while stalled")  # fmt: skip
        stalled_status = sj_status(kubectl, "fails", namespace)
        assert "pause" not in stalled_status, stalled_status
    described = eventually(lambda: (d := schedule_of(temporal, schedule_id)).schedule.state.paused
                           and d, timeout=120, what="the schedule paused in Temporal")  # fmt: skip
    note = described.schedule.state.note or ""
    assert note.startswith("Paused by Sundial: failurePolicy: paused after"), note
    paused_at = datetime.now(UTC)
    # Status says so once the pass that paused the schedule has written it.
    status = eventually(lambda: (s := sj_status(kubectl, "fails", namespace)).get("lastResult")
                        == "PausedByFailurePolicy" and s, what="status: paused")  # fmt: skip
    pause = status["pause"]
    assert pause["reason"] == "FailurePolicy", pause
    assert pause["failures"] >= PAUSE_AFTER, pause
    assert status["lastResult"] == "PausedByFailurePolicy", status
    assert conditions_of(status)["Ready"]["reason"] == "PausedByFailurePolicy", status
    assert not status.get("nextRunTimes"), status
    # The run that tripped it is a real execution that failed, by Temporal's listing.
    # (Temporal names each scheduled workflow by its prefix and the slot's time.)
    runs = schedule_executions(temporal, schedule_id)
    failed = [e for e in runs if e.status is not None and e.status.name == "FAILED"]
    assert len(failed) >= PAUSE_AFTER, [(e.id, e.status) for e in runs]
    assert any(e.id.endswith(pause["trippedBy"]) for e in failed), (pause, [e.id for e in failed])
    # Paused: Temporal starts nothing more (a run in flight at the pause may still start
    # within the second it took).
    time.sleep(12)
    later = started_between(schedule_executions(temporal, schedule_id),
                            paused_at + timedelta(seconds=2), datetime.now(UTC))  # fmt: skip
    assert later == [], [e.id for e in later]
    metrics = scrape(operator.metrics_url)
    labels = {"namespace": namespace, "name": "fails", "backend": "temporal"}
    assert metrics.get(sample("sundial_paused", **labels, reason="FailurePolicy")) == 1.0
    assert metrics.get(sample("sundial_failure_policy_pauses_total", **labels)) == 1.0
    events = kubectl.events(namespace, reason="PausedByFailurePolicy")
    assert len(events) == 1, events
    assert events[0].get("count", 1) == 1, events

    # Resume: Temporal runs it again, and pauseAfter new failures pause it again.
    resumed = kubectl_sundial(kubectl, "resume", "fails", "-n", namespace)
    assert resumed.returncode == 0, resumed.stderr
    assert "failure policy's pause lifted" in resumed.stdout, resumed.stdout
    eventually(lambda: started_between(schedule_executions(temporal, schedule_id), datetime.now(UTC)
                                       - timedelta(seconds=10), datetime.now(UTC)),
               timeout=90, what="runs again after the resume")  # fmt: skip
    again = eventually(lambda: (p := sj_status(kubectl, "fails", namespace).get("pause"))
                       and p["since"] != pause["since"] and p, timeout=90,
                       what="paused again after pauseAfter new failures")  # fmt: skip
    # A pass may see several failures at once (8, where 5 trip it), but only those since
    # the resume count: the first pause's failures were set aside, or it would have paused
    # again at the first pass after the resume.
    assert again["failures"] >= PAUSE_AFTER, again
    streak = sj_status(kubectl, "fails", namespace)["consecutiveFailures"]
    assert again["failures"] <= streak - pause["failures"], (again, streak, pause)
    assert scrape(operator.metrics_url).get(
        sample("sundial_failure_policy_pauses_total", **labels)) == 2.0  # fmt: skip
    lifted = kubectl.events(namespace, reason="FailurePauseLifted")
    assert lifted, "no FailurePauseLifted Event"
    assert "resumed" in lifted[0]["message"], lifted
    kubectl.run("delete", "scheduledjob", "fails", "-n", namespace, "--timeout=60s")
    relay.close()


def cronjob_suspended(kubectl: Kubectl, name: str, namespace: str) -> bool | None:
    cronjob = kubectl.get("cronjob", name, namespace)
    return None if cronjob is None else bool(cronjob["spec"].get("suspend"))


def cronjob_writes(audit: Path, namespace: str, name: str, user: str) -> list[dict[str, Any]]:
    """The operator's accepted writes of the CronJob, by the audit log."""
    return [e for e in audit_events(audit)
            if e.get("verb") in ("update", "patch")
            and (e.get("objectRef") or {}).get("resource") == "cronjobs"
            and e["objectRef"].get("namespace") == namespace
            and e["objectRef"].get("name") == name
            and (e.get("user") or {}).get("username") == user
            and (e.get("responseStatus") or {}).get("code", 200) < 300
            and e.get("stage") == "ResponseComplete"]  # fmt: skip


def window_by_label(
    stack: LocalStack, kubectl: Kubectl, window_operator: OperatorProcess, temporal: TemporalSide,
    namespace: str,
) -> None:  # fmt: skip
    """A window of 45 s set by label on a CronJob and a schedule (a third object without
    the label untouched), the operator SIGKILLed inside it and started only after it ended:
    both backends pause, and resume by themselves; nothing started inside it (Temporal's
    listing), nothing is reported missed, and the repeated bulk suspend wrote nothing (the
    audit log: one suspend, one resume)."""
    # A label only this test's objects carry: the bulk verbs go across namespaces (-A).
    team = {"sundial-test": "maintenance-window"}
    cron = kubernetes_scheduledjob("nightly", namespace, {"image": stack.images["busybox"]},
                                   schedule="* * * * *")  # fmt: skip
    flow = temporal_scheduledjob("ticks", namespace, interval={"every": "2s"})
    other = temporal_scheduledjob("others", namespace, interval={"every": "1h"})
    for manifest in (cron, flow):
        manifest["metadata"]["labels"] = dict(team)
    for manifest in (cron, flow, other):
        kubectl.apply(in_shard(manifest, WINDOW_SHARD))
    for name in ("nightly", "ticks", "others"):
        eventually(lambda n=name: sj_status(kubectl, n, namespace).get("backendRef"),
                   timeout=90, what=f"{name} in step")  # fmt: skip
    schedule_id = sj_status(kubectl, "ticks", namespace)["backendRef"]["scheduleId"]
    eventually(lambda: schedule_executions(temporal, schedule_id), what="ticks running")

    window = 45
    done = kubectl_sundial(kubectl, "suspend", "-l", "sundial-test=maintenance-window", "-A",
                           "--for", f"{window}s", "--note", "db migration")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"scheduledjob {namespace}/nightly: suspended until" in done.stdout, done.stdout
    assert f"scheduledjob {namespace}/ticks: suspended until" in done.stdout, done.stdout
    assert "others" not in done.stdout, done.stdout
    until = parse_time(sj_status_spec(kubectl, "ticks", namespace)["suspendUntil"])
    assert until - datetime.now(UTC) <= timedelta(seconds=window)
    # Repeated, it writes nothing: the same window is already set.
    again = kubectl_sundial(kubectl, "suspend", "-l", "sundial-test=maintenance-window", "-A",
                            "--until", sj_status_spec(kubectl, "ticks", namespace)["suspendUntil"],
                            "--note", "db migration")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already suspended until") == 2, again.stdout

    eventually(lambda: cronjob_suspended(kubectl, "nightly", namespace), what="CronJob suspended")
    described = eventually(lambda: (d := schedule_of(temporal, schedule_id)).schedule.state.paused
                           and d, what="schedule paused")  # fmt: skip
    assert "db migration" in (described.schedule.state.note or ""), described.schedule.state
    window_start = datetime.now(UTC)
    # The status follows the schedule's update in the same pass, a moment later.
    status = eventually(lambda: (s := sj_status(kubectl, "ticks", namespace)).get("pause")
                        and s, what="ticks' status.pause")  # fmt: skip
    assert status["pause"]["reason"] == "MaintenanceWindow", status
    assert status["lastResult"] == "Suspended", status
    assert not sj_status(kubectl, "others", namespace).get("pause")

    # The operator is killed inside the window and comes back only after it ended.
    window_operator.signal(signal.SIGKILL)
    time.sleep(max((until - datetime.now(UTC)).total_seconds(), 0) + 3)
    window_operator.start()
    eventually(lambda: cronjob_suspended(kubectl, "nightly", namespace) is False, timeout=90,
               what="the CronJob resumed by itself")  # fmt: skip
    eventually(lambda: not schedule_of(temporal, schedule_id).schedule.state.paused, timeout=90,
               what="the schedule resumed by itself")  # fmt: skip
    eventually(lambda: started_between(schedule_executions(temporal, schedule_id), until,
                                       datetime.now(UTC)), timeout=60,
               what="ticks run again after the window")  # fmt: skip
    # Nothing started inside the window (Temporal's listing), and nothing is reported missed.
    inside = started_between(schedule_executions(temporal, schedule_id),
                             window_start + timedelta(seconds=2), until)  # fmt: skip
    assert inside == [], [e.id for e in inside]
    status = eventually(lambda: (s := sj_status(kubectl, "ticks", namespace)).get("pause") is None
                        and s, what="status.pause cleared")  # fmt: skip
    assert not status.get("missedRuns"), status
    assert "maintenance window ended" in conditions_of(status)["Ready"]["message"], status
    assert not sj_status(kubectl, "nightly", namespace).get("missedRuns")
    assert not kubectl.events(namespace, reason="RunMissed")
    # The CronJob was suspended once and resumed once by the operator: no write in between
    # (the repeated bulk suspend and the restart wrote nothing). Its making is a create.
    user = f"sundial-{WINDOW_SHARD}"
    writes = cronjob_writes(stack.log_dir / "audit.log", namespace, "nightly", user)
    changes = [e for e in writes if e["responseStatus"]["code"] == 200]
    assert len(changes) == 2, [(e["verb"], e["stageTimestamp"]) for e in writes]
    kubectl.run("delete", "scheduledjobs", "--all", "-n", namespace, "--timeout=90s")


def sj_status_spec(kubectl: Kubectl, name: str, namespace: str) -> dict[str, Any]:
    return (kubectl.get("scheduledjob", name, namespace) or {})["spec"]


BAD_POLICIES: list[tuple[dict[str, Any], str, str]] = [
    ({"failurePolicy": {"pauseAfter": 0}}, "pauseAfter", "should be greater than or equal to 1"),
    ({"failurePolicy": {"pauseAfter": 2, "resumeAfter": "10s"}}, "resumeAfter",
     "must be at least 1m"),
    ({"suspendUntil": "2026-12-24T06:00:00"}, "suspendUntil", "needs a time zone"),
    ({"suspend": True, "suspendUntil": "2026-12-24T06:00:00Z"}, "suspendUntil", "not both"),
    ({"catchUp": {"policy": "Some"}}, "catchUp.policy", "Unsupported value"),
    ({"catchUp": {"policy": "All", "window": "30s"}}, "catchUp.window", "at least 1m"),
    ({"catchUp": {"policy": "None", "window": "1h"}}, "catchUp.window", "no meaning"),
    ({"catchUp": {"policy": "Latest"}, "startingDeadlineSeconds": 60}, "catchUp",
     "replaces startingDeadlineSeconds"),
]  # fmt: skip


def test_bad_policy_input_is_refused_at_apply_time_naming_the_field(
    kubectl: Kubectl, crd_installed: None, namespace: str
) -> None:
    for spec, field, said in BAD_POLICIES:
        manifest = kubernetes_scheduledjob("bad", namespace, {"image": "busybox"}, **spec)
        refused = kubectl.run("apply", "--dry-run=server", "-f", "-",
                              stdin=yaml.safe_dump(manifest), check=False)  # fmt: skip
        assert refused.returncode != 0, (spec, refused.stdout)
        assert field in refused.stderr, (spec, refused.stderr)
        assert said in refused.stderr, (spec, refused.stderr)


def test_the_plugin_refuses_a_window_that_cannot_be_and_writes_nothing(
    kubectl: Kubectl, crd_installed: None, namespace: str
) -> None:
    kubectl.apply(kubernetes_scheduledjob("kept", namespace, {"image": "busybox"},
                                          schedule="0 0 1 1 *"))  # fmt: skip
    before = kubectl.get("scheduledjob", "kept", namespace) or {}
    for args, said in [
        (["--until", "2020-01-01T00:00:00Z"], "is in the past"),
        (["--until", "2030-01-01T00:00:00"], "with a zone"),
        (["--for", "soon"], "is not a duration"),
    ]:
        refused = kubectl_sundial(kubectl, "suspend", "kept", "-n", namespace, *args)
        assert refused.returncode == 1, (args, refused)
        assert said in refused.stderr, (args, refused.stderr)
    after = kubectl.get("scheduledjob", "kept", namespace) or {}
    assert user_written(after) == user_written(before)


def test_spread_schedules_run_at_one_hashed_minute_on_both_backends_across_a_sigkill(
    stack: LocalStack, kubectl: Kubectl, own_operator: OperatorProcess, temporal: TemporalSide,
    namespace: str,
) -> None:  # fmt: skip
    """`H(0-9) * * * *` on both backends: the CronJob the apiserver holds and the schedule
    Temporal holds fire at one concrete minute within 0-9, the same for both objects' own
    next runs as each backend reckons them (Temporal's next action times) and as status
    says; the operator SIGKILLed and restarted rewrites neither (the spread is no state)."""
    spread = "H(0-9) * * * *"
    cron = kubernetes_scheduledjob("herd", namespace, {"image": "registry.example/app:1"},
                                   schedule=spread)  # fmt: skip
    flow = temporal_scheduledjob("herd-flow", namespace, schedule=spread)
    for manifest in (cron, flow):
        kubectl.apply(in_shard(manifest, SHARD))
    cronjob = eventually(lambda: kubectl.get("cronjob", "herd", namespace), what="the CronJob")
    minute, *rest = cronjob["spec"]["schedule"].split()
    assert rest == ["*", "*", "*", "*"], cronjob["spec"]["schedule"]
    assert 0 <= int(minute) <= 9, cronjob["spec"]["schedule"]
    status = eventually(lambda: (s := sj_status(kubectl, "herd", namespace)).get("nextRunTimes")
                        and s, what="next runs")  # fmt: skip
    assert all(parse_time(t).minute == int(minute) for t in status["nextRunTimes"]), status
    flow_status = eventually(lambda: (s := sj_status(kubectl, "herd-flow", namespace))
                             .get("backendRef") and s.get("nextRunTimes") and s,
                             what="the schedule")  # fmt: skip
    schedule_id = flow_status["backendRef"]["scheduleId"]
    described = schedule_of(temporal, schedule_id)
    temporal_next = [t.astimezone(UTC) for t in described.info.next_action_times[:3]]
    assert [parse_time(t) for t in flow_status["nextRunTimes"]] == temporal_next
    assert len({t.minute for t in temporal_next}) == 1, temporal_next
    assert 0 <= temporal_next[0].minute <= 9, temporal_next
    version = cronjob["metadata"]["resourceVersion"]
    updated = described.info.last_updated_at

    own_operator.signal(signal.SIGKILL)
    own_operator.start()

    def passed_over(name: str, backend: str) -> bool:
        """The restarted operator's pass reached the object: it reports its next run."""
        labels = {"namespace": namespace, "name": name, "backend": backend}
        try:
            metrics = scrape(own_operator.metrics_url)
        except OSError:
            return False  # not serving yet
        return sample("sundial_next_run_timestamp_seconds", **labels) in metrics

    eventually(lambda: passed_over("herd", "kubernetes") and passed_over("herd-flow", "temporal"),
               timeout=90, what="the restarted operator's passes")  # fmt: skip
    again = kubectl.get("cronjob", "herd", namespace) or {}
    assert again["metadata"]["resourceVersion"] == version, "the CronJob was rewritten"
    assert schedule_of(temporal, schedule_id).info.last_updated_at == updated
    kubectl.run("delete", "scheduledjobs", "--all", "-n", namespace, "--timeout=90s")


CATCH_UP = ("None", "Latest", "All")


def catch_up_after_a_window(
    stack: LocalStack,
    kubectl: Kubectl,
    late_operator: OperatorProcess,
    temporal: TemporalSide,
    namespace: str,
) -> None:
    """Six jobs at `* * * * *`, one per catchUp policy on each backend, in a maintenance
    window (spec.suspendUntil) over two minute slots that ends 25 s after the second, more
    than the 15 s a slot may be late and still be on time: after it, None runs neither
    slot, Latest the second, All both, on both backends. On kubernetes the controller runs
    the second (the CronJob's deadline), Sundial the first; on temporal Sundial's backfill
    runs both. None and Latest are served by the session's operator; All by an operator
    that is down when they are made and over the first slot (a window that came with its
    object holds from the object's creation, not from the operator's first pass)."""
    # The window begins when the objects are made: at least 30 s before its first slot,
    # so that it holds exactly two, `first` and `second`.
    now = datetime.now(UTC)
    if now.second > 30:
        time.sleep(65 - now.second)
        now = datetime.now(UTC)
    first = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    second = first + timedelta(minutes=1)
    until = second + timedelta(seconds=25)
    window = {"suspendUntil": until.isoformat().replace("+00:00", "Z"),
              "suspendNote": "catch-up test"}  # fmt: skip
    job = no_retry_job(stack.images["busybox"], "exit 0")
    for policy in CATCH_UP:
        catch_up = {"policy": policy}
        for manifest in (
            kubernetes_scheduledjob(f"k-{policy.lower()}", namespace, job, catchUp=catch_up,
                                    successfulRunsHistoryLimit=10, **window),
            temporal_scheduledjob(f"t-{policy.lower()}", namespace, schedule="* * * * *",
                                  catchUp=catch_up, **window),
        ):  # fmt: skip
            kubectl.apply(in_shard(manifest, LATE_SHARD) if policy == "All" else manifest)
    held = {"None": set(), "Latest": {second}, "All": {first, second}}
    # The All pair's operator comes up after the first slot. The CronJob it makes must be
    # there before the second slot: that one is the controller's to run.
    time.sleep(max((first - datetime.now(UTC)).total_seconds(), 0) + 5)
    late_operator.start()
    eventually(lambda: kubectl.get("cronjob", "k-all", namespace),
               timeout=max((second - datetime.now(UTC)).total_seconds(), 1),
               what="k-all's CronJob made before the second slot")  # fmt: skip
    time.sleep(max((until - datetime.now(UTC)).total_seconds(), 0))

    # None last: by then the others' late runs have been made, and None's would have been.
    for policy in ("All", "Latest", "None"):
        ran = held[policy]
        name = f"k-{policy.lower()}"
        eventually(lambda n=name, r=ran: job_slots(kubectl, namespace, n).keys() >= r,
                   timeout=90, what=f"{name}: {sorted(ran)} run")  # fmt: skip
        jobs = job_slots(kubectl, namespace, name)
        assert {slot for slot in jobs if slot <= second} == ran, (name, sorted(jobs))
        eventually(partial(one_create_per_job, stack, kubectl, namespace, name), timeout=40,
                   what=f"{name}: each Job created once (the audit log)")  # fmt: skip
        name = f"t-{policy.lower()}"
        schedule_id = sj_status(kubectl, name, namespace)["backendRef"]["scheduleId"]
        eventually(lambda s=schedule_id, r=ran: workflow_slots(temporal, s).keys() >= r,
                   timeout=90, what=f"{name}: {sorted(ran)} run")  # fmt: skip
        runs = workflow_slots(temporal, schedule_id)
        assert {slot for slot in runs if slot <= second} == ran, (name, runs)
        assert all(count == 1 for count in runs.values()), (name, runs)
    expected_requests = {
        "k-all": [(first, first)], "t-latest": [(second, second)], "t-all": [(first, second)],
    }  # fmt: skip
    for policy in CATCH_UP:
        for name in (f"k-{policy.lower()}", f"t-{policy.lower()}"):
            current = sj_status(kubectl, name, namespace)
            assert not current.get("missedRuns"), (name, current)
            catch_ups = [(parse_time(r["start"]), parse_time(r["end"]))
                         for r in current.get("requests", []) if r["kind"] == "CatchUp"
                         and r["outcome"] == "Done"]  # fmt: skip
            assert catch_ups == expected_requests.get(name, []), (name, current.get("requests"))
    kubectl.run("delete", "scheduledjobs", "--all", "-n", namespace, "--timeout=90s")


def workflow_slots(temporal: TemporalSide, schedule_id: str) -> dict[datetime, int]:
    """How many workflows Temporal started for each slot of the schedule (its listing;
    each is named by the schedule's prefix and its slot's time)."""
    counted: dict[datetime, int] = {}
    for execution in schedule_executions(temporal, schedule_id):
        slot = parse_time(execution.id[-len("2026-01-01T00:00:00Z") :])
        counted[slot] = counted.get(slot, 0) + 1
    return counted
