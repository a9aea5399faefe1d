"""Issue 9: Sundial's Argo CD health check on real ScheduledJobs. Each state is made on the
local stack, read back with `kubectl get -o yaml`, and evaluated by Argo CD's own code
(hack/argocd-health) as a built-in check and as the argocd-cm customization that
manifests/argocd renders, with and without Lua's standard libraries.

`make argocd-testdata` runs this with SUNDIAL_ARGOCD_TESTDATA set: the objects are then
written to manifests/argocd/resource_customizations/.../testdata, the real outputs that
health_test.yaml's cases (tests/unit/test_argocd_health_check.py) are made of."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.service import RPCError

from argocd_harness import ARGOCD_DIR, CHECK_DIR, HEALTH_KEY, HEALTH_LUA, MODES, evaluate
from localstack.relay import Relay
from support import (
    SHARD_LABEL,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    conditions_of,
    eventually,
    ready,
    ready_condition,
    rendered,
    sj_status,
    temporal_connection,
    temporal_scheduledjob,
    their_schedule,
)
from temporal_workflows import TASK_QUEUE

pytestmark = [pytest.mark.cluster, pytest.mark.argocd]

# Captured objects name this namespace, whatever the test's namespace was.
TESTDATA_NAMESPACE = "team-a"
UNREACHABLE = "127.0.0.1:1"  # nothing listens: refused at once


def kubernetes_sj(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("schedule", "0 3 * * *")
    spec.setdefault("job", {"image": "registry.example/app:1"})
    return {"apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip


def temporal_sj(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A temporal-backed ScheduledJob whose slot (03:00) never comes during the test."""
    spec.setdefault("schedule", "0 3 * * *")
    return temporal_scheduledjob(name, namespace, **spec)


def with_reason(kubectl: Kubectl, name: str, namespace: str, reason: str) -> bool:
    return ready_condition(kubectl, name, namespace).get("reason") == reason


class States:
    """Makes each state on the stack, one method per state, its object named after it."""

    def __init__(self, kubectl: Kubectl, temporal: TemporalSide, namespace: str) -> None:
        self.kubectl, self.temporal, self.namespace = kubectl, temporal, namespace

    def ready_sj(self, manifest: dict[str, Any]) -> None:
        self.kubectl.apply(manifest)
        name = manifest["metadata"]["name"]
        eventually(lambda: ready(self.kubectl, name, self.namespace), what=f"{name} Ready")

    def failing_sj(self, reason: str, manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        self.kubectl.apply(manifest)
        eventually(lambda: with_reason(self.kubectl, name, self.namespace, reason),
                   what=f"{name}: Ready reason {reason}")  # fmt: skip

    def not_reconciled(self) -> None:
        """No operator serves its shard: no status yet, as just after a sync."""
        manifest = kubernetes_sj("not-reconciled", self.namespace)
        manifest["metadata"]["labels"] = {SHARD_LABEL: "nobody"}
        self.kubectl.apply(manifest)

    def new_generation(self) -> None:
        """Reconciled at generation 1, then out of the operator's share and changed: the
        status is of the generation before, as between a sync and Sundial's next pass."""
        manifest = kubernetes_sj("new-generation", self.namespace)
        self.ready_sj(manifest)
        manifest["metadata"]["labels"] = {SHARD_LABEL: "nobody"}
        manifest["spec"]["schedule"] = "0 4 * * *"
        self.kubectl.apply(manifest)

    def healthy_kubernetes(self) -> None:
        self.ready_sj(kubernetes_sj("healthy-kubernetes", self.namespace))

    def healthy_temporal(self) -> None:
        self.ready_sj(temporal_sj("healthy-temporal", self.namespace))

    def suspended(self) -> None:
        self.ready_sj(kubernetes_sj("suspended", self.namespace, suspend=True,
                                    suspendNote="db migration, ask #data"))  # fmt: skip

    def maintenance_window(self) -> None:
        self.ready_sj(kubernetes_sj("maintenance-window", self.namespace,
                                    suspendUntil="2099-01-01T06:00:00Z",
                                    suspendNote="db migration"))  # fmt: skip

    def paused_by_failure_policy(self) -> None:
        name = "paused-by-failure-policy"
        self.temporal.ensure_worker()
        self.kubectl.apply(temporal_scheduledjob(
            name, self.namespace, interval={"every": "2s"},
            workflow={"type": "SundialFail", "taskQueue": TASK_QUEUE},
            failurePolicy={"pauseAfter": 2},
        ))  # fmt: skip
        eventually(lambda: with_reason(self.kubectl, name, self.namespace,
                                       "PausedByFailurePolicy"),
                   timeout=120, what="PausedByFailurePolicy")  # fmt: skip

    def paused_in_temporal(self) -> None:
        name = "paused-in-temporal"
        self.ready_sj(temporal_sj(name, self.namespace))
        identity = f"sundial/{self.namespace}/{name}"

        async def pause() -> None:
            await self.temporal.client.get_schedule_handle(identity).pause(note="incident 42")

        self.temporal.run(pause)
        eventually(lambda: with_reason(self.kubectl, name, self.namespace, "PausedInTemporal"),
                   what="PausedInTemporal")  # fmt: skip

    def runs_failing(self) -> None:
        name = "runs-failing"
        self.temporal.ensure_worker()
        self.kubectl.apply(temporal_scheduledjob(
            name, self.namespace, interval={"every": "2s"},
            workflow={"type": "SundialFail", "taskQueue": TASK_QUEUE},
        ))  # fmt: skip
        eventually(
            lambda: conditions_of(sj_status(self.kubectl, name, self.namespace))
            .get("RunsFailing", {}).get("status") == "True",
            timeout=120, what="RunsFailing",
        )  # fmt: skip

    def invalid_time_zone(self) -> None:
        self.failing_sj(
            "InvalidTimeZone",
            kubernetes_sj("invalid-time-zone", self.namespace, timeZone="Mars/Olympus"),
        )

    def invalid_schedule(self) -> None:
        self.failing_sj(
            "InvalidSchedule",
            kubernetes_sj("invalid-schedule", self.namespace, schedule="0 25 * * *"),
        )

    def invalid_job_template(self) -> None:
        # Jobs refuse restartPolicy Always: the apiserver's verdict, not the schema's.
        template = {"spec": {"template": {"spec": {
            "restartPolicy": "Always",
            "containers": [{"name": "job", "image": "registry.example/app:1"}],
        }}}}  # fmt: skip
        self.failing_sj(
            "InvalidJobTemplate",
            kubernetes_sj("invalid-job-template", self.namespace, job={"template": template}),
        )

    def cronjob_exists(self) -> None:
        self.kubectl.run("create", "cronjob", "cronjob-exists", "--image=registry.example/x:1",
                         "--schedule=0 3 * * *", "-n", self.namespace)  # fmt: skip
        self.failing_sj("CronJobExists", kubernetes_sj("cronjob-exists", self.namespace))

    def secret_not_found(self) -> None:
        self.kubectl.apply(temporal_connection("no-secret", self.namespace,
                                               address=self.temporal.address,
                                               apiKeySecretRef={"name": "missing"}))  # fmt: skip
        ref = {"kind": "TemporalConnection", "name": "no-secret"}
        self.failing_sj(
            "SecretNotFound",
            temporal_sj("secret-not-found", self.namespace, temporalConnectionRef=ref),
        )

    def temporal_rejected(self) -> None:
        self.kubectl.apply(temporal_connection("no-such-namespace", self.namespace,
                                               address=self.temporal.address,
                                               namespace="no-such-namespace"))  # fmt: skip
        ref = {"kind": "TemporalConnection", "name": "no-such-namespace"}
        self.failing_sj(
            "TemporalRejected",
            temporal_sj("temporal-rejected", self.namespace, temporalConnectionRef=ref),
        )

    def connection_not_found(self) -> None:
        ref = {"kind": "TemporalConnection", "name": "nowhere"}
        self.failing_sj(
            "ConnectionNotFound",
            temporal_sj("connection-not-found", self.namespace, temporalConnectionRef=ref),
        )

    def schedule_exists(self) -> None:
        their_schedule(self.temporal, f"sundial/{self.namespace}/schedule-exists")
        self.failing_sj("ScheduleExists", temporal_sj("schedule-exists", self.namespace))

    def backend_unavailable(self) -> None:
        self.kubectl.apply(temporal_connection("unreachable", self.namespace,
                                               address=UNREACHABLE))  # fmt: skip
        ref = {"kind": "TemporalConnection", "name": "unreachable"}
        self.failing_sj(
            "BackendUnavailable",
            temporal_sj("backend-unavailable", self.namespace, temporalConnectionRef=ref),
        )

    def deleting(self) -> None:
        """Deleted while the Temporal its schedule was made at cannot be reached: the
        finalizer waits for Sundial to delete the schedule."""
        self.relay = Relay(self.temporal.address)
        self.kubectl.apply(temporal_connection("going", self.namespace,
                                               address=self.relay.address))  # fmt: skip
        ref = {"kind": "TemporalConnection", "name": "going"}
        self.ready_sj(temporal_sj("deleting", self.namespace, temporalConnectionRef=ref))
        self.relay.down()  # gone for good: every connection, new ones too, reset
        self.kubectl.run("delete", "scheduledjob", "deleting", "-n", self.namespace,
                         "--wait=false")  # fmt: skip
        eventually(lambda: with_reason(self.kubectl, "deleting", self.namespace,
                                       "BackendUnavailable"),
                   what="the deletion waits for Temporal")  # fmt: skip

    def finish_deleting(self) -> None:
        """Lets the pending deletion finish: Sundial abandons the schedule (its escape
        hatch), and the test deletes it."""
        self.kubectl.run("annotate", "scheduledjob", "deleting", "-n", self.namespace,
                         "sundial.dev/abandon-schedule=true", check=False)  # fmt: skip
        self.delete_schedule("deleting")

    def delete_schedule(self, name: str) -> None:
        """Deletes the schedule Sundial would name after `name`: one Sundial abandoned, or
        one it never made (ScheduleExists), which it leaves alone."""
        identity = f"sundial/{self.namespace}/{name}"

        async def delete() -> None:
            with contextlib.suppress(RPCError):
                await self.temporal.client.get_schedule_handle(identity).delete()

        self.temporal.run(delete)


# state: (Argo CD's status, a fragment of its message) as Argo CD shows it
EXPECTED: dict[str, tuple[str, str]] = {
    "not_reconciled": ("Progressing", "Waiting for Sundial to reconcile the ScheduledJob"),
    "new_generation": ("Progressing", "Waiting for Sundial to reconcile generation 2 "),
    "healthy_kubernetes": ("Healthy", "In step on backend kubernetes; next run "),
    "healthy_temporal": ("Healthy", "In step on backend temporal; next run "),
    "suspended": ("Healthy", "Suspended: db migration, ask #data"),
    "maintenance_window": ("Healthy", "Suspended until 2099-01-01T06:00:00Z: db migration"),
    "paused_by_failure_policy": ("Healthy", "PausedByFailurePolicy: paused after "),
    "paused_in_temporal": ("Healthy", "PausedInTemporal: schedule is paused in Temporal "
                           "(incident 42)"),
    "runs_failing": ("Healthy", "RunsFailing: "),
    "invalid_time_zone": ("Degraded", "InvalidTimeZone: "),
    "invalid_schedule": ("Degraded", "InvalidSchedule: "),
    "invalid_job_template": ("Degraded", "InvalidJobTemplate: "),
    "cronjob_exists": ("Degraded", "CronJobExists: "),
    "secret_not_found": ("Degraded", "SecretNotFound: "),
    "temporal_rejected": ("Degraded", "TemporalRejected: "),
    "connection_not_found": ("Degraded", "ConnectionNotFound: "),
    "schedule_exists": ("Degraded", "ScheduleExists: "),
    "backend_unavailable": ("Progressing", "BackendUnavailable: "),
    "deleting": ("Progressing", "Pending deletion: Sundial is deleting the Temporal schedule "),
}  # fmt: skip


def captured(kubectl: Kubectl, name: str, namespace: str) -> str:
    """`kubectl get -o yaml`, with the namespace renamed and managedFields left out."""
    text = kubectl.run("get", "scheduledjob", name, "-n", namespace, "-o", "yaml").stdout
    obj = yaml.safe_load(text)
    obj["metadata"].pop("managedFields", None)
    return yaml.safe_dump(obj, sort_keys=False).replace(namespace, TESTDATA_NAMESPACE)


@pytest.mark.timeout(600)
def test_each_state_has_its_health_in_argo_cd(
    kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide, namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    states = States(kubectl, temporal, namespace)
    makers: dict[str, Callable[[], None]] = {state: getattr(states, state) for state in EXPECTED}
    try:
        with ThreadPoolExecutor(max_workers=len(makers)) as pool:
            for made in [pool.submit(make) for make in makers.values()]:
                made.result()
        files = []
        for state in EXPECTED:
            path = tmp_path / f"{state.replace('_', '-')}.yaml"
            path.write_text(captured(kubectl, state.replace("_", "-"), namespace))
            files.append(path)
    finally:
        states.finish_deleting()
        states.delete_schedule("schedule-exists")

    for mode in MODES:
        for state, result in zip(EXPECTED, evaluate(mode, files, tmp_path), strict=True):
            status, fragment = EXPECTED[state]
            assert result.error is None, (mode, state, result.error)
            assert result.health is not None, (mode, state)
            assert result.health["status"] == status, (mode, state, result.health)
            assert result.health["message"].startswith(fragment), (mode, state, result.health)

    target = os.environ.get("SUNDIAL_ARGOCD_TESTDATA")
    if target:
        for path in files:
            (Path(target) / path.name).write_text(path.read_text())
    eventually(lambda: kubectl.get("scheduledjob", "deleting", namespace) is None,
               what="the deletion finished once abandoning was allowed")  # fmt: skip
    operator.assert_alive()


def test_the_argocd_overlay_renders_the_script_into_argocd_cm(kubectl: Kubectl) -> None:
    (cm,) = rendered(kubectl, ARGOCD_DIR)
    assert (cm["kind"], cm["metadata"]["name"], cm["metadata"]["namespace"]) == (
        "ConfigMap", "argocd-cm", "argocd",
    )  # fmt: skip
    assert cm["data"] == {HEALTH_KEY: HEALTH_LUA.read_text()}
    assert CHECK_DIR.is_dir()


def test_a_second_apply_by_argo_cd_changes_nothing(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    """What Argo CD does on each sync, once Sundial has reconciled: a server-side apply of
    the same manifest as field manager argocd-controller leaves the object as it is."""
    manifest = kubernetes_sj("synced", namespace, timeZone="Europe/Berlin")
    document = yaml.safe_dump(manifest)

    def argocd_apply() -> dict[str, Any]:
        applied = kubectl.run("apply", "--server-side", "--field-manager=argocd-controller",
                              "--show-managed-fields", "-o", "yaml", "-f", "-",
                              stdin=document)  # fmt: skip
        result: dict[str, Any] = yaml.safe_load(applied.stdout)
        return result

    argocd_apply()
    eventually(lambda: ready(kubectl, "synced", namespace), what="Ready")
    before = kubectl.get("scheduledjob", "synced", namespace)
    assert before is not None
    after = argocd_apply()
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["metadata"]["generation"] == 1
    managers = {entry["manager"] for entry in after["metadata"]["managedFields"]}
    assert "argocd-controller" in managers
    # Sundial's writes are status (its own manager, the status subresource), never the spec.
    spec_writers = {
        entry["manager"] for entry in after["metadata"]["managedFields"]
        if entry.get("subresource") != "status" and "f:spec" in entry.get("fieldsV1", {})
    }  # fmt: skip
    assert spec_writers == {"argocd-controller"}


def test_the_example_application_puts_the_install_before_the_scheduledjobs(
    kubectl: Kubectl, crd_installed: None
) -> None:
    """manifests/argocd/example: everything of the install in sync wave -1, the
    ScheduledJobs in the default wave 0; and the apiserver accepts all of it."""
    example = ARGOCD_DIR / "example"
    documents = rendered(kubectl, example)
    waves = {
        (d["kind"], d["metadata"]["name"]): (d["metadata"].get("annotations") or {}).get(
            "argocd.argoproj.io/sync-wave"
        )
        for d in documents
    }
    scheduledjobs = {key for key in waves if key[0] == "ScheduledJob"}
    assert scheduledjobs == {("ScheduledJob", "send-invoices"), ("ScheduledJob", "nightly-report")}
    assert all(waves[key] is None for key in scheduledjobs)
    install = {key: wave for key, wave in waves.items() if key not in scheduledjobs}
    assert ("Deployment", "sundial") in install
    assert ("CustomResourceDefinition", "scheduledjobs.sundial.dev") in install
    assert set(install.values()) == {"-1"}
    kubectl.run("apply", "--dry-run=server", "-k", str(example))
    application = yaml.safe_load((example / "application.yaml").read_text())
    assert application["spec"]["source"]["path"] == "manifests/argocd/example"
    assert "ServerSideApply=true" in application["spec"]["syncPolicy"]["syncOptions"]
