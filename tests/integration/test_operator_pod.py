"""Sundial installed the way users install it, on the real node: the image built from the
repository's Dockerfile, `kubectl apply --server-side -k` of the local overlay into
sundial-system, which enforces the restricted Pod Security Standard. Its Pod is admitted,
becomes Ready, and reconciles ScheduledJobs of both backends with in-cluster
configuration; the Jobs of a shorthand ScheduledJob run in a restricted namespace too."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localstack import LocalStack
from localstack.common import TEMPORAL_SERVICE_IP, TEMPORAL_SERVICE_PORT
from support import (
    OPERATOR_NAMESPACE,
    REPO,
    SHARD_LABEL,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    audit_events,
    eventually,
    in_shard,
    parse_time,
    ready,
    temporal_connection,
    temporal_scheduledjob,
)

pytestmark = pytest.mark.cluster

SHARD = "pod"
CONNECTION = "in-cluster"
LEASE = "sundial-pod-test"


def local_install(directory: Path) -> Path:
    """The local overlay, with what this test changes: the objects it serves (a shard of
    its own, so the session's operator and this one never share one) and the connection
    Pods reach Temporal by."""
    overlay = os.path.relpath(REPO / "manifests/overlays/local", directory)
    env = [
        {"name": "SUNDIAL_LABEL_SELECTOR", "value": f"{SHARD_LABEL}={SHARD}"},
        {"name": "SUNDIAL_DEFAULT_CONNECTION", "value": CONNECTION},
        {"name": "SUNDIAL_LEADER_ELECTION_LEASE", "value": LEASE},
    ]
    # A strategic merge patch: env entries merge by name, over the overlay's own.
    patch = {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "sundial", "namespace": OPERATOR_NAMESPACE},
             "spec": {"template": {"spec": {"containers": [
                 {"name": "operator", "env": env}]}}}}  # fmt: skip
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [overlay],
        "patches": [
            {"target": {"kind": "Deployment", "name": "sundial"}, "patch": yaml.safe_dump(patch)},
            # The worker's Pods would take up the session's job-on-temporal runs beside
            # the tests' own worker: this test is the operator's Pod's.
            {
                "target": {"kind": "Deployment", "name": "sundial-worker"},
                "patch": yaml.safe_dump(
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": "sundial-worker", "namespace": OPERATOR_NAMESPACE},
                        "spec": {"replicas": 0},
                    }
                ),
            },
        ],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


@pytest.fixture(scope="module")
def operator_pod(
    stack: LocalStack,
    kubectl: Kubectl,
    tmp_path_factory: pytest.TempPathFactory,
    crd_installed: None,
    operator: OperatorProcess,
) -> Iterator[dict[str, Any]]:
    """`operator`: the session's runs beside the Pod, serving objects without a shard."""
    if not stack.with_node:
        pytest.skip("needs the node (SUNDIAL_NODE=0 runs without one)")
    began = time.monotonic()
    stack.add_image("operator")
    imported = time.monotonic() - began
    kubectl.apply(temporal_connection(CONNECTION, address=f"{TEMPORAL_SERVICE_IP}:"
                                      f"{TEMPORAL_SERVICE_PORT}", namespace="default",
                                      namespaceSelector={}))  # fmt: skip
    install = local_install(tmp_path_factory.mktemp("install"))
    kubectl.run("apply", "--server-side", "--force-conflicts", "-k", str(install), timeout=120)
    try:
        kubectl.run("rollout", "status", "deployment/sundial", "-n", OPERATOR_NAMESPACE,
                    "--timeout=240s", timeout=250)  # fmt: skip
        pods = json.loads(
            kubectl.run(
                "get",
                "pods",
                "-n",
                OPERATOR_NAMESPACE,
                "-l",
                "app.kubernetes.io/name=sundial",
                "-o",
                "json",
            ).stdout
        )
        (pod,) = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
        print(f"operator image imported in {imported:.1f}s")
        yield pod
    finally:
        kubectl.run("delete", "deployment", "sundial", "-n", OPERATOR_NAMESPACE,
                    "--ignore-not-found", "--wait=true", timeout=120)  # fmt: skip


def test_the_operator_pod_is_admitted_as_restricted_and_becomes_ready(
    kubectl: Kubectl, operator_pod: dict[str, Any]
) -> None:
    namespace = kubectl.get("namespace", OPERATOR_NAMESPACE, "") or {}
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    spec = operator_pod["spec"]
    assert not spec.get("hostNetwork")
    conditions = {c["type"]: c for c in operator_pod["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    started = parse_time(operator_pod["metadata"]["creationTimestamp"])
    became_ready = parse_time(conditions["Ready"]["lastTransitionTime"])
    print(f"operator Pod created to Ready: {(became_ready - started).total_seconds():.0f}s")


def test_the_operator_pod_reconciles_both_backends_in_cluster(
    kubectl: Kubectl,
    stack: LocalStack,
    namespace: str,
    temporal: TemporalSide,
    operator_pod: dict[str, Any],
) -> None:
    kubectl.run("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    busybox = stack.images["busybox"]
    cron = {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": "restricted", "namespace": namespace},
        "spec": {"schedule": "0 3 * * *", "job": {
            "image": busybox, "command": ["sh", "-c", "id -u"],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534}}},
    }  # fmt: skip
    kubectl.apply(in_shard(cron, SHARD))
    kubectl.apply(in_shard(temporal_scheduledjob("flow", namespace), SHARD))
    for name in ("restricted", "flow"):
        eventually(lambda n=name: ready(kubectl, n, namespace), timeout=120,
                   what=f"{name} Ready, reconciled by the Pod")  # fmt: skip

    # The Pod wrote them (its name is in its User-Agent), not the session's operator.
    pod_name = operator_pod["metadata"]["name"]
    writers = {
        event.get("userAgent", "") for event in audit_events(stack.log_dir / "audit.log")
        if (event.get("objectRef") or {}).get("namespace") == namespace
        and event["objectRef"].get("subresource") == "status"
    }  # fmt: skip
    assert writers, "no status writes were audited"
    assert all(agent.endswith(f"({pod_name})") for agent in writers), writers

    # The CronJob's Jobs are admitted in a restricted namespace and run as asked.
    kubectl.run("create", "job", "restricted-now", "--from=cronjob/restricted", "-n", namespace)

    def finished_pod() -> dict[str, Any] | None:
        found = kubectl.run("get", "pods", "-n", namespace, "-l", "job-name=restricted-now",
                            "-o", "json")  # fmt: skip
        pods = json.loads(found.stdout)["items"]
        done = [p for p in pods if p["status"].get("phase") in ("Succeeded", "Failed")]
        return done[0] if done else None

    pod = eventually(finished_pod, timeout=120, what="the restricted Job's Pod finished")
    assert pod["status"]["phase"] == "Succeeded"
    assert kubectl.run("logs", pod["metadata"]["name"], "-n", namespace).stdout.strip() == "65534"
