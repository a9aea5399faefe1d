"""The kubernetes backend end to end: kubectl apply -> real CronJob, on the real stack."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from sundial.planning.missed import SETTLE
from support import (
    REPO,
    Kubectl,
    OperatorProcess,
    consistently,
    eventually,
    ready,
    ready_condition,
)

pytestmark = pytest.mark.cluster

SAMPLES = REPO / "manifests" / "samples"


def scheduledjob(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("schedule", "*/5 * * * *")
    spec.setdefault("job", {"image": "registry.example/app:1", "cronJob": name})
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def cronjob(kubectl: Kubectl, name: str, namespace: str) -> dict[str, Any] | None:
    return kubectl.get("cronjob", name, namespace)


def sample(path: str, namespace: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((SAMPLES / path).read_text())
    manifest["metadata"]["namespace"] = namespace
    return manifest


def test_sample_becomes_a_cronjob_and_a_filled_row(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    kubectl.apply(sample("kubernetes-shorthand.yaml", namespace))
    sj = eventually(lambda: ready(kubectl, "send-invoices", namespace), what="Ready")
    cj = cronjob(kubectl, "send-invoices", namespace)
    assert cj is not None
    spec = cj["spec"]
    assert (spec["schedule"], spec["timeZone"], spec["concurrencyPolicy"]) == (
        "*/5 * * * *",
        "Europe/Berlin",
        "Forbid",
    )
    assert spec["startingDeadlineSeconds"] == 120
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (1, 3)
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    # SUNDIAL_JOB_NAME comes from the downward API (valueFrom): what the run's Pod is told.
    assert env == {"LOG_LEVEL": "info", "MODE": "cron", "CRON_JOB": "send-invoices",
                   "SUNDIAL_JOB_NAME": None, "SUNDIAL_CRONJOB": "send-invoices"}  # fmt: skip
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    owner = cj["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "ScheduledJob",
        sj["metadata"]["uid"],
        True,
    )
    assert cj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "sundial"

    status = sj["status"]
    assert status["backend"] == "kubernetes"
    assert status["backendRef"] == {
        "kind": "CronJob",
        "name": "send-invoices",
        "namespace": namespace,
    }
    next_runs = [datetime.fromisoformat(t) for t in status["nextRunTimes"]]
    assert len(next_runs) == 3
    # A slot stays listed until it has settled: at most SETTLE in the past.
    now = datetime.now(UTC)
    assert now - SETTLE < next_runs[0] < next_runs[1] < next_runs[2]
    assert all(t.minute % 5 == 0 for t in next_runs)

    table = kubectl.run("get", "scheduledjobs", "-n", namespace).stdout
    header, row = table.splitlines()[:2]
    assert header.split() == [
        "NAME",
        "BACKEND",
        "SCHEDULE",
        "SUSPEND",
        "LAST",
        "RUN",
        "NEXT",
        "RUN",
        "LAST",
        "RESULT",
        "MISSED",
        "READY",
        "AGE",
    ]
    assert row.split()[:4] == ["send-invoices", "kubernetes", "*/5", "*"]
    assert status["nextRunTimes"][0] in row
    assert "True" in row
    wide = kubectl.run("get", "sj", "-n", namespace, "-o", "wide").stdout
    assert "TIMEZONE" in wide
    assert "LAST DURATION" in wide
    assert "FAILURES" in wide
    assert "Europe/Berlin" in wide


def test_template_sample_is_copied_verbatim(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    manifest = sample("kubernetes-template.yaml", namespace)
    kubectl.apply(manifest)
    eventually(lambda: ready(kubectl, "nightly-report", namespace), what="Ready")
    cj = cronjob(kubectl, "nightly-report", namespace)
    assert cj is not None
    job = cj["spec"]["jobTemplate"]
    assert job["metadata"]["labels"]["team"] == "analytics"
    assert job["metadata"]["labels"]["sundial.dev/scheduledjob"] == "nightly-report"
    assert job["spec"]["backoffLimit"] == 2
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["--since", "24h"]
    assert (cj["spec"]["successfulJobsHistoryLimit"], cj["spec"]["failedJobsHistoryLimit"]) == (
        2,
        5,
    )


def test_updates_are_followed(kubectl: Kubectl, operator: OperatorProcess, namespace: str) -> None:
    manifest = scheduledjob("follow", namespace)
    kubectl.apply(manifest)
    eventually(lambda: ready(kubectl, "follow", namespace), what="Ready")

    updated = copy.deepcopy(manifest)
    updated["spec"].update(
        schedule="0 3 * * 1-5",
        timeZone="Asia/Tokyo",
        suspend=True,
        concurrencyPolicy="Replace",
        job={"image": "registry.example/app:2", "cronJob": "other", "args": ["--x"]},
    )
    kubectl.apply(updated)

    def followed() -> bool:
        cj = cronjob(kubectl, "follow", namespace)
        assert cj is not None
        spec = cj["spec"]
        container = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        assert spec["schedule"] == "0 3 * * 1-5"
        assert spec["timeZone"] == "Asia/Tokyo"
        assert spec["suspend"] is True
        assert spec["concurrencyPolicy"] == "Replace"
        assert container["image"] == "registry.example/app:2"
        assert container["args"] == ["--x"]
        assert {"name": "CRON_JOB", "value": "other"} in container["env"]
        return True

    eventually(followed, what="CronJob follows the update")
    sj = eventually(lambda: ready(kubectl, "follow", namespace), what="Ready after update")
    assert sj["status"]["nextRunTimes"] == [], "a suspended job has no next run"

    # A field removed from the spec is removed from the CronJob too.
    updated["spec"]["job"].pop("args")
    kubectl.apply(updated)

    def args_removed() -> bool:
        cj = cronjob(kubectl, "follow", namespace)
        assert cj is not None
        container = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        return "args" not in container

    eventually(args_removed, what="args removed")


def test_hand_edit_and_hand_delete_are_restored(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    kubectl.apply(scheduledjob("drift", namespace))
    eventually(lambda: ready(kubectl, "drift", namespace), what="Ready")

    kubectl.run(
        "patch",
        "cronjob",
        "drift",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"schedule": "1 1 1 1 *", "suspend": True}}),
    )
    eventually(
        lambda: (
            (cj := cronjob(kubectl, "drift", namespace)) is not None
            and cj["spec"]["schedule"] == "*/5 * * * *"
            and cj["spec"]["suspend"] is False
        ),
        timeout=30,
        what="hand edit undone",
    )

    uid = cronjob(kubectl, "drift", namespace)["metadata"]["uid"]  # type: ignore[index]
    kubectl.run("delete", "cronjob", "drift", "-n", namespace)
    eventually(
        lambda: (
            (cj := cronjob(kubectl, "drift", namespace)) is not None
            and cj["metadata"]["uid"] != uid
        ),
        timeout=30,
        what="deleted CronJob recreated",
    )


def test_deleting_the_scheduledjob_leaves_nothing_behind(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    kubectl.apply(scheduledjob("gone", namespace))
    eventually(lambda: ready(kubectl, "gone", namespace), what="Ready")
    kubectl.run("create", "job", "gone-manual", "--from=cronjob/gone", "-n", namespace)
    eventually(lambda: kubectl.get("job", "gone-manual", namespace), what="manual Job")

    kubectl.run("delete", "scheduledjob", "gone", "-n", namespace)
    eventually(lambda: cronjob(kubectl, "gone", namespace) is None, what="CronJob collected")
    eventually(lambda: kubectl.get("job", "gone-manual", namespace) is None, what="Job collected")


def test_invalid_update_keeps_the_last_good_cronjob(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    manifest = scheduledjob("keep", namespace)
    kubectl.apply(manifest)
    eventually(lambda: ready(kubectl, "keep", namespace), what="Ready")
    before = cronjob(kubectl, "keep", namespace)
    assert before is not None

    broken = copy.deepcopy(manifest)
    broken["spec"]["schedule"] = "0 0 31 2 *"
    kubectl.apply(broken)
    eventually(
        lambda: ready_condition(kubectl, "keep", namespace).get("reason") == "InvalidSchedule",
        what="Ready=False InvalidSchedule",
    )
    found = ready_condition(kubectl, "keep", namespace)
    assert found["status"] == "False"
    assert "never fires" in found["message"]
    after = cronjob(kubectl, "keep", namespace)
    assert after is not None
    assert after["spec"] == before["spec"]
    warnings = kubectl.events(namespace, involvedObject_name="keep", type="Warning")
    assert any(e["reason"] == "InvalidSchedule" for e in warnings)

    fixed = copy.deepcopy(manifest)
    fixed["spec"]["schedule"] = "0 12 * * *"
    kubectl.apply(fixed)
    eventually(lambda: ready(kubectl, "keep", namespace), what="Ready again")
    recovered = cronjob(kubectl, "keep", namespace)
    assert recovered is not None
    assert recovered["spec"]["schedule"] == "0 12 * * *"


REJECTED_AT_APPLY: list[tuple[str, dict[str, Any], str]] = [
    ("unknown-backend", {"backend": "cron"}, 'Unsupported value: "cron"'),
    ("tz-prefix", {"schedule": "TZ=UTC 0 * * * *"}, "set spec.timeZone instead"),
    ("cron-tz-prefix", {"schedule": "CRON_TZ=UTC 0 * * * *"}, "set spec.timeZone instead"),
    ("both-schedule-interval", {"interval": {"every": "5m"}}, "exactly one of spec.schedule"),
    ("neither", {"schedule": None}, "exactly one of spec.schedule"),
    (
        "interval-on-kubernetes",
        {"schedule": None, "interval": {"every": "5m"}},
        "interval is only supported with backend: temporal",
    ),
    ("jitter-on-kubernetes", {"jitter": "30s"}, "jitter is only supported with backend: temporal"),
    (
        "start-on-kubernetes",
        {"startTime": "2030-01-01T00:00:00Z"},
        "startTime is only supported with backend: temporal",
    ),
    (
        "end-on-kubernetes",
        {"endTime": "2030-01-01T00:00:00Z"},
        "endTime is only supported with backend: temporal",
    ),
    (
        "connection-on-kubernetes",
        {"temporalConnectionRef": {"name": "team"}},
        "temporalConnectionRef is only supported with backend: temporal",
    ),
    (
        "buffer-on-kubernetes",
        {"concurrencyPolicy": "BufferAll"},
        "only supported with backend: temporal",
    ),
    ("bad-policy", {"concurrencyPolicy": "Sometimes"}, 'Unsupported value: "Sometimes"'),
    ("negative-deadline", {"startingDeadlineSeconds": -1}, "should be greater than or equal to 0"),
    (
        "short-catchup",
        {
            "backend": "temporal",
            "job": None,
            "startingDeadlineSeconds": 5,
            "workflow": {"type": "w", "taskQueue": "q"},
        },
        "at least 10",
    ),
    (
        "template-and-shorthand",
        {"job": {"image": "x", "template": {"spec": {}}}},
        "set either job.template or job.image",
    ),
    (
        "template-plus-env",
        {"job": {"template": {"spec": {}}, "env": [{"name": "A"}]}},
        "cannot be combined with shorthand fields",
    ),
    ("no-job", {"job": None}, "backend: kubernetes needs spec.job"),
    (
        "temporal-with-both",
        {"backend": "temporal", "workflow": {"type": "w", "taskQueue": "q"}},
        "not both: remove one",
    ),
    (
        "temporal-with-neither",
        {"backend": "temporal", "job": None},
        "backend: temporal needs spec.job",
    ),
    (
        "bad-duration",
        {
            "backend": "temporal",
            "job": None,
            "schedule": None,
            "interval": {"every": "5 minutes"},
            "workflow": {"type": "w", "taskQueue": "q"},
        },
        "should match",
    ),
    (
        "tiny-interval",
        {
            "backend": "temporal",
            "job": None,
            "schedule": None,
            "interval": {"every": "10ms"},
            "workflow": {"type": "w", "taskQueue": "q"},
        },
        "at least 1s",
    ),
    (
        "fractional-interval",
        {
            "backend": "temporal",
            "job": None,
            "schedule": None,
            "interval": {"every": "1500ms"},
            "workflow": {"type": "w", "taskQueue": "q"},
        },
        "interval.every must be a whole number of seconds",
    ),
    (
        "fractional-offset",
        {
            "backend": "temporal",
            "job": None,
            "schedule": None,
            "interval": {"every": "1m", "offset": "2s500ms"},
            "workflow": {"type": "w", "taskQueue": "q"},
        },
        "interval.offset must be a whole number of seconds",
    ),
    (
        "retry-intervals",
        {
            "backend": "temporal",
            "job": None,
            "workflow": {
                "type": "w",
                "taskQueue": "q",
                "retryPolicy": {"initialInterval": "10s", "maximumInterval": "1s"},
            },
        },
        "maximumInterval must not be shorter than initialInterval",
    ),
    ("history-limit", {"successfulRunsHistoryLimit": 1000}, "less than or equal to 100"),
    (
        "end-before-start",
        {
            "backend": "temporal",
            "job": None,
            "startTime": "2030-01-02T00:00:00Z",
            "endTime": "2030-01-01T00:00:00Z",
            "workflow": {"type": "w", "taskQueue": "q"},
        },
        "endTime must be after startTime",
    ),
    ("bad-tz-chars", {"timeZone": "Europe/Berlin; rm -rf"}, "should match"),
    ("a-name-that-is-far-too-long-for-the-derived-cronjob-name-x", {}, "at most 52 characters"),
]


@pytest.mark.parametrize(
    ("name", "overrides", "message"), REJECTED_AT_APPLY, ids=[r[0] for r in REJECTED_AT_APPLY]
)
def test_invalid_manifest_is_rejected_at_apply(
    kubectl: Kubectl, crd_installed: None, name: str, overrides: dict[str, Any], message: str
) -> None:
    manifest = scheduledjob(name, "default")
    for key, value in overrides.items():
        if value is None:
            manifest["spec"].pop(key, None)
        else:
            manifest["spec"][key] = value
    result = kubectl.apply(manifest, check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert message in result.stderr, result.stderr


BOTH = "not both: remove one"  # the exactly-one rule's message


def test_exactly_one_of_job_and_workflow_on_temporal_spares_an_object_stored_with_both(
    kubectl: Kubectl, crd_installed: None, namespace: str
) -> None:
    """The rule came after objects on temporal with both were stored (their workflow runs,
    as before). Such an object stays writable (CRD validation ratcheting: the rule sees
    the old object); a new one with both, or one that gains both, is refused. "Stored
    before the rule" is made real: the CRD without the rule, an object applied, the CRD
    back."""
    workflow = {"type": "w", "taskQueue": "q"}
    both = scheduledjob("stored", namespace, backend="temporal", workflow=workflow,
                        schedule="0 0 1 1 *")  # fmt: skip
    crd = kubectl.run("get", "crd", "scheduledjobs.sundial.dev", "-o", "json").stdout
    original = json.loads(crd)
    without = json.loads(crd)
    for version in without["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["x-kubernetes-validations"] = [
            rule for rule in spec["x-kubernetes-validations"] if BOTH not in rule["message"]
        ]
    kubectl.run("replace", "-f", "-", stdin=json.dumps(without))
    try:
        eventually(lambda: kubectl.apply(both, check=False).returncode == 0, timeout=30,
                   what="stored with both while the rule was not there")  # fmt: skip
    finally:
        current = json.loads(kubectl.run("get", "crd", "scheduledjobs.sundial.dev", "-o",
                                         "json").stdout)  # fmt: skip
        original["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        kubectl.run("replace", "-f", "-", stdin=json.dumps(original))

    fresh = scheduledjob("fresh", namespace, backend="temporal", workflow=workflow)
    refused = eventually(lambda: (r := kubectl.apply(fresh, check=False)).returncode != 0 and r,
                         timeout=30, what="a new object with both refused")  # fmt: skip
    assert BOTH in refused.stderr, refused.stderr
    # The stored one: still writable with both, its workflow is what runs.
    both["spec"]["suspend"] = True
    kubectl.apply(both)
    # Gaining both is refused: on kubernetes with both (its workflow ignored), then moved.
    moving = scheduledjob("moving", namespace, workflow=workflow)
    kubectl.apply(moving)
    moving["spec"]["backend"] = "temporal"
    refused = kubectl.apply(moving, check=False)
    assert refused.returncode != 0, refused.stdout
    assert BOTH in refused.stderr, refused.stderr
    del moving["spec"]["job"]
    kubectl.apply(moving)  # the one-field-less move: to its workflow


REPORTED_IN_STATUS: list[tuple[str, dict[str, Any], str, str]] = [
    ("bad-cron", {"schedule": "61 * * * *"}, "InvalidSchedule", "not a valid cron expression"),
    ("six-fields", {"schedule": "0 * * * * *"}, "InvalidSchedule", "has 6 fields"),
    ("quartz-l", {"schedule": "0 0 L * *"}, "InvalidSchedule", "L, W and # are not supported"),
    ("bad-macro", {"schedule": "@reboot"}, "InvalidSchedule", "unknown macro"),
    ("bad-tz", {"timeZone": "Mars/Olympus_Mons"}, "InvalidTimeZone", "not an IANA time zone"),
    (
        "bad-template",
        {"job": {"template": {"spec": {"template": {"spec": {"containers": [{"name": "x"}]}}}}}},
        "InvalidJobTemplate",
        "image",
    ),
]


def test_problems_only_the_operator_can_see_are_reported_in_status(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    for name, overrides, _, _ in REPORTED_IN_STATUS:
        kubectl.apply(scheduledjob(name, namespace, **overrides))
    kubectl.apply(scheduledjob("healthy", namespace))
    for name, _, reason, text in REPORTED_IN_STATUS:
        found = eventually(
            lambda n=name, r=reason: (
                ready_condition(kubectl, n, namespace).get("reason") == r
                and ready_condition(kubectl, n, namespace)
            ),
            what=f"{name}: Ready=False {reason}",
        )
        assert found["status"] == "False"
        assert text in found["message"], found["message"]
        assert cronjob(kubectl, name, namespace) is None
    # The broken ones do not stop a healthy neighbour, and the operator does not loop on them.
    eventually(lambda: ready(kubectl, "healthy", namespace), what="healthy neighbour Ready")
    versions = {
        n: kubectl.get("scheduledjob", n, namespace)["metadata"]["resourceVersion"]  # type: ignore[index]
        for n, *_ in REPORTED_IN_STATUS
    }
    consistently(
        lambda: all(
            kubectl.get("scheduledjob", n, namespace)["metadata"]["resourceVersion"] == v  # type: ignore[index]
            for n, v in versions.items()
        ),
        duration=5,
    )
    operator.assert_alive()


def test_restart_writes_nothing_to_objects_in_step(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    names = [f"steady-{i}" for i in range(5)]
    for name in names:
        kubectl.apply(scheduledjob(name, namespace, schedule="0 0 1 1 *"))
    for name in names:
        eventually(lambda n=name: ready(kubectl, n, namespace), what=f"{name} Ready")

    def versions() -> dict[str, tuple[str, str]]:
        return {
            n: (
                kubectl.get("scheduledjob", n, namespace)["metadata"]["resourceVersion"],  # type: ignore[index]
                kubectl.get("cronjob", n, namespace)["metadata"]["resourceVersion"],  # type: ignore[index]
            )
            for n in names
        }

    before = versions()
    operator.restart()
    # A new object proves the restarted operator has worked through its initial listing.
    kubectl.apply(scheduledjob("after-restart", namespace, schedule="0 0 1 1 *"))
    eventually(
        lambda: ready(kubectl, "after-restart", namespace),
        timeout=90,
        what="restarted operator reconciles",
    )
    assert versions() == before
    assert "kopf.zalando.org" not in json.dumps(
        kubectl.get("scheduledjob", names[0], namespace)["metadata"]  # type: ignore[index]
    )


def test_day_of_month_and_week_together_are_flagged(
    kubectl: Kubectl, operator: OperatorProcess, namespace: str
) -> None:
    """OR on CronJob, AND on Temporal: said in Ready's message and a Warning Event."""
    kubectl.apply(scheduledjob("both-days", namespace, schedule="0 9 1 * 1"))
    sj = eventually(lambda: ready(kubectl, "both-days", namespace), what="Ready")
    message = ready_condition(kubectl, "both-days", namespace)["message"]
    assert "EITHER" in message, message
    assert all(
        datetime.fromisoformat(t).day == 1 or datetime.fromisoformat(t).weekday() == 0
        for t in sj["status"]["nextRunTimes"]
    ), "every next run is on the 1st OR a Monday"
    eventually(
        lambda: kubectl.events(namespace, involvedObject_name="both-days",
                               reason="CronSemanticsDiffer"),
        what="CronSemanticsDiffer Event",
    )  # fmt: skip


def test_kubectl_explain_describes_the_spec(kubectl: Kubectl, crd_installed: None) -> None:
    text = kubectl.run("explain", "scheduledjob.spec.schedule").stdout
    assert "5-field cron expression" in text
