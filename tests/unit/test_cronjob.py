"""ScheduledJob -> CronJob mapping, field by field."""

from __future__ import annotations

from typing import Any

import pytest

from sundial.api.models import ScheduledJob
from sundial.planning.cronjob import (
    SCHEDULEDJOB_LABEL,
    SPEC_HASH_ANNOTATION,
    cronjob_manifest,
    is_subset,
    metadata_in_step,
    replacement,
    spec_in_step,
)

# What every container is told about its run (test_run_context_env.py has the details).
RUN_ENV = [
    {
        "name": "SUNDIAL_JOB_NAME",
        "valueFrom": {
            "fieldRef": {
                "apiVersion": "v1",
                "fieldPath": "metadata.labels['batch.kubernetes.io/job-name']",
            }
        },
    },
    {"name": "SUNDIAL_CRONJOB", "value": "invoices"},
]


def scheduledjob(**spec: Any) -> ScheduledJob:
    spec.setdefault("schedule", "*/5 * * * *")
    spec.setdefault("job", {"image": "registry.example/billing:1.2", "cronJob": "invoices"})
    return ScheduledJob.model_validate(
        {
            "metadata": {"name": "invoices", "namespace": "billing", "uid": "u-1", "generation": 2},
            "spec": spec,
        }
    )


def test_shorthand_renders_a_one_shot_job_with_the_cron_env() -> None:
    manifest = cronjob_manifest(scheduledjob())
    spec = manifest["spec"]
    assert spec["schedule"] == "*/5 * * * *"
    assert spec["timeZone"] == "UTC"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["suspend"] is False
    assert spec["successfulJobsHistoryLimit"] == 1
    assert spec["failedJobsHistoryLimit"] == 3
    assert "startingDeadlineSeconds" not in spec
    job = spec["jobTemplate"]["spec"]
    assert job["ttlSecondsAfterFinished"] == 300
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/billing:1.2"
    assert container["env"] == [
        {"name": "MODE", "value": "cron"},
        {"name": "CRON_JOB", "value": "invoices"},
        *RUN_ENV,
    ]


def test_shorthand_pods_get_the_restricted_fields_that_hold_for_any_image() -> None:
    pod = cronjob_manifest(scheduledjob())["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_shorthand_security_contexts_are_laid_over_the_defaults() -> None:
    job = {"image": "registry.example/billing:1.2",
           "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
           "podSecurityContext": {"fsGroup": 2000}}  # fmt: skip
    pod = cronjob_manifest(scheduledjob(job=job))["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": 2000}
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 65534,
    }


def test_every_spec_field_is_mapped() -> None:
    manifest = cronjob_manifest(
        scheduledjob(
            schedule="@hourly",
            timeZone="Europe/Berlin",
            concurrencyPolicy="Replace",
            startingDeadlineSeconds=120,
            suspend=True,
            successfulRunsHistoryLimit=5,
            failedRunsHistoryLimit=7,
            job={
                "image": "img",
                "command": ["run"],
                "args": ["--fast"],
                "env": [{"name": "A", "value": "1"}],
                "envFrom": [{"secretRef": {"name": "s"}}],
                "resources": {"limits": {"cpu": "1"}},
                "serviceAccountName": "runner",
                "nodeSelector": {"pool": "batch"},
                "tolerations": [{"key": "batch", "operator": "Exists"}],
                "parallelism": 2,
                "ttlSecondsAfterFinished": 60,
            },
        )
    )
    spec = manifest["spec"]
    assert (spec["schedule"], spec["timeZone"], spec["concurrencyPolicy"]) == (
        "@hourly",
        "Europe/Berlin",
        "Replace",
    )
    assert spec["startingDeadlineSeconds"] == 120
    assert spec["suspend"] is True
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (5, 7)
    job = spec["jobTemplate"]["spec"]
    assert (job["parallelism"], job["ttlSecondsAfterFinished"]) == (2, 60)
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == "runner"
    assert pod["nodeSelector"] == {"pool": "batch"}
    assert pod["tolerations"] == [{"key": "batch", "operator": "Exists"}]
    (container,) = pod["containers"]
    assert container["command"] == ["run"]
    assert container["args"] == ["--fast"]
    assert container["env"] == [{"name": "A", "value": "1"}, *RUN_ENV]
    assert container["envFrom"] == [{"secretRef": {"name": "s"}}]
    assert container["resources"] == {"limits": {"cpu": "1"}}


def test_full_template_is_copied_and_labelled() -> None:
    template = {
        "metadata": {"labels": {"team": "a"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "x", "image": "i"}]}
            },
        },
    }
    manifest = cronjob_manifest(scheduledjob(job={"template": template}))
    rendered = manifest["spec"]["jobTemplate"]
    labels = {"app.kubernetes.io/managed-by": "sundial", SCHEDULEDJOB_LABEL: "invoices"}
    # The Pods too carry the label: the Pod watch selects them by it.
    containers = [{"name": "x", "image": "i", "env": RUN_ENV}]
    pod_spec = {"restartPolicy": "OnFailure", "containers": containers}
    pod_template = {"spec": pod_spec, "metadata": {"labels": labels}}
    assert rendered["spec"] == {**template["spec"], "template": pod_template}
    assert rendered["metadata"]["labels"] == {"team": "a", **labels}
    assert template["metadata"]["labels"] == {"team": "a"}, "the input is not modified"
    assert "metadata" not in template["spec"]["template"], "the input is not modified"


def test_identity_owner_and_labels() -> None:
    meta = cronjob_manifest(scheduledjob())["metadata"]
    assert (meta["name"], meta["namespace"]) == ("invoices", "billing")
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "sundial",
        SCHEDULEDJOB_LABEL: "invoices",
    }
    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "name": "invoices",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert not any("argocd" in k for k in {**meta["labels"], **meta["annotations"]})
    assert "kubectl.kubernetes.io/last-applied-configuration" not in meta["annotations"]


def test_hash_changes_with_the_spec_and_only_then() -> None:
    first = cronjob_manifest(scheduledjob())["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    again = cronjob_manifest(scheduledjob())["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    other = cronjob_manifest(scheduledjob(suspend=True))["metadata"]["annotations"][
        SPEC_HASH_ANNOTATION
    ]
    assert first == again != other


def test_live_object_with_server_defaults_is_in_step() -> None:
    desired = cronjob_manifest(scheduledjob())
    live = {
        "metadata": {**desired["metadata"], "resourceVersion": "7", "generation": 1},
        "spec": {
            **desired["spec"],
            "jobTemplate": {
                "metadata": desired["spec"]["jobTemplate"]["metadata"],
                "spec": {**desired["spec"]["jobTemplate"]["spec"], "backoffLimit": 6},
            },
        },
        "status": {"lastScheduleTime": "2026-01-01T00:00:00Z"},
    }
    assert metadata_in_step(desired, live)
    assert spec_in_step(desired, live)


@pytest.mark.parametrize(
    "edit",
    [
        lambda live: live["spec"].update(schedule="0 0 * * *"),
        lambda live: live["spec"].update(suspend=True),
        lambda live: live["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][
            0
        ].update(image="evil"),
        lambda live: live["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"].append(
            {"name": "sidecar"}
        ),
    ],
)
def test_hand_edits_are_drift(edit: Any) -> None:
    import copy

    desired = cronjob_manifest(scheduledjob())
    live = copy.deepcopy(desired)
    edit(live)
    assert not spec_in_step(desired, live)


def test_is_subset() -> None:
    assert is_subset({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2, "c": 3}], "d": 4})
    assert not is_subset({"a": [1]}, {"a": [1, 2]})
    assert not is_subset({"a": None}, {})


def test_the_controllers_events_name_the_slots_of_jobs_gone_since() -> None:
    from datetime import UTC, datetime

    from sundial.planning.cronjob import slots_in_controller_events

    messages = [
        "Created job invoices-29412245",
        "Saw completed job: invoices-29412246, condition: Complete",
        "Deleted job invoices-29412240",
        "Created job invoices-reports-29412247",  # another CronJob's Job
        "Created job invoices-manual",
    ]
    assert slots_in_controller_events("invoices", messages) == {
        datetime.fromtimestamp(m * 60, UTC) for m in (29412245, 29412246, 29412240)
    }


def test_the_controllers_record_of_creates_and_completions_each_in_an_event_of_its_own() -> None:
    """Issue 25, defect 16: the creates and completions the controller's Events name one by
    one, and none once its event recorder folded creates into one Event (it names only the
    latest Job)."""
    from datetime import UTC, datetime

    from sundial.planning.cronjob import controller_events

    def slot(minutes: int) -> datetime:
        return datetime.fromtimestamp(minutes * 60, UTC)

    messages = [
        "Created job invoices-29412245",
        "Saw completed job: invoices-29412245, condition: Complete",
        "Created job invoices-29412247",
        "Deleted job invoices-29412240",
        "Created job invoices-reports-29412248",  # another CronJob's Job
        "(combined from similar events): Saw completed job: invoices-29412247, condition: Failed",
    ]
    said = controller_events("invoices", messages)
    assert said.created == {slot(29412245), slot(29412247)}
    assert said.completed == {slot(29412245)}, "a combined completion names no one in full"
    assert said.named == {slot(m) for m in (29412245, 29412247, 29412240)}
    folded = controller_events(
        "invoices", [*messages, "(combined from similar events): Created job invoices-29412249"]
    )
    assert folded.created is None
    assert slot(29412249) in folded.named


def test_a_refused_create_is_no_evidence_that_its_slot_ran() -> None:
    """The CronJob controller's FailedCreate ("Error creating job: %v", the apiserver's
    refusal, which names the Job it did not make) is no run: only the messages of the
    Events that prove a Job was made name a slot that ran. The formats are the
    controller's (k8s.io/kubernetes pkg/controller/cronjob/cronjob_controllerv2.go)."""
    from datetime import UTC, datetime

    from sundial.planning.cronjob import controller_events, slots_in_controller_events

    def slot(minutes: int) -> datetime:
        return datetime.fromtimestamp(minutes * 60, UTC)

    refused = [
        # A ValidatingAdmissionPolicy, a ResourceQuota, a webhook, a namespace's admission.
        'Error creating job: jobs.batch "invoices-29412250" is forbidden: '
        "ValidatingAdmissionPolicy 'deny-jobs' with binding 'deny-jobs' denied request: "
        "failed expression: false",
        'Error creating job: jobs.batch "invoices-29412251" is forbidden: exceeded quota: '
        "jobs, requested: count/jobs.batch=1, used: count/jobs.batch=2, "
        "limited: count/jobs.batch=2",
        'Error creating job: admission webhook "jobs.example.com" denied the request: '
        'jobs.batch "invoices-29412252" is not allowed',
        "(combined from similar events): Error creating job: jobs.batch "
        '"invoices-29412253" is forbidden: exceeded quota: jobs',
        # Named but not proof of a create: a delete that failed, a Job it did not make.
        'Deleted job: jobs.batch "invoices-29412254" not found',
        "Saw a job that the controller did not create or forgot: invoices-29412255",
        "Missed scheduled time to start a job: Sun, 06 Dec 2026 03:00:00 +0000",
        "Not starting job because prior execution is running and concurrency policy is Forbid",
    ]
    made = [
        "Created job invoices-29412245",
        "Saw completed job: invoices-29412246, condition: Complete",
        "Deleted job invoices-29412240",
        "Active job went missing: invoices-29412241",
        "(combined from similar events): Created job invoices-29412249",
    ]
    expected = {slot(m) for m in (29412245, 29412246, 29412240, 29412241, 29412249)}
    assert slots_in_controller_events("invoices", refused + made) == expected
    said = controller_events("invoices", refused + made)
    assert said.named == expected
    assert said.created is None  # creates combined, as before
    assert controller_events("invoices", refused).named == frozenset()


def test_a_replacement_is_the_desired_cronjob_over_what_others_put_on_the_live_one() -> None:
    """A spec change replaces the CronJob wholly: a field the spec no longer sets is gone;
    labels, annotations and finalizers others added stay; Sundial's own win; the live
    resourceVersion is the precondition; the result is in step with what was desired."""
    desired = cronjob_manifest(scheduledjob(suspend=True))
    live = cronjob_manifest(scheduledjob(startingDeadlineSeconds=120))
    live["metadata"] |= {
        "resourceVersion": "41", "uid": "cj-1", "generation": 3, "finalizers": ["orphan"],
        "labels": {**live["metadata"]["labels"], "team": "billing", SCHEDULEDJOB_LABEL: "x"},
        "annotations": {"note": "kept", SPEC_HASH_ANNOTATION: "old"},
    }  # fmt: skip
    live["spec"]["jobTemplate"]["spec"]["template"]["spec"]["nodeSelector"] = {"a": "b"}
    written = replacement(desired, live)
    assert written["spec"] == desired["spec"]
    assert "startingDeadlineSeconds" not in written["spec"]
    meta = written["metadata"]
    assert meta["resourceVersion"] == "41"
    assert meta["finalizers"] == ["orphan"]
    assert meta["labels"]["team"] == "billing"
    assert meta["labels"][SCHEDULEDJOB_LABEL] == "invoices"
    assert meta["annotations"] == {"note": "kept", **desired["metadata"]["annotations"]}
    assert meta["ownerReferences"] == desired["metadata"]["ownerReferences"]
    assert "uid" not in meta
    assert "generation" not in meta
    assert metadata_in_step(desired, written)
    assert spec_in_step(desired, written)
