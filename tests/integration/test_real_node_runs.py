"""What only a real node shows, from real Pods in real minute slots (M1, M2, ...):

- every run's outcome on the kubernetes backend (issue 10): a run that succeeds, one that
  exits 3, one that runs past maxRunDuration, and a failing streak that crosses
  failureThreshold then recovers across recoveryThreshold;
- Replace kills a running Job, TTL removes finished Jobs, a Forbid job that really outlives
  its interval, activeDeadlineSeconds (issue 13); Sundial must report no false miss;
- a CronJob made by hand, imported and adopted between two slots (issue 29): one Job per
  slot across the adoption, none missed;
- a slot whose Job the apiserver refused to create (an admission policy against the
  controller) is missed, DeadlineExceeded;
- a job that fails every slot is paused by failurePolicy.pauseAfter (issue 30), although the
  apiserver refuses the CronJob's suspend for a while; `kubectl sundial resume` lifts it.

Each is a scenario of minute slots, some four minutes of waiting, on the shared timeline
(tests/shared_timeline.py): all start at once, each in its own namespace and thread, so
that all are applied before the same first slot M1 and their waits overlap those of every
other scenario there; each test joins its own scenario, which raises what the scenario
found (its assertion, with its message), as if the test had run it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from localstack import LocalStack
from shared_timeline import Servers
from support import (
    Background,
    Kubectl,
    OperatorProcess,
    audit_events,
    conditions_of,
    created_jobs,
    eventually,
    kubectl_sundial,
    kubernetes_scheduledjob,
    no_retry_job,
    owned_jobs,
    parse_time,
    sample,
    scrape,
    sj_status,
    wait_until,
)

pytestmark = pytest.mark.cluster

ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
# A scenario's worst case on a loaded 2-core machine is about 6 minutes: M1 up to 80 s
# away, M4 three minutes later, and the deadlines after M4.
SCENARIO_SECONDS = 600
# A run whose Job ends this soon after it was made ends within the fold of its events
# (handlers.OWNED_EVENTS_FOLDED, 5 s, less a second for the events' way to the operator).
SHORT_RUN_SECONDS = 4.0


@contextmanager
def on_the_timeline(servers: Servers) -> Iterator[dict[str, Callable[[str], None]]]:
    """The scenarios, by test name, for the shared timeline (tests/shared_timeline.py). Each
    picks its M1 as the first slot at least 20 s after it starts: the same slot for all,
    as they start within milliseconds of each other, once their namespaces exist."""
    stack, kubectl, operator = servers.stack, servers.kubectl, servers.operator
    yield {
        "test_replace_ttl_forbid_and_deadlines_on_a_real_node":
            partial(replace_ttl_forbid_and_deadlines, stack, kubectl),
        "test_outcomes_durations_thresholds_and_signals_on_a_real_node":
            partial(outcomes_durations_thresholds_and_signals, stack, kubectl, operator),
        "test_an_imported_cronjob_adopted_between_slots_runs_each_slot_once":
            partial(adopted_between_slots, stack, kubectl),
        "test_a_slot_whose_job_create_was_refused_is_missed":
            partial(refused_job_create, stack, kubectl),
        "test_a_job_failing_every_slot_is_paused_by_its_failure_policy":
            partial(paused_by_its_failure_policy, stack, kubectl),
    }  # fmt: skip


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_replace_ttl_forbid_and_deadlines_on_a_real_node(scenario: Background) -> None:
    scenario.join(SCENARIO_SECONDS)


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_outcomes_durations_thresholds_and_signals_on_a_real_node(scenario: Background) -> None:
    scenario.join(SCENARIO_SECONDS)


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_an_imported_cronjob_adopted_between_slots_runs_each_slot_once(
    scenario: Background,
) -> None:
    scenario.join(SCENARIO_SECONDS)


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_a_slot_whose_job_create_was_refused_is_missed(scenario: Background) -> None:
    scenario.join(SCENARIO_SECONDS)


@pytest.mark.timeout(SCENARIO_SECONDS + 60)
def test_a_job_failing_every_slot_is_paused_by_its_failure_policy(scenario: Background) -> None:
    scenario.join(SCENARIO_SECONDS)


# ---- failure policy (issue 30) -----------------------------------------------------------


def paused_by_its_failure_policy(stack: LocalStack, kubectl: Kubectl, namespace: str) -> None:
    """A job whose scheduled Pods exit 1 every minute, failurePolicy.pauseAfter 2: once two
    runs have failed on the node, Sundial suspends its CronJob, though an admission policy
    refuses that write for a while (Ready says Forbidden meanwhile, the CronJob still
    unsuspended). Once the refusal lifts the CronJob is suspended, and the controller makes
    no Job for a slot after that (the audit log). A run now is allowed while paused; it
    succeeds (the script passes when it runs for a request), which lifts the pause as a
    recovery: the CronJob is unsuspended and the next slot runs. (`kubectl sundial resume`
    is the temporal scenario's, in test_pause_policies.)"""
    name = "keeps-failing"
    job = no_retry_job(stack.images["busybox"], 'test -n "$SUNDIAL_REQUEST"')
    kubectl.apply(kubernetes_scheduledjob(name, namespace, job, failurePolicy={"pauseAfter": 2}))
    eventually(lambda: kubectl.get("cronjob", name, namespace), what="the CronJob made")

    def suspended() -> bool:
        return bool(((kubectl.get("cronjob", name, namespace) or {}).get("spec") or {})
                    .get("suspend"))  # fmt: skip

    with stack.faults.deny(
        "failure-pause",
        resources=["cronjobs"],
        api_groups=["batch"],
        operations=["UPDATE"],
        namespace=namespace,
        allow_if="!has(object.spec.suspend) || !object.spec.suspend",
    ):
        status = eventually(lambda: (s := sj_status(kubectl, name, namespace)).get("pause") and s,
                            timeout=240, interval=2, what="tripped by two failed runs")  # fmt: skip
        eventually(lambda: conditions_of(sj_status(kubectl, name, namespace))["Ready"]["reason"]
                   == "Forbidden", timeout=90, interval=2, what="Ready Forbidden")  # fmt: skip
        assert not suspended(), "the CronJob was suspended through the refusal"
    eventually(suspended, timeout=90, interval=2, what="the CronJob suspended once allowed")
    suspended_at = datetime.now(UTC)
    pause = status["pause"]
    assert pause["reason"] == "FailurePolicy", pause
    assert pause["failures"] == 2, pause
    failed = [r for r in status.get("recentRuns", []) if r["result"] == "Failed"]
    assert failed, status
    assert pause["trippedBy"] == failed[0]["scheduledTime"], (pause, failed)
    status = eventually(lambda: (s := sj_status(kubectl, name, namespace))["conditions"] and
                        conditions_of(s)["Ready"]["reason"] == "PausedByFailurePolicy" and s,
                        timeout=60, interval=2, what="Ready says paused")  # fmt: skip
    assert status["lastResult"] == "PausedByFailurePolicy", status
    # Ground truth: nothing is made for the slots after the suspend.
    made = created_jobs(stack, namespace)
    assert len(made) >= 2, made
    after = suspended_at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    wait_until(after + timedelta(seconds=25))
    assert created_jobs(stack, namespace) == made, "a Job made while paused"
    ran = kubectl_sundial(kubectl, "run", name, "-n", namespace, "--timeout", "90")
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    eventually(lambda: not suspended(), timeout=90, interval=2,
               what="the CronJob unsuspended by the run now's success")  # fmt: skip
    # The status follows the CronJob's write in the same pass, a moment later.
    status = eventually(lambda: (s := sj_status(kubectl, name, namespace)).get("pause") is None
                        and s, timeout=30, what="status.pause cleared")  # fmt: skip
    recovered = [r for r in status.get("recentRuns", []) if r.get("requested", "")
                 .startswith("RunNow/") and r["result"] == "Succeeded"]  # fmt: skip
    assert recovered, status.get("recentRuns")
    lifted = kubectl.events(namespace, reason="FailurePauseLifted")
    assert lifted, "no FailurePauseLifted Event"
    assert "succeeded" in lifted[0]["message"], lifted
    eventually(lambda: len(created_jobs(stack, namespace)) > len(made) + 1, timeout=100,
               interval=2, what="the next slot runs after the recovery")  # fmt: skip
    assert not sj_status(kubectl, name, namespace).get("missedRuns")


# ---- import and adoption (issue 29) -----------------------------------------------------


def adopted_between_slots(stack: LocalStack, kubectl: Kubectl, namespace: str) -> None:
    """A CronJob made by `kubectl create cronjob`, running every minute on the node, is
    imported and adopted (`kubectl sundial import cronjob --adopt`) between M2 and M3: the
    same CronJob (its uid) goes on under its ScheduledJob, and the controller made exactly
    one Job for every slot from M1 to M4, before and after (the audit log); Sundial reports
    no slot missed."""
    now = datetime.now(UTC)
    m1 = now.replace(second=0, microsecond=0) + timedelta(minutes=1 if now.second < 40 else 2)
    kubectl.run("create", "cronjob", "legacy", "-n", namespace,
                f"--image={stack.images['busybox']}", "--schedule=* * * * *",
                "--restart=Never", "--", "true")  # fmt: skip
    uid = (kubectl.get("cronjob", "legacy", namespace) or {})["metadata"]["uid"]
    wait_until(m1 + timedelta(minutes=1, seconds=20))
    adopted = kubectl_sundial(kubectl, "import", "cronjob", "legacy", "-n", namespace, "--adopt")
    assert adopted.returncode == 0, adopted.stderr

    def owner_kinds() -> list[str]:
        cronjob = kubectl.get("cronjob", "legacy", namespace) or {}
        return [ref["kind"] for ref in cronjob["metadata"].get("ownerReferences", [])]

    eventually(lambda: owner_kinds() == ["ScheduledJob"], timeout=60, what="legacy adopted")
    assert (kubectl.get("cronjob", "legacy", namespace) or {})["metadata"]["uid"] == uid
    m4 = m1 + timedelta(minutes=3)
    wait_until(m4 + timedelta(seconds=30))

    made = [name for name in created_jobs(stack, namespace) if name.startswith("legacy-")]
    slots = [datetime.fromtimestamp(int(name.removeprefix("legacy-")) * 60, UTC) for name in made]
    assert len(slots) == len(set(slots)), f"a slot run twice: {made}"
    wanted = [m1 + timedelta(minutes=i) for i in range(4)]
    assert [slot for slot in sorted(slots) if m1 <= slot <= m4] == wanted, made
    current = eventually(
        lambda: (s := sj_status(kubectl, "legacy", namespace)).get("runAccounting", {})
        .get("accountedUntil") and parse_time(s["runAccounting"]["accountedUntil"]) >= m4 and s,
        timeout=60, what="legacy judged up to M4",
    )  # fmt: skip
    assert current.get("missedRuns", 0) == 0, current
    assert current.get("recentMissedRuns", []) == [], current


# ---- Replace, TTL, Forbid, activeDeadlineSeconds (issue 13) ---------------------------


def replace_ttl_forbid_and_deadlines(stack: LocalStack, kubectl: Kubectl, namespace: str) -> None:
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

    def judged_up_to_m3(name: str) -> dict[str, Any]:
        return eventually(
            lambda: (s := sj_status(kubectl, name, namespace)).get("runAccounting", {})
            .get("accountedUntil") and parse_time(s["runAccounting"]["accountedUntil"]) >= m3 and s,
            timeout=60, what=f"{name} judged up to M3",
        )  # fmt: skip

    for name in ("replaced", "ttl", "deadline"):
        current = judged_up_to_m3(name)
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
    current = judged_up_to_m3("forbid")
    skips = [parse_time(r["scheduledTime"]) for r in current.get("recentMissedRuns", [])
             if r["reason"] == "OverlapSkipped"]  # fmt: skip
    skipped = {when for when in skips if when <= m3}
    assert skipped == covered, (skipped, covered, spans)
    assert current.get("missedRuns", 0) == 0, current


# ---- every run's outcome (issue 10) ----------------------------------------------------


def run_for(current: dict[str, Any], slot: datetime) -> dict[str, Any] | None:
    runs = current.get("recentRuns", [])
    return next((r for r in runs if parse_time(r["scheduledTime"]) == slot), None)


def of_object(event: dict[str, Any], resource: str, namespace: str, name: str) -> bool:
    ref = event.get("objectRef") or {}
    return (ref.get("resource"), ref.get("namespace"), ref.get("name")) == (
        resource, namespace, name)  # fmt: skip


def status_writes(
    audit: list[dict[str, Any]], namespace: str, name: str, since: datetime, until: datetime
) -> list[str]:
    """When the operator wrote the ScheduledJob's status in [since, until)."""
    return [
        event["requestReceivedTimestamp"] for event in audit
        if event.get("userAgent", "").startswith("sundial/") and event["verb"] == "patch"
        and of_object(event, "scheduledjobs", namespace, name)
        and event["objectRef"].get("subresource") == "status"
        and since <= parse_time(event["requestReceivedTimestamp"]) < until
    ]  # fmt: skip


def job_lifetime(audit: list[dict[str, Any]], namespace: str, name: str) -> float:
    """Seconds from the Job's creation to the Job controller's last status write (its end),
    to the microsecond (the Job's own times are whole seconds)."""
    writes = [(event["verb"], parse_time(event["requestReceivedTimestamp"])) for event in audit
              if of_object(event, "jobs", namespace, name)]  # fmt: skip
    created = min(at for verb, at in writes if verb == "create")
    ended = max(at for verb, at in writes if verb in ("update", "patch"))
    return (ended - created).total_seconds()


def pod_of(kubectl: Kubectl, namespace: str, job_name: str) -> dict[str, Any]:
    pods = kubectl.list("pods", namespace, labels=f"job-name={job_name}")
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def outcomes_durations_thresholds_and_signals(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    busybox = stack.images["busybox"]

    def apply(name: str, job: dict[str, Any], **spec: Any) -> None:
        kubectl.apply(kubernetes_scheduledjob(name, namespace, job, failedRunsHistoryLimit=10,
                                              successfulRunsHistoryLimit=10, **spec))  # fmt: skip

    # Created at least 20 s before M1, the first slot: no run before M1 to count.
    if datetime.now(UTC).second >= 40:
        wait_until(datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1))
    m1 = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    apply("succeeds", no_retry_job(busybox, "sleep 3"))
    apply("exits", no_retry_job(busybox, "exit 3"))
    apply("too-long", no_retry_job(busybox, "sleep 40"), monitoring={"maxRunDuration": "10s"})
    streak = {"failureThreshold": 2, "recoveryThreshold": 2}
    apply("streak", no_retry_job(busybox, "exit 1"), monitoring=streak)

    # too-long, while it runs: TimedOut in status, RunTooLong True, no completion yet.
    def overrunning() -> dict[str, Any] | None:
        current = sj_status(kubectl, "too-long", namespace)
        run = run_for(current, m1)
        return current if run and run["result"] == "TimedOut" else None

    current = eventually(overrunning, timeout=m1_deadline(m1, 35), what="too-long TimedOut")
    run = run_for(current, m1)
    assert run is not None
    assert "completionTime" not in run, run
    assert run["reason"] == "MaxRunDurationExceeded", run
    too_long = conditions_of(current)["RunTooLong"]
    assert (too_long["status"], too_long["reason"]) == ("True", "RunningTooLong"), too_long
    assert datetime.now(UTC) < m1 + timedelta(seconds=40), "checked after the run ended"

    # succeeds and exits: the results, and durations from the Pods' own times.
    def ended(name: str, slot: datetime) -> dict[str, Any] | None:
        run = run_for(sj_status(kubectl, name, namespace), slot)
        return run if run and "completionTime" in run else None

    ok = eventually(lambda: ended("succeeds", m1), timeout=m1_deadline(m1, 60), what="succeeds")
    failed = eventually(lambda: ended("exits", m1), timeout=m1_deadline(m1, 60), what="exits")
    assert ok["result"] == "Succeeded", ok
    assert (failed["result"], failed["reason"]) == ("Failed", "BackoffLimitExceeded"), failed
    for run in (ok, failed):
        pod = pod_of(kubectl, namespace, run["jobName"])
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        pod_ran = parse_time(terminated["finishedAt"]) - parse_time(pod["status"]["startTime"])
        # The Pod's own times, not the Job controller's (seconds later on a busy node).
        assert abs(run["durationSeconds"] - pod_ran.total_seconds()) <= 1.0, (run, pod_ran)
        assert 0 <= run["startDelaySeconds"] < 30, run
        assert parse_time(run["startTime"]) - m1 == timedelta(seconds=run["startDelaySeconds"])
    assert 3 <= ok["durationSeconds"] < 15, ok
    # A run that ends within the fold of its Job's events (5 s) is written once, its
    # start and its end in one pass; a longer one twice: the writes a run requires.
    audit = audit_events(stack.log_dir / "audit.log")
    lasted = job_lifetime(audit, namespace, failed["jobName"])
    written = status_writes(audit, namespace, "exits", m1, m1 + timedelta(seconds=50))
    assert 1 <= len(written) <= 2, (lasted, written)
    if lasted < SHORT_RUN_SECONDS:  # (a loaded machine may start the Pod later)
        assert len(written) == 1, (lasted, written)
    exits = sj_status(kubectl, "exits", namespace)
    assert exits["lastResult"] == "Failed"
    assert exits["consecutiveFailures"] == 1
    assert parse_time(exits["lastFailedTime"]) == parse_time(failed["completionTime"])
    failing = conditions_of(exits)["RunsFailing"]
    assert (failing["status"], failing["reason"]) == ("True", "ConsecutiveFailures"), failing
    assert "BackoffLimitExceeded" in failing["message"]
    succeeded = sj_status(kubectl, "succeeds", namespace)
    assert succeeded["lastResult"] == "Succeeded"
    assert parse_time(succeeded["lastSuccessfulTime"]) == parse_time(ok["completionTime"])
    assert conditions_of(succeeded)["RunsFailing"]["status"] == "False"

    # streak after one failure: under failureThreshold 2, not failing yet.
    first = eventually(lambda: ended("streak", m1), timeout=m1_deadline(m1, 60), what="streak M1")
    assert first["result"] == "Failed"
    current = sj_status(kubectl, "streak", namespace)
    assert current["consecutiveFailures"] == 1
    assert conditions_of(current)["RunsFailing"]["reason"] == "BelowThreshold"

    # too-long after it ended: still TimedOut, with its duration; RunTooLong stays True.
    done = eventually(lambda: ended("too-long", m1), timeout=m1_deadline(m1, 75), what="ended")
    assert done["result"] == "TimedOut", done
    assert 39 <= done["durationSeconds"] < 55, done
    too_long = conditions_of(sj_status(kubectl, "too-long", namespace))["RunTooLong"]
    assert (too_long["status"], too_long["reason"]) == ("True", "LastRunTooLong"), too_long

    # streak: the second failure crosses the threshold; then the fix, applied before M3.
    m2 = m1 + timedelta(minutes=1)
    eventually(lambda: ended("streak", m2), timeout=m1_deadline(m2, 60), what="streak M2")
    current = sj_status(kubectl, "streak", namespace)
    assert current["consecutiveFailures"] == 2
    assert conditions_of(current)["RunsFailing"]["status"] == "True"
    assert datetime.now(UTC) < m2 + timedelta(seconds=50), "too late to fix before M3"
    apply("streak", no_retry_job(busybox, "exit 0"), monitoring=streak)

    # One success is not a recovery (recoveryThreshold 2); the second is.
    m3, m4 = m2 + timedelta(minutes=1), m2 + timedelta(minutes=2)
    third = eventually(lambda: ended("streak", m3), timeout=m1_deadline(m3, 60), what="M3")
    assert third["result"] == "Succeeded", third
    current = sj_status(kubectl, "streak", namespace)
    assert (current["consecutiveFailures"], current["consecutiveSuccesses"]) == (0, 1)
    assert conditions_of(current)["RunsFailing"]["status"] == "True"
    eventually(lambda: ended("streak", m4), timeout=m1_deadline(m4, 60), what="streak M4")
    current = sj_status(kubectl, "streak", namespace)
    recovered = conditions_of(current)["RunsFailing"]
    assert (recovered["status"], recovered["reason"]) == ("False", "Recovered"), recovered
    results = [r["result"] for r in current["recentRuns"] if parse_time(r["scheduledTime"]) >= m1]
    assert results == ["Succeeded", "Succeeded", "Failed", "Failed"], current["recentRuns"]

    # One Event per change: failing, then recovered.
    reasons = [e["reason"] for e in kubectl.events(namespace, involvedObject_name="streak")]
    assert reasons.count("RunsFailing") == 1, reasons
    assert reasons.count("RunsRecovered") == 1, reasons

    # Metrics: ended runs by result, durations, and the conditions to alert on.
    metrics = scrape(operator.metrics_url)
    labels = {"namespace": namespace, "backend": "kubernetes"}
    assert metrics[sample("sundial_runs_total", name="exits", result="Failed", **labels)] >= 1
    assert metrics[sample("sundial_runs_total", name="streak", result="Succeeded", **labels)] == 2
    assert metrics[sample("sundial_runs_total", name="streak", result="Failed", **labels)] == 2
    assert metrics[sample("sundial_last_run_duration_seconds", name="succeeds", **labels)] > 0
    assert metrics[sample("sundial_run_duration_seconds_count", **labels)] >= 1  # per namespace
    assert metrics[sample("sundial_consecutive_failures", name="streak", **labels)] == 0
    assert metrics[sample("sundial_condition", name="exits", condition="RunsFailing",
                          **labels)] == 1  # fmt: skip
    assert metrics[sample("sundial_condition", name="streak", condition="RunsFailing",
                          **labels)] == 0  # fmt: skip

    # No false miss in any of them.
    for name in ("succeeds", "exits", "too-long", "streak"):
        assert sj_status(kubectl, name, namespace).get("missedRuns", 0) == 0, name

    # A deleted object's series go.
    kubectl.run("delete", "scheduledjob", "streak", "-n", namespace)
    eventually(
        lambda: sample("sundial_consecutive_failures", name="streak", **labels)
        not in scrape(operator.metrics_url),
        timeout=30, what="streak's series dropped",
    )  # fmt: skip


def m1_deadline(slot: datetime, seconds: float) -> float:
    """Seconds from now until `seconds` after `slot`, plus slack for a loaded machine."""
    return max((slot + timedelta(seconds=seconds) - datetime.now(UTC)).total_seconds(), 0) + 30


# ---- a refused Job create ----------------------------------------------------------------

# The stack's kube-controller-manager runs on the admin's kubeconfig
# (--use-service-account-credentials=false): its CronJob controller creates Jobs as this
# user (the admin certificate's CN, hack/localstack/pki.py).
CONTROLLER_USER = "sundial-admin"


def iso_time(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def failed_creates(kubectl: Kubectl, namespace: str, cronjob: str) -> list[str]:
    listed = kubectl.events(namespace, involvedObject_kind="CronJob",
                            involvedObject_name=cronjob, reason="FailedCreate")  # fmt: skip
    return [str(e.get("message")) for e in listed]


def refused_job_create(stack: LocalStack, kubectl: Kubectl, namespace: str) -> None:
    """A slot whose Job the apiserver refused to create is missed: the CronJob controller's
    FailedCreate Event names the Job it could not make, and is no evidence that the slot
    ran (the look beyond the watch cache read any Event naming a Job as a run)."""
    name = "refused"
    # No node needed: the slot's Job is never made. A slot before the refusal is in force
    # (beside the other scenarios it may take a while) does make one, whose image is never
    # pulled: it stays active, so Allow, else the refused slot would be an overlap skipped.
    job = {"image": "registry.example/app:1"}
    kubectl.apply(kubernetes_scheduledjob(name, namespace, job, startingDeadlineSeconds=15,
                                          concurrencyPolicy="Allow"))  # fmt: skip
    eventually(lambda: kubectl.get("cronjob", name, namespace), what="the CronJob made")

    with stack.faults.deny(
        "refused-create",
        resources=["jobs"],
        api_groups=["batch"],
        operations=["CREATE"],
        users=[CONTROLLER_USER],
        namespace=namespace,
    ):
        # Picked once the refusal is in force (beside the other scenarios, the policy may
        # take a while): a slot at least 30 s ahead.
        slot = (datetime.now(UTC) + timedelta(seconds=90)).replace(second=0, microsecond=0)
        job_name = f"{name}-{int(slot.timestamp()) // 60}"
        # The controller tries and is refused (FailedCreate names the Job), then gives up
        # at the deadline; the slot is certain 10 s later.
        time.sleep(max((slot + timedelta(seconds=25) - datetime.now(UTC)).total_seconds(), 0))

        def reported() -> list[tuple[str, str]]:
            runs: list[dict[str, Any]] = sj_status(kubectl, name, namespace).get(
                "recentMissedRuns", []
            )
            return [
                (r["scheduledTime"], r["reason"])
                for r in runs
                if r["scheduledTime"] == iso_time(slot)
            ]

        assert eventually(
            reported, timeout=45, what=f"the refused slot {iso_time(slot)} reported"
        ) == [(iso_time(slot), "DeadlineExceeded")]
        status = sj_status(kubectl, name, namespace)
        assert status.get("missedRuns", 0) >= 1, status
        assert conditions_of(status)["RunsMissed"]["status"] == "True", status
        # The premise: the apiserver has no Job for the slot, and the controller's Events
        # name it in a refused create.
        assert job_name not in {j["metadata"]["name"] for j in owned_jobs(kubectl, namespace, name)}
        assert any(f'"{job_name}"' in m for m in failed_creates(kubectl, namespace, name)), (
            failed_creates(kubectl, namespace, name)
        )
