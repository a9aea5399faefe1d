"""The soak (issue 25): a seeded random mix of changes on both backends while a fault
scheduler injects real faults (docs/faults.md), then Sundial's promises checked as
invariants against ground truth: the apiserver's objects, sampled every second, and
Temporal's own executions; never Sundial's status, except for what it reported (misses,
readiness), which is what is judged.

CI runs a short seeded version (SUNDIAL_SOAK_SECONDS, 150 by default, a few minutes in
all); `make soak` a long one with a fresh seed. A failing seed is a reproducible bug:
SUNDIAL_SOAK_SEED=<seed> make soak. Each run writes its figures to soak-report.json beside
the servers' logs; docs/reliability.md keeps the long run's.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from soak_invariants import ObjectRef, Observations, Run, verdict
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from localstack import LocalStack
from sundial.kube import ApiException, load_api_client
from support import (
    SHARD_LABEL,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    eventually,
    faulted_operator,
    parse_time,
)
from temporal_workflows import TASK_QUEUE

pytestmark = [pytest.mark.cluster, pytest.mark.soak]

SEED = int(os.environ.get("SUNDIAL_SOAK_SEED", "20261206"))
SECONDS = float(os.environ.get("SUNDIAL_SOAK_SECONDS", "150"))
MAX_OBJECTS = int(os.environ.get("SUNDIAL_SOAK_OBJECTS", "6"))
SHARD = "soak"
USER = "sundial-soak"
CONNECTION = "soak"
NAMESPACES = ("soak-a", "soak-b")
# A wrong state seen for this long in a row is a state, not a race between two reads.
PERSIST_SECONDS = 4.0
RECOVERY_SECONDS = 60.0
SCHEDULES = ("* * * * *", "*/2 * * * *")
# What is not a miss (missed.counts_as_missed): the overlap policy at work, or "cannot tell".
NOT_MISSES = frozenset({"OverlapSkipped", "Unknown"})


def job_template(image: str) -> dict[str, Any]:
    return {"template": {"spec": {
        "backoffLimit": 0, "ttlSecondsAfterFinished": 3600,
        "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "job", "image": image, "command": ["true"]}]}},
    }}}  # fmt: skip


class Soak:
    def __init__(
        self, stack: LocalStack, kubectl: Kubectl, temporal: TemporalSide, rng: random.Random
    ) -> None:
        self.stack, self.kubectl, self.temporal, self.rng = stack, kubectl, temporal, rng
        self.api_relay = stack.faults.apiserver_relay("soak-api")
        self.temporal_relay = stack.faults.temporal_relay("soak-temporal")
        self.operator = self._operator()
        api = load_api_client(str(stack.kubeconfig))
        self.custom, self.batch = client.CustomObjectsApi(api), client.BatchV1Api(api)
        self.image = stack.images["busybox"]
        self.live: dict[ObjectRef, dict[str, Any]] = {}  # the spec the soak last applied
        self.ever: set[ObjectRef] = set()
        self.observed = Observations()
        self.actions: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.serial = 0
        self.samples = Counter[str]()
        self.last_fault_end = time.monotonic()
        self._fault_kinds: list[str] = []  # this round of the fault kinds, shuffled
        self._stop_sampling = threading.Event()

    def _operator(self) -> OperatorProcess:
        return faulted_operator(
            self.stack, "soak", SHARD, user=USER, sundial_via=self.api_relay,
            connection_refresh_seconds="3", temporal_resync_seconds="5",
        )  # fmt: skip

    # -- the scenario

    def run(self, seconds: float) -> None:
        for namespace in NAMESPACES:
            self.kubectl.run("delete", "namespace", namespace, "--ignore-not-found", "--wait=true",
                             timeout=180)  # fmt: skip
            self.kubectl.run("create", "namespace", namespace)
        self.kubectl.apply({
            "apiVersion": "sundial.dev/v1alpha1", "kind": "ClusterTemporalConnection",
            "metadata": {"name": CONNECTION},
            "spec": {"address": self.temporal_relay.address, "namespace": "default",
                     "namespaceSelector": {}},
        })  # fmt: skip
        self.operator.start()
        for _ in range(MAX_OBJECTS // 2):
            self.create()
        sampler = threading.Thread(target=self._sample_forever, daemon=True)
        sampler.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.act()
            if self.rng.random() < 0.5:
                self.inject_fault(min(end - time.monotonic(), self.rng.uniform(3, 10)))
            time.sleep(self.rng.uniform(1, 4))
        self.last_fault_end = time.monotonic()
        self._recovered()
        self._stop_sampling.set()
        sampler.join(30)
        self._sample_once()  # the last runs started
        self._collect_workflows()
        self._delete_everything()

    def act(self) -> None:
        choices: list[tuple[str, Callable[[], None], float]] = [
            ("create", self.create, 1.0 if len(self.live) < MAX_OBJECTS else 0.0),
            ("reschedule", self.reschedule, 1.0),
            ("switch backend", self.switch, 1.5),
            ("suspend or resume", self.suspend, 1.0),
            ("run now", self.run_now, 1.5),
            ("delete", self.delete, 0.5 if len(self.live) > 2 else 0.0),
        ]
        name, action, _ = self.rng.choices(choices, weights=[w for *_, w in choices])[0]
        if action in (self.create,) or self.live:
            action()
            self.actions[name] += 1

    def _pick(self) -> ObjectRef:
        return self.rng.choice(sorted(self.live))

    def _apply(self, ref: ObjectRef, spec: dict[str, Any]) -> None:
        self.live[ref] = spec
        self.kubectl.apply({
            "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": ref[1], "namespace": ref[0], "labels": {SHARD_LABEL: SHARD}},
            "spec": spec,
        })  # fmt: skip

    def create(self) -> None:
        self.serial += 1
        ref = (self.rng.choice(NAMESPACES), f"soak-{self.serial}")
        backend = self.rng.choice(("kubernetes", "temporal"))
        spec: dict[str, Any] = {
            "backend": backend, "schedule": self.rng.choice(SCHEDULES),
            "job": job_template(self.image),
            "workflow": {"type": "SundialTick", "taskQueue": TASK_QUEUE, "args": [ref[1]]},
        }  # fmt: skip
        if backend == "temporal":
            spec["temporalConnectionRef"] = {"kind": "ClusterTemporalConnection",
                                             "name": CONNECTION}  # fmt: skip
        self.ever.add(ref)
        self._apply(ref, spec)

    def reschedule(self) -> None:
        ref = self._pick()
        spec = dict(self.live[ref])
        spec["schedule"] = next(s for s in SCHEDULES if s != spec["schedule"])
        self._apply(ref, spec)

    def switch(self) -> None:
        ref = self._pick()
        spec = dict(self.live[ref])
        if spec["backend"] == "kubernetes":
            spec["backend"] = "temporal"
            spec["temporalConnectionRef"] = {"kind": "ClusterTemporalConnection",
                                             "name": CONNECTION}  # fmt: skip
        else:
            spec["backend"] = "kubernetes"
            spec.pop("temporalConnectionRef", None)
        # kubectl apply drops what the last applied configuration had and this one lacks.
        self._apply(ref, spec)

    def suspend(self) -> None:
        ref = self._pick()
        spec = dict(self.live[ref])
        spec["suspend"] = not spec.get("suspend", False)
        self._apply(ref, spec)

    def run_now(self) -> None:
        ref = self._pick()
        self.serial += 1
        self.kubectl.run("annotate", "--overwrite", "scheduledjob", ref[1], "-n", ref[0],
                         f"sundial.dev/run-now=soak-{self.serial}")  # fmt: skip

    def delete(self) -> None:
        ref = self._pick()
        del self.live[ref]
        self.kubectl.run("delete", "scheduledjob", ref[1], "-n", ref[0], "--wait=false")

    # -- faults

    def inject_fault(self, seconds: float) -> None:
        if seconds <= 1:
            return
        faults = self.stack.faults
        kinds: list[tuple[str, Callable[[], AbstractContextManager[Any]]]] = [
            ("429 on every request", lambda: faults.throttle(USER)),
            ("403 on status writes", lambda: faults.deny(
                "soak-status", resources=["scheduledjobs/status"], api_groups=["sundial.dev"],
                operations=["UPDATE"], users=[USER])),
            ("403 on Job creates", lambda: faults.deny(
                "soak-jobs", resources=["jobs"], api_groups=["batch"], operations=["CREATE"],
                users=[USER])),
            ("apiserver connections stalled", lambda: self.api_relay.stalled()),
            ("apiserver connections frozen", self._frozen),
            ("apiserver connections cut", self._cut),
            ("Temporal unreachable", lambda: self.temporal_relay.outage()),
            ("Temporal stalled", lambda: self.temporal_relay.stalled()),
            ("operator SIGKILLed", self._operator_killed),
            ("CronJob controller SIGKILLed", self._controller_manager_killed),
        ]  # fmt: skip
        # Every kind once per round, in a seeded order: a short run still meets them all.
        if not self._fault_kinds:
            self._fault_kinds = [kind for kind, _ in kinds]
            self.rng.shuffle(self._fault_kinds)
        kind = self._fault_kinds.pop()
        make = dict(kinds)[kind]
        self.faults[kind] += 1
        with make():
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if self.rng.random() < 0.3:
                    self.act()
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        self.last_fault_end = time.monotonic()

    def _frozen(self) -> AbstractContextManager[Any]:
        self.api_relay.freeze()
        return _on_exit(self.api_relay.resume)

    def _cut(self) -> AbstractContextManager[Any]:
        self.api_relay.cut()
        return nullcontext()

    def _controller_manager_killed(self) -> AbstractContextManager[Any]:
        """Slots really missed (ControllerDown): what must never be reported is a miss of
        a slot that ran."""
        self.stack.faults.kill("kube-controller-manager")
        return _on_exit(lambda: self.stack.faults.restart("kube-controller-manager"))

    def _operator_killed(self) -> AbstractContextManager[Any]:
        self.operator.signal(signal.SIGKILL)
        return _on_exit(self.operator.start)

    # -- ground truth, sampled

    def _sample_forever(self) -> None:
        while not self._stop_sampling.wait(1.0):
            try:
                self._sample_once()
            except (TimeoutError, ApiException, OSError, RPCError):
                # The admin's reads are not what is tested (Temporal may be the one
                # killed); the next sample reads again. Counted in the report.
                self.samples["failed"] += 1
            else:
                self.samples["taken"] += 1

    def _sample_once(self) -> None:
        now = time.monotonic()
        selector = f"{SHARD_LABEL}={SHARD}"
        sjs = self.custom.list_cluster_custom_object(
            "sundial.dev", "v1alpha1", "scheduledjobs", label_selector=selector,
            _request_timeout=10)["items"]  # fmt: skip
        cronjobs = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c
            for c in self.batch.list_cron_job_for_all_namespaces(
                label_selector="app.kubernetes.io/managed-by=sundial", _request_timeout=10
            ).to_dict()["items"]
            if c["metadata"]["namespace"] in NAMESPACES
        }
        for job in self.batch.list_job_for_all_namespaces(
            label_selector="sundial.dev/scheduledjob", _request_timeout=10
        ).items:
            meta = job.metadata
            slot = (meta.annotations or {}).get("batch.kubernetes.io/cronjob-scheduled-timestamp")
            if meta.namespace in NAMESPACES and slot:
                owner = (meta.namespace, meta.labels["sundial.dev/scheduledjob"])
                self.observed.runs.setdefault(f"job/{meta.uid}", Run(
                    owner, parse_time(slot), f"job/{meta.namespace}/{meta.name}",
                    (meta.annotations or {}).get("sundial.dev/request")))  # fmt: skip
        refs = [(sj["metadata"]["namespace"], sj["metadata"]["name"]) for sj in sjs]
        schedules = self.temporal.run(lambda: _describe_all(self.temporal.client, refs), 20)
        for sj, ref in zip(sjs, refs, strict=True):
            status = sj.get("status") or {}
            for miss in status.get("recentMissedRuns") or []:
                if miss["reason"] not in NOT_MISSES:
                    self.observed.reported_misses.add(
                        (ref, parse_time(miss["scheduledTime"]), miss["reason"])
                    )
            cronjob = cronjobs.get(ref)
            cron_active = cronjob is not None and not cronjob["spec"].get("suspend") and not \
                cronjob["metadata"].get("deletion_timestamp")  # fmt: skip
            schedule_active = schedules.get(ref) is False  # exists, not paused
            if cron_active and schedule_active:
                self.observed.both_active.append((now, ref))
            ready = {c["type"]: c for c in status.get("conditions") or []}.get("Ready", {})
            settled = status.get("observedGeneration") == sj["metadata"]["generation"]
            if (not cron_active and not schedule_active and ready.get("status") == "True"
                    and settled and not sj["spec"].get("suspend")
                    and not sj["metadata"].get("deletionTimestamp")):  # fmt: skip
                self.observed.neither_while_ready.append((now, ref))

    def _collect_workflows(self) -> None:
        async def collect() -> list[Run]:
            runs = []
            for ref in sorted(self.ever):
                query = f"TemporalScheduledById = 'sundial/{ref[0]}/{ref[1]}'"
                async for execution in self.temporal.client.list_workflows(query):
                    start = execution.search_attributes.get("TemporalScheduledStartTime")
                    slot = start[0] if start else execution.start_time
                    runs.append(Run(ref, slot, f"workflow/{execution.id}/{execution.run_id}"))
            return runs

        for run in self.temporal.run(collect, 60):
            self.observed.runs[run.what] = run

    # -- the end: recovered, then nothing left

    def _recovered(self) -> None:
        deadline = self.last_fault_end + RECOVERY_SECONDS

        def problems() -> list[str]:
            found = []
            code, why = self.operator.readiness()
            if code != 200:
                found.append(f"operator not ready: {code} {why.strip()}")
            for ref in sorted(self.live):
                sj = self.kubectl.get("scheduledjob", ref[1], ref[0]) or {}
                status = sj.get("status") or {}
                ready = {c["type"]: c for c in status.get("conditions") or []}.get("Ready")
                if status.get("observedGeneration") != (sj.get("metadata") or {}).get("generation"):
                    found.append(f"{ref[0]}/{ref[1]}: generation not observed")
                elif ready is None or (
                    ready["status"] != "True" and ready.get("reason") in (None, "", "InternalError")
                ):
                    found.append(f"{ref[0]}/{ref[1]}: Ready {ready}")
            return found

        while (found := problems()) and time.monotonic() < deadline:
            time.sleep(1)
        self.observed.not_recovered = found

    def _delete_everything(self) -> None:
        """The objects of the first namespace one by one; the second namespace with its
        objects still in it (its deletion must finish, the finalizers served)."""
        for ref in sorted(self.live):
            if ref[0] == NAMESPACES[0]:
                self.kubectl.run("delete", "scheduledjob", ref[1], "-n", ref[0], "--wait=false")
        self.kubectl.run("delete", "namespace", NAMESPACES[1], "--wait=false")
        self.live.clear()

        def left() -> list[str]:
            found = []
            for namespace in NAMESPACES:
                for kind in ("scheduledjobs", "cronjobs"):
                    listed = self.kubectl.run("get", kind, "-n", namespace, "-o", "name").stdout
                    found += [f"{namespace}/{line}" for line in listed.split()]
            refs = sorted(self.ever)
            schedules = self.temporal.run(lambda: _describe_all(self.temporal.client, refs), 30)
            found += [
                f"schedule sundial/{r[0]}/{r[1]}" for r, s in schedules.items() if s is not None
            ]
            return found

        try:
            eventually(lambda: not left(), timeout=120, what="nothing left")
        except AssertionError:
            self.observed.left_behind = left()
        for namespace in NAMESPACES:  # the second one may be gone already
            self.kubectl.run("delete", "namespace", namespace, "--ignore-not-found",
                             "--wait=false")  # fmt: skip

        def namespaces_left() -> list[str]:
            got = [self.kubectl.run("get", "namespace", n, check=False) for n in NAMESPACES]
            return [n for n, answer in zip(NAMESPACES, got, strict=True) if answer.returncode == 0]

        try:
            eventually(lambda: not namespaces_left(), timeout=180, what="namespaces gone")
        except AssertionError:
            self.observed.stuck_namespaces = namespaces_left()

    def stop(self) -> None:
        self._stop_sampling.set()
        self.operator.stop()
        self.kubectl.run("delete", "clustertemporalconnection", CONNECTION, "--ignore-not-found")

    def report(self) -> dict[str, Any]:
        violations = verdict(self.observed, PERSIST_SECONDS)
        return {
            "seed": SEED, "seconds": SECONDS, "objects": len(self.ever),
            "actions": dict(self.actions), "faults": dict(self.faults),
            "runs_seen": len(self.observed.runs), "samples": dict(self.samples),
            "violations": {name: len(found) for name, found in violations.items()},
            "details": violations,
        }  # fmt: skip


def _on_exit(action: Callable[[], None]) -> AbstractContextManager[Any]:
    class OnExit:
        def __enter__(self) -> None:
            return None

        def __exit__(self, *_: object) -> None:
            action()

    return OnExit()


async def _describe_all(temporal: Client, refs: list[ObjectRef]) -> dict[ObjectRef, bool | None]:
    """Each object's schedule: paused (True), running (False) or absent (None)."""

    async def one(ref: ObjectRef) -> bool | None:
        try:
            described = await temporal.get_schedule_handle(f"sundial/{ref[0]}/{ref[1]}").describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return bool(described.schedule.state.paused)

    answers = await asyncio.gather(*(one(ref) for ref in refs))
    return dict(zip(refs, answers, strict=True))


@pytest.fixture
def soak(stack: LocalStack, kubectl: Kubectl, crd_installed: None,
         temporal: TemporalSide) -> Iterator[Soak]:  # fmt: skip
    running = Soak(stack, kubectl, temporal, random.Random(SEED))
    yield running
    running.stop()


def test_promises_hold_under_random_faults(soak: Soak, stack: LocalStack) -> None:
    began = datetime.now().astimezone()
    soak.run(SECONDS)
    report = {"started": began.isoformat(timespec="seconds"), **soak.report()}
    (stack.log_dir / "soak-report.json").write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps({k: v for k, v in report.items() if k != "details"}, indent=2))
    assert not any(report["details"].values()), json.dumps(report, indent=2, default=str)
    # The checks saw the run: most samples read, and runs started on both backends.
    assert report["samples"].get("taken", 0) > report["samples"].get("failed", 0)
    assert any(w.startswith("job/") for w in soak.observed.runs), "no Job seen"
    assert any(w.startswith("workflow/") for w in soak.observed.runs), "no workflow seen"
