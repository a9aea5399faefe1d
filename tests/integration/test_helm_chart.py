"""Sundial's Helm chart (charts/sundial, issue 29) with a real Helm v4 built from its module
(hack/build-helm.sh): it lints; for each choice it renders the same objects as the kustomize
install for the same choice (cluster-wide, two replicas, a list of namespaces, monitoring),
up to Helm's labels; its CRDs, alert rules and dashboard are the same files; bad values are
refused naming the field. Then installed on the local stack with the image built from the
repository: the operator's Pod Ready on the real node, a ScheduledJob Ready by it, upgraded
to two replicas without a lost object, and uninstalled, leaving the CRDs and the objects."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localstack import LocalStack
from localstack.binaries import find_helm
from support import (
    REPO,
    SHARD_LABEL,
    Kubectl,
    OperatorProcess,
    eventually,
    fresh_namespace,
    in_shard,
    kubernetes_scheduledjob,
    ready,
)

pytestmark = pytest.mark.cluster

CHART = REPO / "charts" / "sundial"
HELM_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
}


@pytest.fixture(scope="module")
def helm() -> Path:
    return find_helm()


def run_helm(
    helm: Path, *args: str, kubeconfig: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    scope = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    result = subprocess.run([str(helm), *args, *scope], capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {result.stderr}")
    return result


def objects(text: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Rendered documents by (kind, namespace, name), without Helm's labels."""
    found = {}
    for document in yaml.safe_load_all(text):
        if not document:
            continue
        metadata = document["metadata"]
        labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in HELM_LABELS}
        metadata.pop("labels", None)
        if labels:
            metadata["labels"] = labels
        key = (document["kind"], metadata.get("namespace", ""), metadata["name"])
        found[key] = document
    return found


def chart(helm: Path, *values: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    sets = [item for value in values for item in ("--set", value)]
    rendered = run_helm(
        helm, "template", "sundial", str(CHART), "-n", "sundial-system", "--include-crds", *sets
    )
    return objects(rendered.stdout)


def kustomize(kubectl: Kubectl, *directories: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for directory in directories:
        found |= objects(kubectl.run("kustomize", str(REPO / directory)).stdout)
    # Helm's convention: the chart does not create its namespace (charts/sundial/README.md).
    found.pop(("Namespace", "", "sundial-system"), None)
    return found


@pytest.mark.parametrize(
    ("values", "directories"),
    [
        ((), ("manifests/overlays/cluster-wide", "manifests/connection")),
        (("operator.replicas=2",), ("manifests/overlays/ha", "manifests/connection")),
        (
            ("operator.replicas=3", "operator.shards=6"),
            ("manifests/overlays/sharded", "manifests/connection"),
        ),
        (
            ("watchNamespaces={team-a,team-b}",),
            ("manifests/overlays/namespaced", "manifests/connection"),
        ),
        (
            ("metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true"),
            ("manifests/overlays/cluster-wide", "manifests/connection", "manifests/monitoring"),
        ),
    ],
    ids=["cluster-wide", "ha", "sharded", "namespaced", "monitoring"],
)
def test_the_chart_renders_what_kustomize_does_for_the_same_choice(
    helm: Path, kubectl: Kubectl, values: tuple[str, ...], directories: tuple[str, ...]
) -> None:
    rendered, wanted = chart(helm, *values), kustomize(kubectl, *directories)
    assert sorted(rendered) == sorted(wanted)
    for key, document in wanted.items():
        assert rendered[key] == document, key


def test_the_chart_lints_keeps_the_same_files_and_refuses_bad_values(helm: Path) -> None:
    linted = run_helm(helm, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in linted.stdout, linted.stdout
    for copy, source in (
        ("crds", "crds"),
        ("files/prometheusrule.yaml", "manifests/monitoring/prometheusrule.yaml"),
        ("files/sundial-dashboard.json", "manifests/monitoring/sundial-dashboard.json"),
    ):
        here, there = CHART / copy, REPO / source
        pairs = (
            [(f, there / f.name) for f in sorted(here.glob("*.yaml"))]
            if here.is_dir()
            else [(here, there)]
        )
        assert pairs
        for mine, theirs in pairs:
            assert mine.read_text() == theirs.read_text(), f"{mine} differs from {theirs}"
    for bad, field in (
        ("operator.replicas=0", "operator.replicas"),
        ("watchNamespaces={Team_A}", "watchNamespaces"),
        ("image.pullPolicy=Sometimes", "image.pullPolicy"),
        ("defaultConnection.address=no-port", "defaultConnection.address"),
    ):
        refused = run_helm(helm, "template", "sundial", str(CHART), "--set", bad, check=False)
        assert refused.returncode != 0, bad
        assert field.split(".")[-1] in refused.stderr, refused.stderr


RELEASE = "sundial-helm"
SHARD = "helm"


@pytest.fixture(scope="module")
def installed(
    stack: LocalStack,
    kubectl: Kubectl,
    helm: Path,
    crd_installed: None,
    operator: OperatorProcess,
) -> Iterator[str]:
    """The chart installed as release sundial-helm in its own namespace, serving a shard of
    its own (the session's operator serves the rest), no worker (it would take up the
    session's runs on temporal)."""
    if not stack.with_node:
        pytest.skip("needs the node (SUNDIAL_NODE=0 runs without one)")
    stack.add_image("operator")
    with fresh_namespace(kubectl, RELEASE) as namespace:
        kubectl.run(
            "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
        )
        values = {
            "image": {
                "repository": "localhost/sundial/operator",
                "tag": "dev",
                "pullPolicy": "IfNotPresent",
            },
            "operator": {
                "extraEnv": [{"name": "SUNDIAL_LABEL_SELECTOR", "value": f"{SHARD_LABEL}={SHARD}"}]
            },
            "worker": {"replicas": 0},
            "defaultConnection": {"name": "helm-default", "create": False},
        }
        path = stack.state_dir / "helm-values.yaml"
        path.write_text(yaml.safe_dump(values))
        run_helm(
            helm,
            "install",
            RELEASE,
            str(CHART),
            "-n",
            namespace,
            "-f",
            str(path),
            "--wait",
            "--timeout",
            "240s",
            kubeconfig=kubectl.kubeconfig,
        )
        try:
            yield namespace
        finally:
            run_helm(
                helm,
                "uninstall",
                RELEASE,
                "-n",
                namespace,
                "--wait",
                kubeconfig=kubectl.kubeconfig,
                check=False,
            )


def ready_pods(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    pods = json.loads(
        kubectl.run(
            "get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/name={RELEASE}", "-o", "json"
        ).stdout
    )
    return [
        p
        for p in pods["items"]
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions", [])
        )
    ]


def test_install_upgrade_and_uninstall_on_the_real_node(
    stack: LocalStack, kubectl: Kubectl, helm: Path, installed: str, namespace: str
) -> None:
    assert len(ready_pods(kubectl, installed)) == 1
    kubectl.apply(
        in_shard(
            kubernetes_scheduledjob(
                "by-chart",
                namespace,
                {"image": stack.images["busybox"], "command": ["true"]},
                schedule="0 3 * * *",
            ),
            SHARD,
        )
    )
    eventually(
        lambda: ready(kubectl, "by-chart", namespace),
        timeout=120,
        what="a ScheduledJob Ready, reconciled by the chart's operator",
    )
    cronjob = kubectl.get("cronjob", "by-chart", namespace) or {}
    uid = cronjob["metadata"]["uid"]

    run_helm(
        helm,
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        installed,
        "--reuse-values",
        "--set",
        "operator.replicas=2",
        "--wait",
        "--timeout",
        "240s",
        kubeconfig=kubectl.kubeconfig,
    )
    eventually(
        lambda: len(ready_pods(kubectl, installed)) == 2,
        timeout=180,
        what="two ready replicas after the upgrade",
    )
    eventually(lambda: ready(kubectl, "by-chart", namespace), timeout=60, what="still Ready")
    assert (kubectl.get("cronjob", "by-chart", namespace) or {})["metadata"]["uid"] == uid

    run_helm(helm, "uninstall", RELEASE, "-n", installed, "--wait", kubeconfig=kubectl.kubeconfig)
    assert kubectl.get("deployment", RELEASE, installed) is None
    assert kubectl.run("get", "clusterrole", RELEASE, check=False).returncode != 0
    # Helm never deletes CRDs: the objects and what they made stay.
    assert kubectl.get("scheduledjob", "by-chart", namespace) is not None
    assert kubectl.get("cronjob", "by-chart", namespace) is not None


CRONS = """
Image: billing:4.2.0
Crons:
  nightly-invoices:
    Schedule: "0 2 * * *"
    Envs: {MODE: cron, CRON_JOB: invoices, ZONE_FILE: /etc/z, LOG_LEVEL: info}
    ConcurrencyPolicy: Forbid
    TtlSecondsAfterFinished: 0
    Resources: {requests: {cpu: 100m, memory: 256Mi}}
    NodeSelector: {pool: batch}
    Tolerations: [{key: batch, operator: Exists}]
    Parallelism: 2
  weekly-report:
    Schedule: "0 6 * * 1"
    Envs: {MODE: cron, CRON_JOB: report}
    Suspend: true
    Image: reports:1.0
"""


def test_the_crons_library_chart_renders_what_the_import_writes(helm: Path, tmp_path: Path) -> None:
    """A service chart that swaps its CronJob template for the sundial-crons library renders
    the ScheduledJobs `kubectl sundial import helm-values` writes from the same values."""
    service = tmp_path / "service"
    (service / "templates").mkdir(parents=True)
    (service / "Chart.yaml").write_text(
        "apiVersion: v2\nname: service\nversion: 1.0.0\n"
        "dependencies:\n  - name: sundial-crons\n    version: 0.1.0\n"
    )
    (service / "values.yaml").write_text(CRONS)
    (service / "templates" / "crons.yaml").write_text(
        '{{ include "sundial-crons.scheduledjobs" '
        '(dict "crons" .Values.Crons "image" .Values.Image "namePrefix" "billing-") }}\n'
    )
    (service / "charts").mkdir()
    shutil.copytree(REPO / "charts" / "sundial-crons", service / "charts" / "sundial-crons")
    rendered = run_helm(helm, "template", "billing", str(service), "-n", "billing")
    from_chart = [d for d in yaml.safe_load_all(rendered.stdout) if d]

    values = tmp_path / "values.yaml"
    values.write_text(CRONS)
    imported = subprocess.run(
        [
            sys.executable,
            "-m",
            "sundial.plugin",
            "import",
            "helm-values",
            str(values),
            "-n",
            "billing",
            "--name-prefix",
            "billing-",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.returncode == 0, imported.stderr
    from_import = [d for d in yaml.safe_load_all(imported.stdout) if d]
    for document in from_import:
        document["metadata"].pop("namespace")  # Helm's release namespace, at install
    assert len(from_chart) == 2
    assert sorted(from_chart, key=str) == sorted(from_import, key=str)
