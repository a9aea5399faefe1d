"""The kubernetes backend's desired state: a ScheduledJob as a batch/v1 CronJob. Pure."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sundial.api.models import GROUP, KIND, VERSION, JobSpec, ScheduledJob
from sundial.planning import catchup
from sundial.planning.schedule import parse_time
from sundial.planning.status import CronJobView

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "sundial"
SCHEDULEDJOB_LABEL = f"{GROUP}/scheduledjob"
SPEC_HASH_ANNOTATION = f"{GROUP}/spec-hash"
# Set by the CronJob controller on every Job it creates (GA in Kubernetes 1.32).
SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
# On a Job made for a request (run now, backfill, catch-up): RunNow/<id>, Backfill/<id>,
# CatchUp/<id>.
REQUEST_ANNOTATION = f"{GROUP}/request"

DEFAULT_TTL_SECONDS_AFTER_FINISHED = 300
CONTAINER_NAME = "job"

# What a run's Pod is told about its run (docs/cron-library.md; the sundial-cron library
# reads them). Every container of every Job gets the Job's name, from the label the Job
# controller puts on its Pods, and the CronJob's name: a CronJob's Job is named
# `<cronjob>-<slot in minutes since the epoch>`, so the two give the slot. The Jobs Sundial
# makes itself (run now, backfill) also get the slot and the request, as values. A name the
# user's template sets is left as the user set it.
RUN_ENV_JOB_NAME = "SUNDIAL_JOB_NAME"
RUN_ENV_CRONJOB = "SUNDIAL_CRONJOB"
RUN_ENV_SLOT = "SUNDIAL_SLOT"
RUN_ENV_REQUEST = "SUNDIAL_REQUEST"
# The Job controller's label on each Pod it makes (Kubernetes 1.27+).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def cronjob_name(scheduledjob_name: str) -> str:
    """The CronJob keeps the ScheduledJob's name, so `kubectl create job --from=cronjob/<n>`
    works with the name people already know. The CRD caps names at 52 characters."""
    return scheduledjob_name


def slot_from_job_name(cronjob: str, job_name: str) -> datetime | None:
    """The slot a CronJob controller's Job was made for, from its name
    `<cronjob>-<scheduled time in minutes since the epoch>` (the controller's own
    naming, for clusters whose Jobs lack the scheduled-timestamp annotation)."""
    prefix = f"{cronjob}-"
    minutes = job_name[len(prefix) :] if job_name.startswith(prefix) else ""
    if not minutes.isdigit() or len(minutes) > 12:
        return None
    return datetime.fromtimestamp(int(minutes) * 60, UTC)


def slots_in_controller_events(cronjob: str, messages: list[str]) -> set[datetime]:
    """Slots named by the CronJob controller's Events that prove their Job was made:
    SuccessfulCreate "Created job X", SawCompletedJob "Saw completed job: X, condition: C",
    SuccessfulDelete "Deleted job X" and MissingJob "Active job went missing: X" (a Job
    in its active list): evidence that a run was started even when its Job is gone. Each
    is read by its exact format, the whole message, so an Event that names a Job it did
    not make is none: FailedCreate "Error creating job: <the apiserver's refusal>" (an
    admission policy, a quota, a webhook; the refusal names the Job), FailedDelete
    "Deleted job: <error>", UnexpectedJob (a Job it did not create, or forgot)."""
    found: set[datetime] = set()
    for message in messages:
        match = _JOB_MADE.fullmatch(message.removeprefix(COMBINED_PREFIX))
        slot = slot_from_job_name(cronjob, match.group("job")) if match else None
        if slot is not None:
            found.add(slot)
    return found


# How the CronJob controller words its Events (k8s.io/kubernetes pkg/controller/cronjob),
# and the prefix its event recorder gives an Event that stands for several alike.
COMBINED_PREFIX = "(combined from similar events): "
CREATED_PREFIX = "Created job "
COMPLETED_PREFIX = "Saw completed job: "
OVERLAP_SKIP_MESSAGE = "Not starting job because prior execution is running"
# The messages of the Events that prove a Job was made, each naming it (a Job's name is a
# DNS subdomain: no spaces, no commas).
_JOB_MADE = re.compile(
    r"(?:Created job |Saw completed job: |Deleted job |Active job went missing: )"
    r"(?P<job>[a-z0-9][a-z0-9.-]*)(?:, condition: \S+)?"
)


@dataclass(frozen=True)
class ControllerEvents:
    """What the CronJob controller's Events about one CronJob say of its slots."""

    # Slots whose Jobs any of them names: each was created (even if gone since).
    named: frozenset[datetime]
    # Slots named by a SuccessfulCreate Event of its own; None once the recorder combined
    # creates into one Event, which names only the latest Job.
    created: frozenset[datetime] | None
    # Slots named by a SawCompletedJob Event of its own.
    completed: frozenset[datetime]
    # JobAlreadyActive: a slot not started under Forbid because a Job was running.
    overlap_skip: bool


def controller_events(cronjob: str, messages: list[str]) -> ControllerEvents:
    """The CronJob controller's Events read: the slots they name, the creates and the
    completions each in an Event of its own, and whether it skipped a slot for overlap."""
    created: set[datetime] = set()
    completed: set[datetime] = set()
    creates_combined = False
    for message in messages:
        if message.startswith(COMBINED_PREFIX):
            creates_combined |= message.removeprefix(COMBINED_PREFIX).startswith(CREATED_PREFIX)
            continue
        for prefix, found in ((CREATED_PREFIX, created), (COMPLETED_PREFIX, completed)):
            if message.startswith(prefix):
                slot = slot_from_job_name(cronjob, message[len(prefix) :].split(",", 1)[0])
                if slot is not None:
                    found.add(slot)
    return ControllerEvents(
        named=frozenset(slots_in_controller_events(cronjob, messages)),
        created=None if creates_combined else frozenset(created),
        completed=frozenset(completed),
        overlap_skip=any(OVERLAP_SKIP_MESSAGE in message for message in messages),
    )


# A person's request to take over an existing object of this name (a CronJob, or a
# Temporal schedule id): its spec is then replaced wholly by the ScheduledJob's.


def is_owned_by(obj: dict[str, Any], sj: ScheduledJob) -> bool:
    """Made by this ScheduledJob: its controller owner reference names the object's uid."""
    return any(
        ref.get("controller") and ref.get("uid") == sj.metadata.uid
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
    )


def owner_reference(sj: ScheduledJob) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": sj.metadata.name,
        "uid": sj.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _labels(sj: ScheduledJob) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY, SCHEDULEDJOB_LABEL: sj.metadata.name}


# The restricted Pod Security Standard's fields that hold for any image. runAsNonRoot is
# left to the user: only the image knows its user, and the kubelet would refuse a root
# image at every run, after admission, where the failure is far from the spec.
DEFAULT_CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
DEFAULT_POD_SECURITY: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}


def _shorthand_job_template(job: JobSpec, labels: dict[str, str]) -> dict[str, Any]:
    env = list(job.env or [])
    if job.cron_job is not None:
        env += [{"name": "MODE", "value": "cron"}, {"name": "CRON_JOB", "value": job.cron_job}]
    container: dict[str, Any] = {"name": CONTAINER_NAME, "image": job.image}
    container_fields: tuple[tuple[str, Any], ...] = (
        ("command", job.command),
        ("args", job.args),
        ("env", env or None),
        ("envFrom", job.env_from),
        ("resources", job.resources),
    )
    for key, value in container_fields:
        if value is not None:
            container[key] = value
    container["securityContext"] = {**DEFAULT_CONTAINER_SECURITY, **(job.security_context or {})}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {**DEFAULT_POD_SECURITY, **(job.pod_security_context or {})},
        "containers": [container],
    }
    pod_fields: tuple[tuple[str, Any], ...] = (
        ("serviceAccountName", job.service_account_name),
        ("nodeSelector", job.node_selector),
        ("tolerations", job.tolerations),
    )
    for key, value in pod_fields:
        if value is not None:
            pod_spec[key] = value
    job_spec: dict[str, Any] = {
        "ttlSecondsAfterFinished": (
            job.ttl_seconds_after_finished
            if job.ttl_seconds_after_finished is not None
            else DEFAULT_TTL_SECONDS_AFTER_FINISHED
        ),
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
    }
    if job.parallelism is not None:
        job_spec["parallelism"] = job.parallelism
    if job.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = job.active_deadline_seconds
    return {"metadata": {"labels": dict(labels)}, "spec": job_spec}


def _full_job_template(template: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    rendered = copy.deepcopy(template)
    metadata = rendered.setdefault("metadata", {})
    # Our label on every Job lets the operator find a ScheduledJob's runs with one watch,
    # and on every Pod, their times (podwatch.py).
    metadata["labels"] = {**metadata.get("labels", {}), **labels}
    pod = rendered.setdefault("spec", {}).setdefault("template", {})
    pod_metadata = pod.setdefault("metadata", {})
    pod_metadata["labels"] = {**(pod_metadata.get("labels") or {}), **labels}
    return rendered


def job_template(sj: ScheduledJob) -> dict[str, Any]:
    job = sj.spec.job
    if job is None:
        raise ValueError("a container job needs spec.job")
    labels = _labels(sj)
    if job.template is not None:
        rendered = _full_job_template(job.template, labels)
    else:
        rendered = _shorthand_job_template(job, labels)
    job_name = {
        "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{JOB_NAME_LABEL}']"}
    }
    add_env(rendered, [
        {"name": RUN_ENV_JOB_NAME, "valueFrom": job_name},
        {"name": RUN_ENV_CRONJOB, "value": cronjob_name(sj.metadata.name)},
    ])  # fmt: skip
    return rendered


def add_env(job: dict[str, Any], added: list[dict[str, Any]]) -> None:
    """Appends `added` to the env of each container of the Job (template) `job`, in place,
    but a name the container already sets: the user's own value stands."""
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod.get("containers") or []:
        env = list(container.get("env") or [])
        present = {item.get("name") for item in env}
        container["env"] = env + [item for item in added if item["name"] not in present]


def spec_hash(manifest: dict[str, Any]) -> str:
    text = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cronjob_manifest(sj: ScheduledJob) -> dict[str, Any]:
    """The whole CronJob Sundial wants for this ScheduledJob (no defaults the server adds)."""
    spec = sj.spec
    if spec.schedule is None:
        raise ValueError("backend kubernetes needs spec.schedule")
    cronjob_spec: dict[str, Any] = {
        "schedule": " ".join(spec.schedule.split()),
        # Always explicit: an unset timeZone means the controller-manager's local zone.
        "timeZone": spec.time_zone,
        "concurrencyPolicy": spec.concurrency_policy,
        "suspend": spec.suspend,
        "successfulJobsHistoryLimit": spec.successful_runs_history_limit,
        "failedJobsHistoryLimit": spec.failed_runs_history_limit,
        "jobTemplate": job_template(sj),
    }
    deadline = catchup.kubernetes_deadline(spec)
    if deadline is not None:
        cronjob_spec["startingDeadlineSeconds"] = deadline
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": cronjob_name(sj.metadata.name),
            "namespace": sj.metadata.namespace,
            "labels": _labels(sj),
            "ownerReferences": [owner_reference(sj)],
        },
        "spec": cronjob_spec,
    }
    body["metadata"]["annotations"] = {SPEC_HASH_ANNOTATION: spec_hash(body)}
    return body


def replacement(desired: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """The whole CronJob a replace writes over `live`, a CronJob Sundial made: Sundial's
    spec, owner reference, labels and annotations, over the labels, annotations and
    finalizers others put on it (kept), with the live resourceVersion as precondition."""
    meta = live.get("metadata") or {}
    wanted = desired["metadata"]
    kept = {key: meta[key] for key in ("finalizers",) if meta.get(key)}
    return {
        **desired,
        "metadata": {
            **wanted,
            **kept,
            "labels": {**(meta.get("labels") or {}), **wanted["labels"]},
            "annotations": {**(meta.get("annotations") or {}), **wanted["annotations"]},
            "resourceVersion": meta.get("resourceVersion"),
        },
    }


def write_fingerprint(written: dict[str, Any]) -> dict[str, Any]:
    """What tells a later CronJob apart from one Sundial wrote: the spec hash it wrote and
    the generation the server gave it (a live CronJob with both is that write, whatever the
    apiserver canonicalised in its spec)."""
    meta = written.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return {
        "metadata": {
            "annotations": {SPEC_HASH_ANNOTATION: annotations.get(SPEC_HASH_ANNOTATION)},
            "generation": meta.get("generation"),
        }
    }


def is_subset(wanted: Any, live: Any) -> bool:
    """True when every value in `wanted` is present and equal in `live` (lists by position)."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(
            key in live and is_subset(value, live[key]) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(live, list)
            and len(wanted) == len(live)
            and all(is_subset(w, v) for w, v in zip(wanted, live, strict=True))
        )
    return bool(wanted == live)


def metadata_in_step(desired: dict[str, Any], live: dict[str, Any]) -> bool:
    wanted = {k: desired["metadata"][k] for k in ("labels", "annotations", "ownerReferences")}
    return is_subset(wanted, live.get("metadata", {}))


def spec_in_step(desired: dict[str, Any], live: dict[str, Any]) -> bool:
    return is_subset(desired["spec"], live.get("spec", {}))


def job_from_template(
    template: dict[str, Any],
    name: str,
    namespace: str,
    slot: datetime,
    owner: dict[str, Any],
    annotations: dict[str, str],
) -> dict[str, Any]:
    """A Job made from a job template as the CronJob controller makes its own: the
    template's labels, the scheduled-timestamp annotation (the slot it runs for) and
    `annotations`, a controller owner reference (`owner`); its Pods are told the slot
    (RUN_ENV_SLOT)."""
    meta = template.get("metadata") or {}
    scheduled = slot.astimezone(UTC).isoformat().replace("+00:00", "Z")
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": {
                **(meta.get("annotations") or {}),
                SCHEDULED_TIMESTAMP_ANNOTATION: scheduled,
                **annotations,
            },
            "ownerReferences": [owner],
        },
        "spec": copy.deepcopy(template["spec"]),
    }
    add_env(job, [{"name": RUN_ENV_SLOT, "value": scheduled}])
    return job


def requested_job(
    cronjob: dict[str, Any], name: str, slot: datetime, request_label: str
) -> dict[str, Any]:
    """A Job from the CronJob's template for a run somebody asked for (run now, backfill):
    owned by the CronJob (so its history limits count it, and it goes with the CronJob),
    a slot's run marked by request_label; its Pods are told the request too
    (RUN_ENV_REQUEST)."""
    owner = cronjob["metadata"]
    job = job_from_template(
        cronjob["spec"]["jobTemplate"], name, owner["namespace"], slot,
        {"apiVersion": "batch/v1", "kind": "CronJob", "name": owner["name"],
         "uid": owner["uid"], "controller": True, "blockOwnerDeletion": True},
        {REQUEST_ANNOTATION: request_label},
    )  # fmt: skip
    add_env(job, [{"name": RUN_ENV_REQUEST, "value": request_label}])
    return job


def cronjob_view(cronjob: dict[str, Any]) -> CronJobView:
    """What status needs of the CronJob in place."""
    observed = cronjob.get("status") or {}
    annotations = (cronjob.get("metadata") or {}).get("annotations") or {}
    return CronJobView(
        name=(cronjob.get("metadata") or {}).get("name", ""),
        last_schedule_time=parse_time(observed.get("lastScheduleTime")),
        active=len(observed.get("active") or []),
        spec_hash=annotations.get(SPEC_HASH_ANNOTATION),
    )
