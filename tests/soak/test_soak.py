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
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from kubernetes import client
from soak_invariants import (
    Backfill,
    ObjectRef,
    Observations,
    Run,
    Sampled,
    attribute_backfills,
    attribute_run_nows,
    foreign_writes,
    mix_verdict,
    not_recovered,
    switch_held,
    verdict,
    wrong_states,
)
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from localstack import LocalStack
from sundial.kube import ApiException, load_api_client
from sundial.planning.temporal_schedule import SWITCH_NOTE
from support import (
    SHARD_LABEL,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    audit_events,
    eventually,
    faulted_operator,
    parse_time,
)
from temporal_workflows import TASK_QUEUE, Fail, Sleep, Tick

pytestmark = [pytest.mark.cluster, pytest.mark.soak]

SEED = int(os.environ.get("SUNDIAL_SOAK_SEED", "20261206"))
SECONDS = float(os.environ.get("SUNDIAL_SOAK_SECONDS", "150"))
MAX_OBJECTS = int(os.environ.get("SUNDIAL_SOAK_OBJECTS", "6"))
SHARD = "soak"
USER = "sundial-soak"
# Two ClusterTemporalConnections through the same relay, each to a Temporal namespace of
# its own (a connection change moves the schedule), both admitting only the namespaces
# labelled ADMITTED (taking the label away revokes them: the schedules pause, defect 6).
CONNECTION = "soak"
CONNECTIONS = {CONNECTION: "default", "soak-2": "sundial-soak-2"}
ADMITTED = "sundial.dev/soak-temporal"
NAMESPACES = ("soak-a", "soak-b")
ADOPT = "sundial.dev/adopt"
# The note of the paused schedules the soak makes outside Sundial: no schedule of Sundial's.
FOREIGN_NOTE = "made outside Sundial by the soak"
BACKFILL = "sundial.dev/backfill"
# A revoked schedule must be paused once a pass has read the namespace's labels: the
# connection refresh (3 s here), and after a fault the queue's backoff (at most 60 s).
REVOCATION_GRACE = 60.0
# A backfill's range ends this long before it is asked for: the scheduled runs of its slots
# started long before, so a Temporal execution of those slots started after the request is
# the backfill's (soak_invariants.attribute_backfills).
BACKFILL_AGE = timedelta(minutes=2)
# A wrong state seen for this long in a row is a state, not a race between two reads.
PERSIST_SECONDS = 4.0
RECOVERY_SECONDS = 60.0
SCHEDULES = ("* * * * *", "*/2 * * * *")
# What is not a miss (missed.counts_as_missed): the overlap policy at work, or "cannot tell".
NOT_MISSES = frozenset({"OverlapSkipped", "Unknown"})
# The faults that keep the operator from writing to the apiserver (a pass waits them out).
APISERVER_FAULTS = frozenset({
    "429 on every request", "403 on status writes", "apiserver connections stalled",
    "apiserver connections frozen", "apiserver connections cut", "operator SIGKILLed",
})  # fmt: skip


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
        self.core = client.CoreV1Api(api)
        # Without a node (SUNDIAL_NODE=0) no image is imported, and no Job runs.
        self.image = stack.images["busybox"] if stack.with_node else "busybox"
        self.live: dict[ObjectRef, dict[str, Any]] = {}  # the spec the soak last applied
        self.annotations: dict[ObjectRef, dict[str, str]] = {}  # applied with it (adopt)
        self.ever: set[ObjectRef] = set()
        # Temporal's clients, by Temporal namespace (the soak's own, direct, no relay).
        self.clients: dict[str, Client] = {"default": temporal.client}
        self._workers: list[asyncio.Task[None]] = []
        self.backfills: list[Backfill] = []
        self.run_nows: list[tuple[ObjectRef, str, datetime]] = []  # (object, label, written)
        self.trigger_problems: list[str] = []  # Temporal runs of no run-now of their own
        self.unlabelled: dict[str, float] = {}  # namespace -> when its label was taken away
        self.foreign_cronjobs: set[ObjectRef] = set()  # made by the soak, never adopted
        self.foreign_schedules: dict[ObjectRef, datetime] = {}  # the same: id -> created at
        self.fault_on = False
        # The apiserver faults' windows (wall clock): (start, end or None while in force).
        self.apiserver_faults: list[tuple[datetime, datetime | None]] = []
        self._tried: set[str] = set()
        # What happened when (wall clock): actions, faults, wrong samples; in the report.
        self.journal: list[str] = []
        self.observed = Observations()
        self.actions: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.serial = 0
        self.samples = Counter[str]()
        self.last_fault_end = time.monotonic()
        self._fault_kinds: list[str] = []  # this round of the fault kinds, shuffled
        self._stop_sampling = threading.Event()

    def _note(self, text: str) -> None:
        self.journal.append(f"{datetime.now(UTC).strftime('%H:%M:%S.%f')[:12]} {text}")

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
            self.kubectl.run("label", "namespace", namespace, f"{ADMITTED}=yes")
        self._second_temporal_namespace()
        for name, temporal_namespace in CONNECTIONS.items():
            self.kubectl.apply({
                "apiVersion": "sundial.dev/v1alpha1", "kind": "ClusterTemporalConnection",
                "metadata": {"name": name},
                "spec": {"address": self.temporal_relay.address, "namespace": temporal_namespace,
                         "namespaceSelector": {"matchLabels": {ADMITTED: "yes"}}},
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

    def _second_temporal_namespace(self) -> None:
        """The second connection's Temporal namespace, and a worker there."""
        name = CONNECTIONS["soak-2"]

        async def register() -> None:
            try:
                await self.temporal.client.workflow_service.register_namespace(
                    RegisterNamespaceRequest(
                        namespace=name, workflow_execution_retention_period=Duration(seconds=86400)
                    )
                )
            except RPCError as error:
                if error.status != RPCStatusCode.ALREADY_EXISTS:
                    raise

        self.temporal.run(register)

        async def connect() -> bool:
            try:
                self.clients[name] = await Client.connect(self.temporal.address, namespace=name)
            except RuntimeError:
                return False
            worker = Worker(self.clients[name], task_queue=TASK_QUEUE,
                            workflows=[Tick, Sleep, Fail])  # fmt: skip
            self._workers.append(asyncio.create_task(worker.run()))
            return True

        eventually(lambda: self.temporal.run(connect), timeout=60, what=f"Temporal {name}")

    def act(self) -> None:
        room = MAX_OBJECTS - len(self.live)
        choices: list[tuple[str, Callable[[], str | None], float]] = [
            ("create", self.create, 1.0 if room > 0 else 0.0),
            ("reschedule", self.reschedule, 1.0),
            ("switch backend", self.switch, 1.5),
            ("suspend or resume", self.suspend, 1.0),
            ("run now", self.run_now, 1.5),
            ("delete", self.delete, 0.5 if len(self.live) > 2 else 0.0),
            ("backfill", self.backfill, 1.0),
            ("adopt", self.adopt, 0.4 if room >= 2 else 0.0),
            ("change connection", self.change_connection, 1.0),
            ("label or unlabel namespace", self.relabel, 0.7),
        ]
        possible = [
            c for c in choices if c[2] > 0 and (self.live or c[1] in (self.create, self.adopt))
        ]
        # Every kind once first (in a seeded order): a short run still meets them all.
        pool = [c for c in possible if c[0] not in self._tried] or possible
        name, action, _ = self.rng.choices(pool, weights=[w for *_, w in pool])[0]
        self._tried.add(name)
        done = action()
        if done is not None:
            self.actions[done] += 1

    def _pick(self) -> ObjectRef:
        return self.rng.choice(sorted(self.live))

    def _apply(self, ref: ObjectRef, spec: dict[str, Any]) -> None:
        self.live[ref] = spec
        connection = (spec.get("temporalConnectionRef") or {}).get("name", "")
        suspend = spec.get("suspend", False)
        self._note(f"apply {ref[0]}/{ref[1]} {spec['backend']} {connection} {spec['schedule']} "
                   f"suspend={suspend} {self.annotations.get(ref, '')}")  # fmt: skip
        metadata: dict[str, Any] = {"name": ref[1], "namespace": ref[0],
                                    "labels": {SHARD_LABEL: SHARD}}  # fmt: skip
        if self.annotations.get(ref):
            metadata["annotations"] = self.annotations[ref]
        self.kubectl.apply({"apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
                            "metadata": metadata, "spec": spec})  # fmt: skip

    def create(
        self,
        ref: ObjectRef | None = None,
        backend: str | None = None,
        connection: str | None = None,
    ) -> str:
        if ref is None:
            self.serial += 1
            ref = (self.rng.choice(NAMESPACES), f"soak-{self.serial}")
        backend = backend or self.rng.choice(("kubernetes", "temporal"))
        spec: dict[str, Any] = {
            "backend": backend, "schedule": self.rng.choice(SCHEDULES),
            "workflow": {"type": "SundialTick", "taskQueue": TASK_QUEUE, "args": [ref[1]]},
        }  # fmt: skip
        if backend == "kubernetes":  # its workflow ignored; on temporal, only the workflow
            spec["job"] = job_template(self.image)
        if backend == "temporal":
            connection = connection or self.rng.choice(sorted(CONNECTIONS))
            spec["temporalConnectionRef"] = {"kind": "ClusterTemporalConnection",
                                             "name": connection}  # fmt: skip
        self.ever.add(ref)
        self._apply(ref, spec)
        return "create"

    def reschedule(self) -> str:
        ref = self._pick()
        spec = dict(self.live[ref])
        spec["schedule"] = next(s for s in SCHEDULES if s != spec["schedule"])
        self._apply(ref, spec)
        return "reschedule"

    def switch(self) -> str:
        ref = self._pick()
        spec = dict(self.live[ref])
        if spec["backend"] == "kubernetes":
            spec["backend"] = "temporal"
            spec["temporalConnectionRef"] = _connection_ref(self.rng.choice(sorted(CONNECTIONS)))
            spec.pop("job", None)  # exactly one of job and workflow on temporal
        else:
            spec["backend"] = "kubernetes"
            spec.pop("temporalConnectionRef", None)
            spec["job"] = job_template(self.image)
        # kubectl apply drops what the last applied configuration had and this one lacks.
        self._apply(ref, spec)
        return "switch backend"

    def suspend(self) -> str:
        ref = self._pick()
        spec = dict(self.live[ref])
        spec["suspend"] = not spec.get("suspend", False)
        self._apply(ref, spec)
        return "suspend or resume"

    def run_now(self) -> str:
        ref = self._pick()
        self.serial += 1
        self.run_nows.append((ref, f"RunNow/soak-{self.serial}", datetime.now(UTC)))
        self.kubectl.run("annotate", "--overwrite", "scheduledjob", ref[1], "-n", ref[0],
                         f"sundial.dev/run-now=soak-{self.serial}")  # fmt: skip
        self._note(f"run now {ref[0]}/{ref[1]} soak-{self.serial}")
        return "run now"

    def delete(self) -> str:
        ref = self._pick()
        del self.live[ref]
        self.kubectl.run("delete", "scheduledjob", ref[1], "-n", ref[0], "--wait=false")
        self._note(f"delete {ref[0]}/{ref[1]}")
        return "delete"

    def backfill(self) -> str | None:
        """The past slots of a range (`kubectl sundial backfill`'s annotation), never
        overlapping an earlier backfill of the same object (attribute_backfills)."""
        ref = self._pick()
        end = (datetime.now(UTC) - BACKFILL_AGE).replace(second=0, microsecond=0)
        start = end - timedelta(minutes=self.rng.randint(1, 3))
        earlier = [b.end for b in self.backfills if b.obj == ref]
        if earlier and start <= max(earlier):
            start = max(earlier) + timedelta(minutes=1)
            if start > end:
                return None
        self.serial += 1
        request = f"soak-{self.serial}"
        self.backfills.append(Backfill(ref, f"Backfill/{request}", start, end, datetime.now(UTC)))
        value = f"{request};{_rfc3339(start)};{_rfc3339(end)}"
        self.kubectl.run("annotate", "--overwrite", "scheduledjob", ref[1], "-n", ref[0],
                         f"{BACKFILL}={value}")  # fmt: skip
        self._note(f"backfill {ref[0]}/{ref[1]} {value}")
        return "backfill"

    def adopt(self) -> str:
        """Two things made outside Sundial under the names Sundial would use (a CronJob, or a
        paused Temporal schedule): one adopted by a new ScheduledJob (`sundial.dev/adopt`),
        the other left to a new ScheduledJob that does not ask (it must say CronJobExists or
        ScheduleExists and never touch it, even when deleted)."""
        backend = self.rng.choice(("kubernetes", "temporal"))
        namespace = self.rng.choice(NAMESPACES)
        adopted = (namespace, f"soak-{self.serial + 1}")
        theirs = (namespace, f"soak-{self.serial + 2}")
        self.serial += 2
        for ref in (adopted, theirs):
            if backend == "kubernetes":
                self._foreign_cronjob(ref)
            else:
                self._foreign_schedule(ref)
        name = adopted[1] if backend == "kubernetes" else f"sundial/{namespace}/{adopted[1]}"
        self.annotations[adopted] = {ADOPT: name}
        self.create(adopted, backend, CONNECTION)
        if backend == "kubernetes":
            self.foreign_cronjobs.add(theirs)
        self.create(theirs, backend, CONNECTION)
        return "adopt"

    def _foreign_cronjob(self, ref: ObjectRef) -> None:
        self.kubectl.apply({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": ref[1], "namespace": ref[0]},
            "spec": {"schedule": "0 0 1 1 *", "suspend": True, "jobTemplate": {"spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "theirs", "image": self.image, "command": ["true"]}]}}}}},
        })  # fmt: skip

    def _foreign_schedule(self, ref: ObjectRef) -> None:
        schedule_id = f"sundial/{ref[0]}/{ref[1]}"

        async def create() -> datetime:
            handle = await self.temporal.client.create_schedule(schedule_id, Schedule(
                action=ScheduleActionStartWorkflow(
                    "SundialTick", "theirs", id=f"theirs-{ref[1]}", task_queue=TASK_QUEUE),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=2))]),
                state=ScheduleState(paused=True, note=FOREIGN_NOTE),
            ))  # fmt: skip
            return (await handle.describe()).info.created_at

        self.foreign_schedules[ref] = self.temporal.run(create, 30)

    def change_connection(self) -> str | None:
        temporal = [ref for ref in sorted(self.live) if self.live[ref]["backend"] == "temporal"]
        if not temporal:
            return None
        ref = self.rng.choice(temporal)
        spec = dict(self.live[ref])
        now = spec["temporalConnectionRef"]["name"]
        spec["temporalConnectionRef"] = _connection_ref(next(c for c in CONNECTIONS if c != now))
        self._apply(ref, spec)
        return "change connection"

    def relabel(self) -> str:
        """A namespace's label taken away (both connections refuse it: its schedules pause)
        or given back."""
        namespace = self.rng.choice(NAMESPACES)
        if namespace in self.unlabelled:
            self.kubectl.run("label", "--overwrite", "namespace", namespace, f"{ADMITTED}=yes")
            del self.unlabelled[namespace]
            self._note(f"label namespace {namespace}")
            return "label namespace"
        self.kubectl.run("label", "namespace", namespace, f"{ADMITTED}-")
        self.unlabelled[namespace] = time.monotonic()
        self._note(f"unlabel namespace {namespace}")
        return "unlabel namespace"

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
        self.fault_on = True
        self._note(f"fault {kind} for {seconds:.0f} s")
        if kind in APISERVER_FAULTS:
            self.apiserver_faults.append((datetime.now(UTC), None))
        try:
            with make():
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    if self.rng.random() < 0.3:
                        self.act()
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        finally:
            if kind in APISERVER_FAULTS:
                self.apiserver_faults[-1] = (self.apiserver_faults[-1][0], datetime.now(UTC))
            self.last_fault_end = time.monotonic()
            self.fault_on = False
            self._note(f"fault {kind} over")

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
        now, wall = time.monotonic(), datetime.now(UTC)
        faults = list(self.apiserver_faults)
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
        # Each object's Jobs' ends as the apiserver shows them (None: not ended).
        job_ends: dict[ObjectRef, list[datetime | None]] = {}
        for job in self.batch.list_job_for_all_namespaces(
            label_selector="sundial.dev/scheduledjob", _request_timeout=10
        ).items:
            meta = job.metadata
            if meta.namespace in NAMESPACES:
                owner = (meta.namespace, meta.labels["sundial.dev/scheduledjob"])
                job_ends.setdefault(owner, []).append(_job_end(job))
            slot = (meta.annotations or {}).get("batch.kubernetes.io/cronjob-scheduled-timestamp")
            if meta.namespace in NAMESPACES and slot:
                owner = (meta.namespace, meta.labels["sundial.dev/scheduledjob"])
                self.observed.runs.setdefault(f"job/{meta.uid}", Run(
                    owner, parse_time(slot), f"job/{meta.namespace}/{meta.name}",
                    (meta.annotations or {}).get("sundial.dev/request")))  # fmt: skip
        refused = self._refused_namespaces()  # one listing a sample
        revoked = self._revoked_quiet_for(refused, now)
        refs = [(sj["metadata"]["namespace"], sj["metadata"]["name"]) for sj in sjs]
        schedules = self.temporal.run(lambda: _describe_all(self.clients, refs), 20)
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
            ready = {c["type"]: c for c in status.get("conditions") or []}.get("Ready", {})
            settled = status.get("observedGeneration") == sj["metadata"]["generation"]
            state = Sampled(
                obj=ref, backend=sj["spec"].get("backend", ""), cron_active=cron_active,
                schedules_running=self._running(schedules.get(ref, {})),
                ready=ready.get("status") if settled else None, reason=ready.get("reason"),
                suspended=bool(sj["spec"].get("suspend")),
                deleting=bool(sj["metadata"].get("deletionTimestamp")),
                revoked_quiet_for=revoked.get(ref[0]),
                revoked=ref[0] in refused,
                held=switch_held(
                    SWITCH_NOTE in schedules.get(ref, {}).values(),
                    sj["spec"].get("concurrencyPolicy", "Forbid") == "Forbid",
                    job_ends.get(ref, []), faults, wall, PERSIST_SECONDS,
                ),
            )  # fmt: skip
            wrong = wrong_states(state, REVOCATION_GRACE)
            if wrong:
                self._note(f"wrong {wrong} at {now:.0f}: {state} {schedules.get(ref)}")
            if "both" in wrong:
                self.observed.both_active.append((now, ref))
            if "neither" in wrong:
                self.observed.neither_while_ready.append((now, ref))
            if "revoked" in wrong:
                self.observed.revoked_running.append((now, ref))

    def _refused_namespaces(self) -> set[str]:
        """The soak's namespaces the apiserver shows without the label the connections
        select, now, faults or not."""
        return {
            namespace.metadata.name
            for namespace in self.core.list_namespace(_request_timeout=10).items
            if namespace.metadata.name in NAMESPACES
            and ADMITTED not in (namespace.metadata.labels or {})
        }

    def _revoked_quiet_for(self, refused: set[str], now: float) -> dict[str, float]:
        """For each refused namespace: how long it has been so with no fault in force (none
        while a fault is)."""
        if self.fault_on:
            return {}
        return {name: now - max(self.unlabelled.get(name, now), self.last_fault_end)
                for name in refused}  # fmt: skip

    @staticmethod
    def _running(schedules: dict[str, str | None]) -> int:
        """How many of the object's schedules (by Temporal namespace: its pause note) run."""
        return sum(1 for note in schedules.values() if note is None)

    def _collect_workflows(self) -> None:
        """Every execution Temporal lists for each object's schedule, in both Temporal
        namespaces; those of the soak's backfills told by their range and start, those of
        its run-now requests matched to them (soak_invariants)."""

        async def collect() -> list[Run]:
            runs = []
            for where, temporal in sorted(self.clients.items()):
                for ref in sorted(self.ever):
                    query = f"TemporalScheduledById = 'sundial/{ref[0]}/{ref[1]}'"
                    async for execution in temporal.list_workflows(query):
                        start = execution.search_attributes.get("TemporalScheduledStartTime")
                        slot = start[0] if start else execution.start_time
                        what = f"workflow/{where}/{execution.id}/{execution.run_id}"
                        runs.append(Run(ref, slot, what, started=execution.start_time))
            return runs

        for run in self.temporal.run(collect, 120):
            self.observed.runs[run.what] = run
        runs = attribute_backfills(self.observed.runs.values(), self.backfills)
        runs, self.trigger_problems = attribute_run_nows(runs, self.run_nows)
        self.observed.runs = {run.what: run for run in runs}

    # -- the end: recovered, then nothing left

    def _recovered(self) -> None:
        deadline = self.last_fault_end + RECOVERY_SECONDS

        def problems() -> list[str]:
            found = []
            code, why = self.operator.readiness()
            if code != 200:
                found.append(f"operator not ready: {code} {why.strip()}")
            refs = sorted(self.live)
            schedules = self.temporal.run(lambda: _describe_all(self.clients, refs), 30)
            for ref in refs:
                sj = self.kubectl.get("scheduledjob", ref[1], ref[0]) or {}
                problem = not_recovered(
                    ref, (sj.get("metadata") or {}).get("generation"), sj.get("status") or {},
                    self.live[ref]["backend"], ref[0] in self.unlabelled,
                    self._running(schedules.get(ref, {})),
                )  # fmt: skip
                if problem:
                    found.append(problem)
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
                    found += [f"{namespace}/{line}" for line in listed.split()
                              if (namespace, line.split("/")[-1]) not in self.foreign_cronjobs
                              or kind != "cronjobs"]  # fmt: skip
            refs = sorted(self.ever)
            schedules = self.temporal.run(lambda: _describe_all(self.clients, refs), 30)
            found += [
                f"schedule sundial/{r[0]}/{r[1]} in {where}"
                for r, places in schedules.items() for where in places
            ]  # fmt: skip
            return found

        try:
            eventually(lambda: not left(), timeout=120, what="nothing left")
        except AssertionError:
            self.observed.left_behind = left()
        self._foreign_untouched()
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

    def _foreign_untouched(self) -> None:
        """What the soak made outside Sundial and did not ask it to adopt: no write to the
        CronJobs by the operator's user in the audit log (the one in the namespace not
        deleted still there), the schedules still there as made. Then they go."""
        events = audit_events(self.stack.log_dir / "audit.log")
        touched = foreign_writes(events, USER, self.foreign_cronjobs)
        for ref in sorted(self.foreign_cronjobs):
            if ref[0] == NAMESPACES[0] and self.kubectl.get("cronjob", ref[1], ref[0]) is None:
                touched.append(f"CronJob {ref[0]}/{ref[1]} is gone")
            self.kubectl.run("delete", "cronjob", ref[1], "-n", ref[0], "--ignore-not-found",
                             "--wait=false", check=False)  # fmt: skip

        async def schedules() -> list[str]:
            found = []
            for ref, created in sorted(self.foreign_schedules.items()):
                adopted = ref in self.annotations  # Sundial's to replace (if it got to it)
                handle = self.temporal.client.get_schedule_handle(f"sundial/{ref[0]}/{ref[1]}")
                try:
                    described = await handle.describe()
                except RPCError as error:
                    if error.status != RPCStatusCode.NOT_FOUND:
                        raise
                    if not adopted:
                        found.append(f"schedule sundial/{ref[0]}/{ref[1]} is gone")
                    continue
                if not adopted and (
                    described.info.created_at != created or described.info.last_updated_at
                    or described.schedule.state.note != FOREIGN_NOTE
                ):  # fmt: skip
                    found.append(f"schedule sundial/{ref[0]}/{ref[1]} was changed: "
                                 f"{described.info}")  # fmt: skip
                await handle.delete()
            return found

        touched += self.temporal.run(schedules, 60)
        self.observed.foreign_touched = touched

    def stop(self) -> None:
        self._stop_sampling.set()
        self.operator.stop()
        for name in CONNECTIONS:
            self.kubectl.run("delete", "clustertemporalconnection", name, "--ignore-not-found")
        for task in self._workers:
            self.temporal.loop.call_soon_threadsafe(task.cancel)

    def report(self) -> dict[str, Any]:
        violations = {**verdict(self.observed, PERSIST_SECONDS),
                      **mix_verdict(self.observed, PERSIST_SECONDS)}  # fmt: skip
        violations["1 one run per slot and request"] += self.trigger_problems
        runs = Counter(
            f"{run.what.split('/')[0]} {(run.request or 'scheduled').split('/')[0]}"
            for run in self.observed.runs.values()
        )
        return {
            "seed": SEED, "seconds": SECONDS, "objects": len(self.ever),
            "actions": dict(self.actions), "faults": dict(self.faults),
            "runs_seen": len(self.observed.runs), "runs": dict(runs),
            "samples": dict(self.samples),
            "violations": {name: len(found) for name, found in violations.items()},
            "details": violations, "journal": self.journal,
        }  # fmt: skip


def _job_end(job: Any) -> datetime | None:
    """When a Job ended (Complete or Failed), from the apiserver: the condition's
    lastTransitionTime, else its completionTime; None while it has not."""
    for condition in job.status.conditions or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return condition.last_transition_time or job.status.completion_time or datetime.now(UTC)
    return None


def _connection_ref(name: str) -> dict[str, str]:
    return {"kind": "ClusterTemporalConnection", "name": name}


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _on_exit(action: Callable[[], None]) -> AbstractContextManager[Any]:
    class OnExit:
        def __enter__(self) -> None:
            return None

        def __exit__(self, *_: object) -> None:
            action()

    return OnExit()


async def _describe_all(
    clients: dict[str, Client], refs: list[ObjectRef]
) -> dict[ObjectRef, dict[str, str | None]]:
    """Each object's schedules, by Temporal namespace (either connection's): the note of a
    paused one ("" if none), None for one running; absent ones, and those the soak made
    outside Sundial (still as made: paused with FOREIGN_NOTE), left out."""

    async def one(temporal: Client, ref: ObjectRef) -> tuple[bool, str | None]:
        try:
            described = await temporal.get_schedule_handle(f"sundial/{ref[0]}/{ref[1]}").describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return False, None
            raise
        state = described.schedule.state
        if state.paused and state.note == FOREIGN_NOTE:
            return False, None
        return True, (state.note or "") if state.paused else None

    asked = [(where, ref) for where in sorted(clients) for ref in refs]
    answers = await asyncio.gather(*(one(clients[where], ref) for where, ref in asked))
    found: dict[ObjectRef, dict[str, str | None]] = {ref: {} for ref in refs}
    for (where, ref), (there, note) in zip(asked, answers, strict=True):
        if there:
            found[ref][where] = note
    return found


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
    print(json.dumps({k: v for k, v in report.items() if k not in ("details", "journal")},
                     indent=2))  # fmt: skip
    assert not any(report["details"].values()), json.dumps(
        {k: v for k, v in report.items() if k != "journal"}, indent=2, default=str
    )
    # The checks saw the run: most samples read, and runs started on both backends.
    assert report["samples"].get("taken", 0) > report["samples"].get("failed", 0)
    assert any(w.startswith("job/") for w in soak.observed.runs), "no Job seen"
    assert any(w.startswith("workflow/") for w in soak.observed.runs), "no workflow seen"
