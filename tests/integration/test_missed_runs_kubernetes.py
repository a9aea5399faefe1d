"""Missed and skipped runs on the kubernetes backend, caused by real faults on the real
stack: the controller manager and the operator are stopped and started.

One timeline serves every case, so the waits run concurrently: about eight minutes of
minute-aligned slots instead of eight minutes per case.

    M1            every job runs once on the real node (busybox `exit 0`; `stuck` sleeps)
    M2            the controller is down from M2-5s to M2+25s: every job runs late
    M3            all run; `dropped` and `deadline` are created before it
    M4 M5 M6      the controller manager is killed and the operator stopped; the operator
                  comes back at M6+20s, the controller at M6+30s and starts `dropped`'s
                  M6 slot. An operator of its own serving two more jobs (UnwatchedOutage)
                  is SIGKILLed at M4+20s and started only after the controller's return:
                  the outage it did not watch is judged from the evidence left;
                  then the dashboard is opened in a real browser on this history
    M7            checked at M7+20s; the page has drawn M7's run as it ended

Three more jobs, one per spec.catchUp policy, show what runs late after each outage (issue
30): None runs nothing late (M2, M4-M6 missed: each more than 15 s late), Latest only the
latest (M2, M6: the controller's own deadline), All every slot (M4 and M5 by Sundial's
CatchUp request once the operator is back, M2 and M6 by the controller); the Jobs counted
by the apiserver's audit log and listing, not by Sundial's status.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from cdp import Browser
from dashboard_page import dashboard, keep, rows, tip
from localstack import LocalStack
from support import (
    Background,
    Kubectl,
    OperatorProcess,
    eventually,
    faulted_operator,
    in_shard,
    job_slots,
    kubernetes_scheduledjob,
    no_retry_job,
    one_create_per_job,
    ready,
    sample,
    scrape,
    sj_status,
)

pytestmark = pytest.mark.cluster

NAMESPACE = "missed-runs-k8s"
STUCK = "stuck"


def scheduledjob(name: str, image: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("schedule", "* * * * *")
    # Every job exits at once, but `stuck`'s, which outlives the whole timeline.
    command = ["sleep", "3600"] if name == STUCK else ["sh", "-c", "exit 0"]
    spec.setdefault("job", {"image": image, "command": command, "ttlSecondsAfterFinished": 3600})
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def wait_until(moment: datetime) -> None:
    delay = (moment - datetime.now(UTC)).total_seconds()
    if delay > 0:
        time.sleep(delay)


def next_minute(after: datetime) -> datetime:
    return after.replace(second=0, microsecond=0) + timedelta(minutes=1)


def status(kubectl: Kubectl, name: str) -> dict[str, Any]:
    sj = kubectl.get("scheduledjob", name, NAMESPACE)
    assert sj is not None, name
    result: dict[str, Any] = sj.get("status", {})
    return result


def misses(kubectl: Kubectl, name: str) -> list[tuple[str, str]]:
    return [(r["scheduledTime"], r["reason"]) for r in status(kubectl, name).get(
        "recentMissedRuns", [])]  # fmt: skip


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.mark.timeout(900)  # one eight-minute timeline of real slots
def test_faults_on_the_kubernetes_backend_are_counted_once_with_their_reason(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    busybox = stack.images["busybox"]

    def sj(name: str, **spec: Any) -> dict[str, Any]:
        return scheduledjob(name, busybox, **spec)

    kubectl.run("create", "namespace", NAMESPACE)
    now = datetime.now(UTC)
    m1 = next_minute(now if now.second < 40 else now + timedelta(minutes=1))
    m2, m3, m4, m5, m6, m7 = (m1 + timedelta(minutes=i) for i in range(1, 7))

    kubectl.apply(sj("healthy"))
    kubectl.apply(sj("late", startingDeadlineSeconds=60))
    kubectl.apply(sj(STUCK, concurrencyPolicy="Forbid"))
    kubectl.apply(sj("paused", suspend=True))
    for policy in CATCH_UP:
        # History kept: the Jobs are the ground truth (the controller would delete all but
        # the last successful one, Sundial's among them).
        kubectl.apply(sj(f"catchup-{policy.lower()}", catchUp={"policy": policy},
                         successfulRunsHistoryLimit=10))  # fmt: skip
    kubectl.apply(sj(FAILING, job=no_retry_job(busybox, f"echo '{FAILING_SAYS}' > "
                                               "/dev/termination-log; exit 3")))  # fmt: skip
    unwatched = UnwatchedOutage(stack, kubectl, namespace)
    try:
        unwatched.start()

        # M2: the controller is down across the slot; it starts it late, within deadlines.
        wait_until(m2 - timedelta(seconds=5))
        stack.stop_controller_manager()
        wait_until(m2 + timedelta(seconds=25))
        stack.start_controller_manager()
        wait_until(m2 + timedelta(seconds=30))
        kubectl.apply(sj("dropped"))
        kubectl.apply(sj("deadline", startingDeadlineSeconds=15))

        # By M3+20s everything before M3 is certain: healthy and late missed nothing.
        wait_until(m3 + timedelta(seconds=20))
        for name in ("healthy", "late"):
            current = status(kubectl, name)
            assert current.get("missedRuns", 0) == 0, (name, current)
            assert current.get("skippedRuns", 0) == 0, (name, current)
            assert current["lastScheduleTime"] == iso(m3), (name, current)
            conditions = {c["type"]: c for c in current["conditions"]}
            assert conditions["RunsMissed"]["status"] == "False", (name, conditions)
        stuck = eventually(lambda: status(kubectl, STUCK).get("skippedRuns"), timeout=30,
                           what="stuck: a slot skipped while its Job runs")  # fmt: skip
        assert stuck >= 1
        assert (iso(m2), "OverlapSkipped") in misses(kubectl, STUCK)

        # M4-M6: the controller manager is killed; the session's operator is stopped, the
        # unwatched one killed before M4 is certain.
        wait_until(m3 + timedelta(seconds=25))
        operator.stop()
        stack.faults.kill("kube-controller-manager")
        unwatched.down = datetime.now(UTC)
        wait_until(m4 + timedelta(seconds=20))
        unwatched.operator.signal(signal.SIGKILL)
        try:
            wait_until(m6 + timedelta(seconds=20))
            operator.start()
            # The operator judges what passed while it was away.
            eventually(
                lambda: (iso(m5), "ControllerDown") in misses(kubectl, "dropped"),
                timeout=60,
                what="dropped: M4 and M5 found after the operator's restart",
            )
            eventually(
                lambda: (iso(m6), "DeadlineExceeded") in misses(kubectl, "deadline"),
                timeout=60,
                what="deadline: M4-M6 found after the operator's restart",
            )
        finally:
            wait_until(m6 + timedelta(seconds=30))
            stack.faults.restart("kube-controller-manager")
            unwatched.up = datetime.now(UTC)
        unwatched.judged(m4, m5, m6, slots=[m1, m2, m3, m4, m5, m6, m7])
        page = Background(lambda: the_page_draws_the_real_history(stack, tmp_path))

        # The controller starts only `dropped`'s most recent slot, M6; M7 runs on time.
        wait_until(m7 + timedelta(seconds=20))
        page.join(PAGE_SECONDS)
    finally:
        unwatched.stop()
    dropped = status(kubectl, "dropped")
    assert dropped["missedRuns"] == 2, dropped
    assert misses(kubectl, "dropped") == [(iso(m4), "ControllerDown"),
                                          (iso(m5), "ControllerDown")]  # fmt: skip
    assert dropped["lastMissedTime"] == iso(m5)
    conditions = {c["type"]: c for c in dropped["conditions"]}
    assert conditions["RunsMissed"]["status"] == "False", "M7 ran on time"
    assert conditions["Ready"]["status"] == "True", "a miss does not make it unready"

    deadline = status(kubectl, "deadline")
    assert deadline["missedRuns"] == 3, deadline
    assert misses(kubectl, "deadline") == [(iso(m), "DeadlineExceeded") for m in (m4, m5, m6)]

    paused = status(kubectl, "paused")
    assert paused.get("missedRuns", 0) == 0, paused
    assert paused.get("skippedRuns", 0) == 0, paused

    stuck_status = status(kubectl, STUCK)
    assert stuck_status.get("missedRuns", 0) == 0, stuck_status
    assert stuck_status["skippedRuns"] >= 4, stuck_status

    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in kubectl.events(NAMESPACE)}
    assert ("dropped", "RunMissed") in reasons
    assert (STUCK, "RunSkipped") in reasons

    caught_up_as_the_policies_say(stack, kubectl, [m1, m2, m3, m4, m5, m6, m7])

    metrics = scrape(operator.metrics_url)
    labels = {"namespace": NAMESPACE, "backend": "kubernetes"}
    assert metrics[sample("sundial_missed_runs_total", name="dropped", reason="ControllerDown",
                          **labels)] == 2  # fmt: skip
    assert metrics[sample("sundial_missed_runs_total", name="deadline",
                          reason="DeadlineExceeded", **labels)] == 3  # fmt: skip
    next_run = metrics[sample("sundial_next_run_timestamp_seconds", name="dropped", **labels)]
    assert next_run > datetime.now(UTC).timestamp()
    assert metrics[sample("sundial_reconciles_total", result="ok")] > 0


# ---- spec.catchUp across the two outages (issue 30) ------------------------------------------

CATCH_UP = ("None", "Latest", "All")


def caught_up_as_the_policies_say(stack: LocalStack, kubectl: Kubectl,
                                  slots: list[datetime]) -> None:  # fmt: skip
    """The slots each policy's job ran, and how often: the Jobs the apiserver created for
    it (audit log) and holds (each Job's scheduled-timestamp), one per slot."""
    m1, m2, m3, m4, m5, m6, m7 = slots
    expected = {
        "None": ({m1, m3, m7}, [(m2, "DeadlineExceeded"), (m4, "DeadlineExceeded"),
                                (m5, "DeadlineExceeded"), (m6, "DeadlineExceeded")]),
        "Latest": ({m1, m2, m3, m6, m7}, [(m4, "ControllerDown"), (m5, "ControllerDown")]),
        "All": (set(slots), []),
    }  # fmt: skip
    for policy, (ran, missed) in expected.items():
        name = f"catchup-{policy.lower()}"
        jobs = eventually(
            lambda name=name, ran=ran: (j := job_slots(kubectl, NAMESPACE, name))
            and set(j) >= ran and j,
            timeout=90, what=f"{name}: the slots {sorted(ran)} run",
        )  # fmt: skip
        # Slots before M1 ran too (the jobs are made before it), as the timeline's others.
        assert {slot for slot in jobs if m1 <= slot <= m7} == ran, (policy, sorted(jobs))

        eventually(partial(one_create_per_job, stack, kubectl, NAMESPACE, name), timeout=40,
                   what=f"{name}: each Job created once (the audit log)")  # fmt: skip
        current = status(kubectl, name)
        assert misses(kubectl, name) == [(iso(slot), reason) for slot, reason in missed], policy
        assert current.get("missedRuns", 0) == len(missed), (policy, current)
        catch_ups = [r for r in current.get("requests", []) if r["kind"] == "CatchUp"]
        if policy == "All":
            # M4 and M5, by Sundial, one at a time (Forbid); the rest by the controller.
            assert [(r["start"], r["end"], r["outcome"], r["runsStarted"]) for r in catch_ups] == [
                (iso(m4), iso(m5), "Done", 2)
            ], catch_ups
            for slot in (m4, m5):
                assert not jobs[slot].startswith(f"{name}-{int(slot.timestamp()) // 60}")
        else:
            assert catch_ups == [], (policy, catch_ups)


# ---- the dashboard on this history (issue 31) ---------------------------------------------

FAILING = "failing"
FAILING_SAYS = "no input for today"
# Opened after the outage is judged (about M6+40s): the first look, then a run ending
# (M6's, started late, or M7's) drawn with no reload; a minute more on a loaded machine.
PAGE_SECONDS = 150


def the_page_draws_the_real_history(stack: LocalStack, workdir: Path) -> None:
    """`kubectl sundial dashboard` in headless Chromium on the real node's history: runs
    that succeeded, a run that failed (its reason and its container's words on hover),
    slots missed while the controller manager was down (ControllerDown, DeadlineExceeded),
    slots skipped beside a run that never ends; then a run that ends is drawn live."""
    with (
        dashboard(stack.kubeconfig, stack.log_dir / "dashboard-real-node.log") as url,
        Browser.start(workdir) as browser,
    ):
        browser.goto(f"{url}?ns={NAMESPACE}")
        browser.wait_for("document.documentElement.dataset.synced === '1'")
        drawn = rows(browser)
        assert {"healthy", "late", STUCK, "paused", FAILING, "dropped", "deadline"} <= set(drawn)
        for name, kinds in {
            "healthy": {"succeeded", "missed"},
            STUCK: {"skipped", "running"},
            FAILING: {"failed", "missed"},
            "dropped": {"missed"},
            "deadline": {"missed"},
        }.items():
            assert kinds <= set(drawn[name]["cells"]), (name, drawn[name])
        assert drawn[FAILING]["state"] == "failing", drawn[FAILING]
        assert drawn["paused"]["state"] == "suspended", drawn["paused"]
        assert drawn["paused"]["cells"] == [], "a suspended job ran or missed nothing"

        def row(name: str) -> str:
            return f'.row[data-key="{NAMESPACE}/{name}"]'

        said = tip(browser, f'{row(FAILING)} .cell[data-kind="failed"]', "BackoffLimitExceeded")
        assert FAILING_SAYS in said, said
        tip(browser, f'{row("dropped")} .cell[data-kind="missed"]', "ControllerDown")
        tip(browser, f'{row("deadline")} .cell[data-kind="missed"]', "DeadlineExceeded")
        tip(browser, f'{row(STUCK)} .cell[data-kind="skipped"]', "OverlapSkipped")
        browser.hover("h1")

        # Live: a run of healthy's ends (M6's, started late, or M7's) and is drawn, no reload.
        loaded = browser.evaluate("window.sundial.loadedAt")
        succeeded = drawn["healthy"]["cells"].count("succeeded")
        eventually(lambda: rows(browser)["healthy"]["cells"].count("succeeded") > succeeded,
                   timeout=PAGE_SECONDS - 30, what="a run ended, on the open page")  # fmt: skip
        assert browser.evaluate("window.sundial.loadedAt") == loaded, "the page was reloaded"
        keep(browser.screenshot(stack.log_dir / "dashboard-real-node.png"))
        assert browser.errors() == []


# ---- an outage the operator did not watch (issue 25, defect 16) ---------------------------


def controllers_reading(down: datetime, up: datetime, slots: list[datetime],
                        deadline: float | None) -> dict[datetime, str]:  # fmt: skip
    """Which slots the CronJob controller dropped, by its own rules (scheduling-semantics.md),
    read from the outage alone: back at `up` it starts only the most recent slot it missed,
    if within startingDeadlineSeconds; each earlier one is dropped, DeadlineExceeded if its
    deadline ran out before the next slot, else ControllerDown."""
    missed = [slot for slot in slots if down < slot <= up]
    limit = timedelta(seconds=deadline) if deadline is not None else None
    if missed and (limit is None or up <= missed[-1] + limit):
        missed = missed[:-1]
    return {
        slot: "DeadlineExceeded"
        if limit is not None and slot + limit < slots[slots.index(slot) + 1]
        else "ControllerDown"
        for slot in missed
    }


class UnwatchedOutage:
    """Issue 25, defect 16, on the same timeline: an outage the operator did not watch. An
    operator of its own (a shard) serves two jobs; it is SIGKILLed during the M4-M6 outage
    (before M4 is certain) and started again only once the controller is back and has
    started M6. M4 and M5, which no Job was ever made for, must be reported missed with the
    controller's reason, equal to an independent reading of its rules, as the apiserver's
    Jobs and the controller's Events show; not Unknown. (Before, they were RunUnverified:
    no count, no RunsMissed, no alert.) The slots that ran are not reported."""

    SHARD = "unwatched-outage"
    # name: startingDeadlineSeconds. 55: past the controller's return at M6+30 (it starts
    # M6 late), shorter than a minute (the earlier slots' deadlines run out before the next).
    JOBS: dict[str, int | None] = {"unwatched-dropped": None, "unwatched-deadline": 55}

    def __init__(self, stack: LocalStack, kubectl: Kubectl, namespace: str) -> None:
        self.kubectl = kubectl
        self.namespace = namespace
        self.operator = faulted_operator(stack, "unwatched-outage", self.SHARD,
                                         user="sundial-unwatched")  # fmt: skip
        self.image = stack.images.get("busybox", "busybox")
        self.down = self.up = datetime.now(UTC)

    def start(self) -> None:
        self.operator.start()
        for name, deadline in self.JOBS.items():
            # Allow: a Job the controller starts late is never skipped. Ten Jobs kept: with
            # a node they succeed, and the default history (1) would delete the Jobs of the
            # slots that ran, the ground truth checked.
            extra: dict[str, Any] = {"concurrencyPolicy": "Allow",
                                     "successfulRunsHistoryLimit": 10}  # fmt: skip
            if deadline is not None:
                extra["startingDeadlineSeconds"] = deadline
            job = no_retry_job(self.image, "exit 0")
            manifest = kubernetes_scheduledjob(name, self.namespace, job, **extra)
            self.kubectl.apply(in_shard(manifest, self.SHARD))
        for name in self.JOBS:
            eventually(lambda name=name: ready(self.kubectl, name, self.namespace),
                       timeout=30, what=f"{name} Ready")  # fmt: skip

    def stop(self) -> None:
        self.operator.stop()

    def slots_run(self, name: str) -> set[datetime]:
        return set(job_slots(self.kubectl, self.namespace, name))

    def judged(self, *dropped: datetime, slots: list[datetime]) -> None:
        """After the controller is back: it starts the latest slot (`dropped[-1]`), then the
        operator is started and must report the earlier ones as the controller's rules say."""
        *missed, started_late = dropped
        for name in self.JOBS:
            eventually(lambda name=name: started_late in self.slots_run(name), timeout=40,
                       what=f"{name}: the controller starts the last slot")  # fmt: skip
        self.operator.start()
        restarted = datetime.now(UTC)
        expected = {name: controllers_reading(self.down, self.up, slots, deadline)
                    for name, deadline in self.JOBS.items()}  # fmt: skip
        assert expected == {
            "unwatched-dropped": dict.fromkeys(missed, "ControllerDown"),
            "unwatched-deadline": dict.fromkeys(missed, "DeadlineExceeded"),
        }, expected
        for name in self.JOBS:
            want = [(iso(slot), reason) for slot, reason in expected[name].items()]
            eventually(lambda name=name, want=want: misses_in(self.kubectl, name,
                                                              self.namespace) == want,
                       timeout=60, what=f"{name}: {want} reported after the restart")  # fmt: skip
        took = (datetime.now(UTC) - restarted).total_seconds()

        # Ground truth: the Jobs on the apiserver and the controller's own Events.
        for name in self.JOBS:
            ran = self.slots_run(name)
            assert started_late in ran, (name, sorted(ran))
            assert ran & {slot for slot in slots if slot < missed[0]}, (name, sorted(ran))
            assert not ran & set(missed), (name, sorted(ran))
            created = {e["message"]
                       for e in self.kubectl.events(self.namespace, involvedObject_name=name)
                       if e["involvedObject"]["kind"] == "CronJob"
                       and e["reason"] == "SuccessfulCreate"}  # fmt: skip
            for slot in missed:
                assert f"Created job {name}-{int(slot.timestamp()) // 60}" not in created
            current = sj_status(self.kubectl, name, self.namespace)
            assert current["missedRuns"] == len(missed), (name, current)
            assert current["lastMissedTime"] == iso(missed[-1]), (name, current)
        reasons = {(e["involvedObject"]["name"], e["reason"])
                   for e in self.kubectl.events(self.namespace)
                   if e["involvedObject"]["kind"] == "ScheduledJob"}  # fmt: skip
        assert {(name, "RunMissed") for name in self.JOBS} <= reasons, reasons
        assert not {reason for _, reason in reasons if reason == "RunUnverified"}, reasons
        metrics = scrape(self.operator.metrics_url)
        labels = {"namespace": self.namespace, "backend": "kubernetes"}
        for name in self.JOBS:
            for reason in set(expected[name].values()):
                assert metrics[sample("sundial_missed_runs_total", name=name, reason=reason,
                                      **labels)] == len(missed)  # fmt: skip
        print(
            f"unwatched outage: {len(missed)} slots reported {took:.1f}s after the "
            f"operator's restart (controller down {self.down:%H:%M:%S}-{self.up:%H:%M:%S})"
        )


def misses_in(kubectl: Kubectl, name: str, namespace: str) -> list[tuple[str, str]]:
    return [(r["scheduledTime"], r["reason"])
            for r in sj_status(kubectl, name, namespace).get("recentMissedRuns", [])]  # fmt: skip
