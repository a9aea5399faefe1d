"""The temporal backend's desired state, as plain data: the Schedule's id, its definition
(what the spec hash covers) and Sundial's pause notes. Pure: the SDK's Schedule is rendered
from it in backends/temporal/schedule.py."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from sundial.api.models import (
    GROUP,
    ConcurrencyPolicy,
    ScheduledJob,
    ScheduledJobSpec,
)
from sundial.planning import catchup
from sundial.planning.cronjob import job_template, spec_hash
from sundial.planning.pausing import is_held_note

SPEC_HASH_MEMO_KEY = f"{GROUP}/spec-hash"
SCHEDULEDJOB_MEMO_KEY = f"{GROUP}/scheduledjob"
# The ScheduledJob's uid: a schedule is Sundial's for an object only if it says so.
SCHEDULEDJOB_UID_MEMO_KEY = f"{GROUP}/scheduledjob-uid"
# startingDeadlineSeconds unset means "no deadline" on a CronJob; Temporal always has a
# catch-up window, so Sundial sets the server's own default, one year, explicitly (some
# SDKs document 60 s, and an implicit default is a surprise waiting to happen).
DEFAULT_CATCHUP_WINDOW = timedelta(days=365)
SUSPEND_NOTE = "Paused by Sundial: the ScheduledJob has spec.suspend: true"
HELD_NOTE = "Paused by Sundial"
RESUME_NOTE = "Resumed by Sundial: the ScheduledJob has spec.suspend: false"
# A schedule created paused while its ScheduledJob switches from kubernetes: it proves that
# Temporal accepts it before the CronJob goes, and starts only once the CronJob is gone.
SWITCH_NOTE = "Paused by Sundial: switching from backend kubernetes"
# A schedule created paused at a new place (a changed connection or id prefix): it proves
# that the new place accepts it before the old one is deleted, and starts once it is.
MOVE_NOTE = "Paused by Sundial: moving from another connection"
# A schedule whose connection no longer admits its ScheduledJob (the namespace left a
# ClusterTemporalConnection's namespaceSelector, the TemporalConnection or its Secret was
# deleted, the task queue is no longer allowed): paused through the connection as last
# read, and unpaused once the connection admits the object again.
REVOKED_NOTE = "Paused by Sundial: the connection no longer admits this ScheduledJob"
READMITTED_NOTE = "Resumed by Sundial: the connection admits the ScheduledJob again"


def revoked_note(reason: str) -> str:
    return f"{REVOKED_NOTE} ({reason})"


def is_revoked_note(note: str | None) -> bool:
    return bool(note) and str(note).startswith(REVOKED_NOTE)


def suspend_note(spec: ScheduledJobSpec) -> str:
    """Sundial's pause note, with the person's spec.suspendNote after it; a maintenance
    window's or the failure policy's own (planning/pausing.py's held spec) after HELD_NOTE."""
    if is_held_note(spec.suspend_note):
        return f"{HELD_NOTE}: {spec.suspend_note}"
    return f"{SUSPEND_NOTE}: {spec.suspend_note}" if spec.suspend_note else SUSPEND_NOTE


def is_suspend_note(note: str | None) -> bool:
    """The pause is Sundial's own for spec.suspend (whatever note the person gave), a
    maintenance window or the failure policy."""
    text = str(note or "")
    return text.startswith(SUSPEND_NOTE) or (
        text.startswith(f"{HELD_NOTE}: ") and is_held_note(text[len(HELD_NOTE) + 2 :])
    )


# A run now never ends a run, on either backend: its trigger never cancels or terminates
# one (a run that started since Sundial looked is waited for). The policies whose own
# overlap would skip the run now or end the running one make it wait in Sundial while a
# run is going, as the kubernetes backend does (backends.temporal.requests.handle_requests).
RUN_NOW_WAITS: frozenset[ConcurrencyPolicy] = frozenset({"Forbid", "Replace", "CancelOther"})


def schedule_id(prefix: str, namespace: str, name: str) -> str:
    """`<prefix><namespace>/<name>`: Kubernetes names hold no '/', so the id is unique per
    namespace and name, and the prefix (default "sundial/") tells clusters apart when
    several share one Temporal namespace."""
    return f"{prefix}{namespace}/{name}"


# A container job on temporal (spec.job): the schedule starts Sundial's own workflow on
# Sundial's task queue, whose worker (sundial.worker) makes the Job and waits for it.
RUN_JOB_WORKFLOW = "sundial.RunJob"
# Beyond the Job's own deadline, what a run may spend waiting for a worker and its Pod: the
# workflow's execution timeout is the Job's activeDeadlineSeconds plus this, so neither
# outlives the other (a workflow that times out deletes its Job).
RUN_JOB_START_ALLOWANCE = timedelta(minutes=10)


def worker_task_queue(prefix: str) -> str:
    """Sundial's task queue, per installation as the schedule ids are (`<prefix>jobs`): a
    worker never takes up a run of another cluster sharing the Temporal namespace."""
    return f"{prefix}jobs"


def job_reference(sj: ScheduledJob, job_hash: str) -> dict[str, str]:
    """The run's input: which ScheduledJob (by uid too) and which version of its job, never
    the pod template: the worker reads the job from the object itself."""
    return {
        "namespace": sj.metadata.namespace,
        "name": sj.metadata.name,
        "uid": sj.metadata.uid,
        "jobHash": job_hash,
    }


def run_job_timeout(sj: ScheduledJob) -> timedelta | None:
    """The RunJob workflow's execution timeout: the Job's deadline and the start allowance
    (none without a deadline: the workflow lives as long as its Job)."""
    job = sj.spec.job
    deadline = None if job is None else job.active_deadline_seconds
    if deadline is None and job is not None and job.template is not None:
        deadline = (job.template.get("spec") or {}).get("activeDeadlineSeconds")
    if deadline is None:
        return None
    return timedelta(seconds=int(deadline)) + RUN_JOB_START_ALLOWANCE


def desired_definition(sj: ScheduledJob, prefix: str) -> dict[str, Any]:
    """Everything the Schedule is made of, as plain JSON: what the spec hash covers."""
    spec = sj.spec
    workflow = spec.workflow
    if workflow is None and spec.job is None:
        raise ValueError("backend temporal needs spec.workflow or spec.job")
    identity = schedule_id(prefix, sj.metadata.namespace, sj.metadata.name)
    action: dict[str, Any]
    if workflow is not None:
        action = {"workflow": workflow.model_dump(mode="json", by_alias=True, exclude_none=True)}
    else:
        job_hash = spec_hash(job_template(sj))
        timeout = run_job_timeout(sj)
        action = {"job": {
            "workflowType": RUN_JOB_WORKFLOW, "taskQueue": worker_task_queue(prefix),
            "input": job_reference(sj, job_hash),
            "executionTimeoutSeconds": timeout.total_seconds() if timeout else None,
        }}  # fmt: skip
    return {
        "id": identity,
        "cron": " ".join(spec.schedule.split()) if spec.schedule else None,
        "interval": spec.interval.model_dump(exclude_none=True) if spec.interval else None,
        "timeZone": spec.time_zone,
        "jitter": spec.jitter,
        "startTime": spec.start_time.isoformat() if spec.start_time else None,
        "endTime": spec.end_time.isoformat() if spec.end_time else None,
        "overlap": spec.concurrency_policy,
        "catchupWindowSeconds": (
            spec.starting_deadline_seconds
            if spec.catch_up is None
            else int(catchup_window(spec).total_seconds())
        ),
        "suspend": spec.suspend,
        **action,
    }


def definition_hash(definition: dict[str, Any]) -> str:
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def catchup_window(spec: ScheduledJobSpec) -> timedelta:
    """Temporal's catch-up window for the object: by spec.catchUp (planning/catchup.py),
    else startingDeadlineSeconds, or the server's own default, set explicitly."""
    window = catchup.temporal_window(spec)
    if window is not None:
        return window
    if spec.starting_deadline_seconds is not None:
        return timedelta(seconds=spec.starting_deadline_seconds)
    return DEFAULT_CATCHUP_WINDOW
