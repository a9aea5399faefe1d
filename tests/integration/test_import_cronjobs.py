"""`kubectl sundial import cronjob` against the real apiserver (issue 29): CronJobs of the
shapes popular charts and `kubectl create cronjob` make, imported, applied in another
namespace, and the CronJob the operator renders there compared with the original, field by
field, as the server stores both; what differs must be only what Sundial adds on purpose
(its labels, the run's env, a stated time zone). Then --adopt in place: the same CronJob
(same uid) comes under its ScheduledJob with its spec as it was. What cannot be imported
faithfully is refused with the reason, and nothing is applied."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from localstack import LocalStack
from support import (
    Kubectl,
    OperatorProcess,
    conditions_of,
    eventually,
    fresh_namespace,
    kubectl_sundial,
)

pytestmark = pytest.mark.cluster

OURS = {"app.kubernetes.io/managed-by", "sundial.dev/scheduledjob"}
RUN_ENV = {"SUNDIAL_JOB_NAME", "SUNDIAL_CRONJOB"}
BUSYBOX = "busybox:1.36"


def pod(*containers: dict[str, Any], restart: str = "OnFailure", **spec: Any) -> dict[str, Any]:
    return {"spec": {"restartPolicy": restart, "containers": list(containers), **spec}}


def container(name: str, *command: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": BUSYBOX,
        **({"command": list(command)} if command else {}),
        **fields,
    }


def cron(
    name: str,
    schedule: str,
    template: dict[str, Any],
    job: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {
            "schedule": schedule,
            "suspend": True,
            **spec,
            "jobTemplate": {"spec": {**(job or {}), "template": template}},
        },
    }


HELM = {
    "app.kubernetes.io/managed-by": "Helm",
    "helm.sh/chart": "app-template-3.5.1",
    "app.kubernetes.io/name": "media",
    "app.kubernetes.io/instance": "media",
}
HARDENED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
RUNTIME_DEFAULT = {"seccompProfile": {"type": "RuntimeDefault"}}


def shapes() -> list[dict[str, Any]]:
    """Real-world CronJobs, as their charts render them (all suspended: nothing runs)."""
    return [
        # bjw-s app-template's controller of type cronjob
        cron(
            "app-template-backup",
            "0 4 * * *",
            {
                "metadata": {
                    "labels": {
                        "app.kubernetes.io/name": "media",
                        "app.kubernetes.io/controller": "backup",
                    },
                    "annotations": {"checksum/config": "0ff1ce"},
                },
                **pod(
                    container(
                        "app",
                        "sh",
                        "-c",
                        "echo backup",
                        resources={
                            "requests": {"cpu": "10m", "memory": "32Mi"},
                            "limits": {"memory": "64Mi"},
                        },
                        securityContext={**HARDENED, "readOnlyRootFilesystem": True},
                    ),
                    restart="Never",
                    serviceAccountName="default",
                    automountServiceAccountToken=False,
                    enableServiceLinks=False,
                    securityContext={
                        "runAsNonRoot": True,
                        "runAsUser": 568,
                        "fsGroup": 568,
                        **RUNTIME_DEFAULT,
                    },
                ),
            },
            {"backoffLimit": 6, "ttlSecondsAfterFinished": 3600},
            labels=HELM,
            concurrencyPolicy="Forbid",
            startingDeadlineSeconds=30,
            timeZone="Europe/Berlin",
            successfulJobsHistoryLimit=1,
            failedJobsHistoryLimit=1,
        ),
        # bitnami postgresql's backup.cronjob (pg_dumpall to a PVC)
        cron(
            "postgresql-pgdumpall",
            "@daily",
            {
                "metadata": {"labels": {"app.kubernetes.io/component": "pg_dumpall"}},
                **pod(
                    container(
                        "postgresql-pgdumpall",
                        "/bin/sh",
                        "-c",
                        'pg_dumpall --clean --if-exists > "${PGDUMP_DIR}/pg.sql"',
                        env=[
                            {"name": "PGUSER", "value": "postgres"},
                            {
                                "name": "PGPASSWORD",
                                "valueFrom": {
                                    "secretKeyRef": {
                                        "name": "postgresql",
                                        "key": "postgres-password",
                                    }
                                },
                            },
                            {"name": "PGHOST", "value": "postgresql"},
                            {"name": "PGDUMP_DIR", "value": "/backup/pgdump"},
                        ],
                        volumeMounts=[
                            {"name": "datadir", "mountPath": "/backup/pgdump"},
                            {"name": "empty-dir", "mountPath": "/tmp", "subPath": "tmp-dir"},
                        ],
                        securityContext={**HARDENED, "runAsUser": 1001},
                    ),
                    volumes=[
                        {
                            "name": "datadir",
                            "persistentVolumeClaim": {"claimName": "postgresql-pgdumpall"},
                        },
                        {"name": "empty-dir", "emptyDir": {}},
                    ],
                    securityContext={"fsGroup": 1001},
                ),
            },
            labels={"app.kubernetes.io/component": "pg_dumpall"},
            concurrencyPolicy="Allow",
            failedJobsHistoryLimit=1,
            successfulJobsHistoryLimit=3,
        ),
        # bitnami mariadb-style mysqldump with a node selector and tolerations
        cron(
            "mariadb-backup",
            "30 2 * * *",
            pod(
                container(
                    "mariadb-backup",
                    "/bin/bash",
                    "-ec",
                    "mysqldump --all-databases",
                    envFrom=[{"secretRef": {"name": "mariadb"}}],
                ),
                nodeSelector={"kubernetes.io/os": "linux"},
                tolerations=[
                    {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}
                ],
            ),
            timeZone="America/New_York",
        ),
        # kubectl create cronjob hello --image=busybox:1.36 --schedule='*/1 * * * *' -- date
        {
            "kubectl-create": [
                "hello",
                f"--image={BUSYBOX}",
                "--schedule=*/1 * * * *",
                "--",
                "date",
            ]
        },
        {
            "kubectl-create": [
                "cleanup",
                f"--image={BUSYBOX}",
                "--schedule=@hourly",
                "--restart=Never",
            ]
        },
        # the seed convention, hardened: the job shorthand fits
        cron(
            "nightly-report",
            "0 1 * * *",
            {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": RUNTIME_DEFAULT,
                    "containers": [
                        container(
                            "job",
                            env=[
                                {"name": "MODE", "value": "cron"},
                                {"name": "CRON_JOB", "value": "nightly-report"},
                            ],
                            securityContext=HARDENED,
                        )
                    ],
                }
            },
            {"ttlSecondsAfterFinished": 600},
            concurrencyPolicy="Forbid",
        ),
        # the seed convention as most charts render it: the full template
        cron(
            "seed-sync",
            "*/10 * * * *",
            pod(
                container(
                    "seed-sync",
                    env=[{"name": "MODE", "value": "cron"}, {"name": "CRON_JOB", "value": "sync"}],
                    resources={"requests": {"cpu": "50m"}},
                )
            ),
            {"parallelism": 1, "ttlSecondsAfterFinished": 86400},
            concurrencyPolicy="Forbid",
        ),
        cron("replace-me", "*/5 * * * *", pod(container("c", "true")), concurrencyPolicy="Replace"),
        cron(
            "deadline",
            "0 */6 * * *",
            pod(container("c", "sleep", "5")),
            {"activeDeadlineSeconds": 600, "backoffLimit": 0},
            startingDeadlineSeconds=200,
        ),
        cron(
            "no-history",
            "15 3 * * 0",
            pod(container("c", "true")),
            successfulJobsHistoryLimit=0,
            failedJobsHistoryLimit=0,
        ),
        cron(
            "indexed",
            "0 5 * * *",
            pod(container("c", "true"), restart="Never"),
            {"completions": 3, "parallelism": 3, "completionMode": "Indexed"},
        ),
        cron(
            "pod-failure-policy",
            "0 6 * * *",
            pod(container("c", "true"), restart="Never"),
            {
                "backoffLimit": 3,
                "podFailurePolicy": {
                    "rules": [
                        {
                            "action": "FailJob",
                            "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]},
                        }
                    ]
                },
            },
        ),
        cron(
            "with-init",
            "0 7 * * *",
            pod(
                container("main", "cat", "/work/x"),
                initContainers=[
                    container(
                        "prepare",
                        "sh",
                        "-c",
                        "echo x > /work/x",
                        volumeMounts=[{"name": "w", "mountPath": "/work"}],
                    )
                ],
                volumes=[{"name": "w", "emptyDir": {}}],
            ),
        ),
        cron("two-containers", "0 8 * * *", pod(container("a", "true"), container("b", "true"))),
        cron(
            "istio-off",
            "0 9 * * 1-5",
            {
                "metadata": {"annotations": {"sidecar.istio.io/inject": "false"}},
                **pod(container("c", "true")),
            },
            timeZone="Asia/Tokyo",
        ),
        cron(
            "pull-secret",
            "0 10 1 * *",
            pod(
                container("c", "true", imagePullPolicy="Always"),
                imagePullSecrets=[{"name": "registry"}],
            ),
        ),
        cron(
            "affinity",
            "0 11 * * *",
            pod(
                container("c", "true"),
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/arch",
                                            "operator": "In",
                                            "values": ["amd64", "arm64"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
            ),
        ),
        cron(
            "spread",
            "0 12 * * *",
            pod(
                container("c", "true"),
                topologySpreadConstraints=[
                    {
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {"app": "spread"}},
                    }
                ],
            ),
        ),
        cron(
            "dns-tuned",
            "0 13 * * *",
            pod(
                container("c", "true"),
                dnsPolicy="None",
                dnsConfig={
                    "nameservers": ["10.0.0.10"],
                    "options": [{"name": "ndots", "value": "2"}],
                },
                hostAliases=[{"ip": "10.1.2.3", "hostnames": ["db.local"]}],
            ),
        ),
        cron(
            "ephemeral",
            "0 14 * * *",
            pod(
                container(
                    "c",
                    "true",
                    resources={"limits": {"ephemeral-storage": "1Gi", "memory": "128Mi"}},
                ),
                terminationGracePeriodSeconds=5,
                priorityClassName="batch-low",
            ),
        ),
        cron(
            "script",
            "45 23 * * *",
            pod(
                container(
                    "c",
                    "sh",
                    "-c",
                    'set -e\nfor table in a b c; do\n  echo "vacuum $table"\ndone\n',
                ),
                restart="Never",
            ),
            {"ttlSecondsAfterFinished": 0},
        ),
        cron("running-now", "0 0 1 1 *", pod(container("c", "true")), suspend=False),
        cron(
            "berlin-night",
            "30 2 * * *",
            pod(container("c", "true")),
            timeZone="Europe/Berlin",
            concurrencyPolicy="Forbid",
        ),
    ]


def create_shapes(kubectl: Kubectl, namespace: str) -> list[str]:
    names = []
    for shape in shapes():
        if "kubectl-create" in shape:
            name, *rest = shape["kubectl-create"]
            kubectl.run("create", "cronjob", name, "-n", namespace, *rest)
            kubectl.run(
                "patch", "cronjob", name, "-n", namespace, "-p", '{"spec": {"suspend": true}}'
            )
        else:
            name = shape["metadata"]["name"]
            kubectl.run("create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(shape))
        names.append(name)
    return names


def cronjobs(kubectl: Kubectl, namespace: str) -> dict[str, dict[str, Any]]:
    listed = json.loads(kubectl.run("get", "cronjobs", "-n", namespace, "-o", "json").stdout)
    return {item["metadata"]["name"]: item for item in listed["items"]}


def as_written(cronjob: dict[str, Any], had_zone: bool) -> dict[str, Any]:
    """A CronJob Sundial renders, less what it adds on purpose (its labels on the job and
    pod templates, the run's env, a time zone the original did not state): what must equal
    the original's spec."""
    spec = copy.deepcopy(cronjob["spec"])
    if not had_zone:
        spec.pop("timeZone", None)
    template = spec["jobTemplate"]
    for metadata in (template.get("metadata"), template["spec"]["template"].get("metadata")):
        if metadata is None:
            continue
        labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in OURS}
        metadata.pop("labels", None)
        if labels:
            metadata["labels"] = labels
    pod_spec = template["spec"]["template"]["spec"]
    for each in pod_spec["containers"]:
        env = [item for item in each.get("env") or [] if item["name"] not in RUN_ENV]
        each.pop("env", None)
        if env:
            each["env"] = env
    return spec


def comparable(spec: dict[str, Any]) -> dict[str, Any]:
    """Empty metadata is no metadata (the server keeps `{}` where a template had none)."""
    spec = copy.deepcopy(spec)
    template = spec["jobTemplate"]
    for holder in (template, template["spec"]["template"]):
        if not holder.get("metadata"):
            holder.pop("metadata", None)
        else:
            holder["metadata"].pop("creationTimestamp", None)
            if not holder["metadata"]:
                holder.pop("metadata")
    return spec


def test_real_world_cronjobs_round_trip_and_adopt_in_place(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess
) -> None:
    with (
        fresh_namespace(kubectl, "t-import-originals") as originals,
        fresh_namespace(kubectl, "t-import-rendered") as rendered,
    ):
        names = create_shapes(kubectl, originals)
        assert len(names) >= 20
        before = cronjobs(kubectl, originals)

        # A selector across every namespace (-l with -A): the one chart-labelled CronJob.
        selected = kubectl_sundial(kubectl, "import", "cronjob", "-l",
                                   "app.kubernetes.io/instance=media", "-A")  # fmt: skip
        assert selected.returncode == 0, selected.stderr
        assert [(d["metadata"]["namespace"], d["metadata"]["name"])
                for d in yaml.safe_load_all(selected.stdout) if d] == [
            (originals, "app-template-backup")]  # fmt: skip

        imported = kubectl_sundial(kubectl, "import", "cronjob", "--all", "-n", originals)
        assert imported.returncode == 0, imported.stderr
        documents = [d for d in yaml.safe_load_all(imported.stdout) if d]
        assert sorted(d["metadata"]["name"] for d in documents) == sorted(names)
        header = imported.stdout.split("apiVersion:")[0]
        assert header.startswith("# CronJob "), header
        by_name = {d["metadata"]["name"]: d for d in documents}
        assert "image" in by_name["nightly-report"]["spec"]["job"], "the shorthand fits it"
        assert "template" in by_name["seed-sync"]["spec"]["job"]

        for document in documents:
            document["metadata"]["namespace"] = rendered
        kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
        written = eventually(
            lambda: (lambda found: found if set(found) == set(names) else None)(
                cronjobs(kubectl, rendered)
            ),
            timeout=120,
            what="every CronJob rendered",
        )
        for name in names:
            had_zone = "timeZone" in before[name]["spec"]
            assert comparable(as_written(written[name], had_zone)) == comparable(
                before[name]["spec"]
            ), name

        def under_sundial() -> dict[str, dict[str, Any]] | None:
            now = cronjobs(kubectl, originals)
            owned = all(
                any(
                    ref.get("kind") == "ScheduledJob"
                    for ref in c["metadata"].get("ownerReferences") or []
                )
                for c in now.values()
            )
            return now if owned else None

        # The operator's takeover (a CronJob update) refused for a while by an admission
        # policy: nothing is adopted meanwhile and each object says why; once lifted,
        # every CronJob comes under its ScheduledJob.
        with stack.faults.deny(
            "import-adoption", resources=["cronjobs"], operations=["UPDATE"], namespace=originals
        ):
            adopted = kubectl_sundial(
                kubectl, "import", "cronjob", "--all", "-n", originals, "--adopt"
            )
            assert adopted.returncode == 0, adopted.stderr

            def all_refused() -> bool:
                listed = json.loads(
                    kubectl.run("get", "scheduledjobs", "-n", originals, "-o", "json").stdout
                )["items"]
                ready = [conditions_of(sj.get("status", {})).get("Ready", {}) for sj in listed]
                return len(listed) == len(names) and all(
                    c.get("status") == "False" and "refused by the fault" in c.get("message", "")
                    for c in ready
                )

            eventually(all_refused, timeout=120, what="each adoption refused, and saying so")
            assert under_sundial() is None
            assert all(
                not c["metadata"].get("ownerReferences")
                for c in cronjobs(kubectl, originals).values()
            )

        after = eventually(under_sundial, timeout=120, what="every CronJob adopted")
        for name in names:
            assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"], name
            had_zone = "timeZone" in before[name]["spec"]
            assert comparable(as_written(after[name], had_zone)) == comparable(
                before[name]["spec"]
            ), name


def test_what_cannot_be_imported_faithfully_is_refused_and_nothing_applied(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess
) -> None:
    with fresh_namespace(kubectl, "t-import-refused") as namespace:
        kubectl.run(
            "create",
            "-n",
            namespace,
            "-f",
            "-",
            stdin=yaml.safe_dump_all(
                [
                    cron("every-hour", "@every 1h", pod(container("c", "true"))),
                    cron(
                        "long-history",
                        "0 1 * * *",
                        pod(container("c", "true")),
                        failedJobsHistoryLimit=500,
                    ),
                    cron("fine", "0 2 * * *", pod(container("c", "true"))),
                ]
            ),
        )
        owner = json.loads(
            kubectl.run("create", "configmap", "owner", "-n", namespace, "-o", "json").stdout
        )
        owned = cron("owned", "0 3 * * *", pod(container("c", "true")))
        owned["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": "owner",
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
        kubectl.run("create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(owned))

        # The server refuses the dry run (an admission policy on CronJob creates): the
        # import cannot prove anything, so it imports nothing, not even "fine", and applies
        # nothing.
        with stack.faults.deny(
            "import-dry-run", resources=["cronjobs"], operations=["CREATE"], namespace=namespace
        ):
            unproven = kubectl_sundial(
                kubectl, "import", "cronjob", "fine", "-n", namespace, "--adopt"
            )
        assert unproven.returncode == 1
        assert "the server refused the dry run: 403" in unproven.stdout, unproven.stdout
        assert kubectl.get("scheduledjob", "fine", namespace) is None

        result = kubectl_sundial(kubectl, "import", "cronjob", "--all", "-n", namespace, "--adopt")
        assert result.returncode == 1
        assert "3 of 4 CronJobs were not imported" in result.stderr, result.stderr
        report = result.stdout
        assert "every-hour: NOT IMPORTED" in report
        assert "unknown macro" in report
        assert "failedJobsHistoryLimit is 500" in report
        assert "controlled by ConfigMap owner" in report
        listed = json.loads(
            kubectl.run("get", "scheduledjobs", "-n", namespace, "-o", "json").stdout
        )["items"]
        assert [sj["metadata"]["name"] for sj in listed] == ["fine"]
