"""A Job as Sundial reads it: the slot it was made for and how it went. Pure."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sundial.planning.cronjob import (
    REQUEST_ANNOTATION,
    SCHEDULED_TIMESTAMP_ANNOTATION,
    slot_from_job_name,
)
from sundial.planning.missed import JobRecord
from sundial.planning.schedule import parse_time


def job_record(job: dict[str, Any]) -> JobRecord | None:
    """The slot a Job was made for, and how it went; None for a Job that is no slot's
    (made by `kubectl create job --from`, or an annotation mangled by hand)."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    try:
        scheduled = parse_time((meta.get("annotations") or {}).get(SCHEDULED_TIMESTAMP_ANNOTATION))
    except ValueError:
        return None
    if scheduled is None:
        scheduled = _slot_from_controller_name(meta)
    created = parse_time(meta.get("creationTimestamp"))
    if scheduled is None or created is None:
        return None
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    failed = conditions.get("Failed", {}).get("status") == "True"
    succeeded = conditions.get("Complete", {}).get("status") == "True"
    finished_at = parse_time(status.get("completionTime")) or (
        parse_time(conditions["Failed"].get("lastTransitionTime")) if failed else None
    )
    return JobRecord(
        scheduled_time=scheduled,
        created=created,
        start_time=parse_time(status.get("startTime")),
        finished_at=finished_at,
        succeeded=succeeded,
        failed=failed,
        name=meta.get("name", ""),
        requested=(meta.get("annotations") or {}).get(REQUEST_ANNOTATION),
        reason=conditions["Failed"].get("reason") if failed else None,
        message=conditions["Failed"].get("message") if failed else None,
        pods_ended=int(status.get("succeeded") or 0) + int(status.get("failed") or 0),
    )


def _slot_from_controller_name(meta: dict[str, Any]) -> datetime | None:
    """Without the annotation (clusters before 1.28, or the gate off), the slot is in the
    name the CronJob controller gave the Job; only the controller's own Jobs (controller
    owner reference) are slots, not `kubectl create job --from` ones."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "CronJob" and ref.get("controller"):
            return slot_from_job_name(ref.get("name", ""), meta.get("name", ""))
    return None
