"""In-memory copies of the watched objects: what a reconcile pass reads instead of the API.

kopf's own indexes would do this, but kopf holds the operator back until every object of
an indexed resource has been indexed, through a set of per-object toggles it re-checks on
every new object: with thousands of objects start-up grows quadratically (5000
ScheduledJobs took over ten minutes on two cores). So the cache is filled here: one
paginated LIST per resource at start-up, before any reconcile runs, then kopf's watch events.
A periodic re-list drops what a watch can miss, an object deleted between the start-up LIST
and the watch's own listing, as client-go's informers do.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sundial.backend import Key
from sundial.cronjob import SCHEDULED_TIMESTAMP_ANNOTATION, SCHEDULEDJOB_LABEL, slot_from_job_name
from sundial.missed import JobRecord
from sundial.status import parse_time

# Slots seen are kept this long: enough to outlive any Job history, bounded in memory.
SEEN_SLOTS_KEPT = timedelta(days=2)


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
    )


def _slot_from_controller_name(meta: dict[str, Any]) -> datetime | None:
    """Without the annotation (clusters before 1.28, or the gate off), the slot is in the
    name the CronJob controller gave the Job; only the controller's own Jobs (controller
    owner reference) are slots, not `kubectl create job --from` ones."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "CronJob" and ref.get("controller"):
            return slot_from_job_name(ref.get("name", ""), meta.get("name", ""))
    return None


def owner_key(obj: dict[str, Any]) -> Key | None:
    """The ScheduledJob a CronJob or Job belongs to, by Sundial's label."""
    meta = obj.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(SCHEDULEDJOB_LABEL)
    return (meta.get("namespace", ""), owner) if owner else None


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


@dataclass
class _Entries:
    """One resource's objects by key, and when each was last heard of (monotonic)."""

    objects: dict[Any, dict[str, Any]] = field(default_factory=dict)
    heard: dict[Any, float] = field(default_factory=dict)

    def put(self, key: Any, obj: dict[str, Any]) -> None:
        self.objects[key] = obj
        self.heard[key] = time.monotonic()

    def remove(self, key: Any) -> None:
        self.objects.pop(key, None)
        self.heard.pop(key, None)

    def prune(self, listed: set[Any], list_started: float) -> list[Any]:
        """Drop what a full listing lacks and no event has mentioned since it began."""
        gone = [k for k in self.objects if k not in listed and self.heard[k] < list_started]
        for key in gone:
            self.remove(key)
        return gone


class WatchCache:
    """Implements reconcile's Cache: ScheduledJobs, their CronJobs and Jobs by owner key."""

    def __init__(self) -> None:
        self._scheduledjobs = _Entries()
        self._cronjobs = _Entries()
        self._jobs = _Entries()  # keyed by (namespace, job name)
        self._jobs_by_owner: dict[Key, set[Key]] = defaultdict(set)
        self._seen: dict[Key, set[datetime]] = defaultdict(set)
        self.watching_since = datetime.now(UTC)

    # ---- fed by list and watch -------------------------------------------------------

    def put_scheduledjob(self, obj: dict[str, Any]) -> Key:
        key = object_key(obj)
        self._scheduledjobs.put(key, obj)
        return key

    def remove_scheduledjob(self, key: Key) -> None:
        self._scheduledjobs.remove(key)
        self._seen.pop(key, None)

    def put_cronjob(self, obj: dict[str, Any]) -> Key | None:
        owner = owner_key(obj)
        if owner is not None:
            self._cronjobs.put(owner, obj)
        return owner

    def remove_cronjob(self, obj: dict[str, Any]) -> Key | None:
        owner = owner_key(obj)
        if owner is not None:
            self._cronjobs.remove(owner)
        return owner

    def put_job(self, obj: dict[str, Any]) -> Key | None:
        owner = owner_key(obj)
        record = job_record(obj)
        if owner is None or record is None:
            return owner
        job = object_key(obj)
        self._jobs.put(job, {"owner": owner, "record": record})
        self._jobs_by_owner[owner].add(job)
        self._remember_slot(owner, record.scheduled_time)
        return owner

    def remove_job(self, obj: dict[str, Any]) -> Key | None:
        job = object_key(obj)
        entry = self._jobs.objects.get(job)
        self._jobs.remove(job)
        if entry is not None:
            self._jobs_by_owner[entry["owner"]].discard(job)
        return owner_key(obj)

    def prune(self, kind: str, listed: set[Key], list_started: float) -> list[Key]:
        entries = {"scheduledjobs": self._scheduledjobs, "cronjobs": self._cronjobs,
                   "jobs": self._jobs}[kind]  # fmt: skip
        if kind == "jobs":
            for job in [k for k in entries.objects if k not in listed]:
                if entries.heard[job] < list_started:
                    self._jobs_by_owner[entries.objects[job]["owner"]].discard(job)
        return entries.prune(listed, list_started)

    def _remember_slot(self, owner: Key, slot: datetime) -> None:
        slots = self._seen[owner]
        slots.add(slot)
        if len(slots) > 64:
            horizon = datetime.now(UTC) - SEEN_SLOTS_KEPT
            slots.difference_update({s for s in slots if s < horizon})

    def forget_slots_before(self, key: Key, watermark: datetime) -> None:
        """Slots before a watermark written to status are never judged again: what is
        remembered per object is only what the watermark does not already say."""
        slots = self._seen.get(key)
        if slots:
            slots.difference_update([slot for slot in slots if slot < watermark])

    # ---- read by reconcile -----------------------------------------------------------

    def scheduledjob(self, key: Key) -> dict[str, Any] | None:
        return self._scheduledjobs.objects.get(key)

    def cronjob(self, key: Key) -> dict[str, Any] | None:
        return self._cronjobs.objects.get(key)

    def jobs(self, key: Key) -> list[JobRecord]:
        return [self._jobs.objects[job]["record"] for job in self._jobs_by_owner.get(key, ())]

    def job_names(self, key: Key) -> list[str]:
        return sorted(name for _, name in self._jobs_by_owner.get(key, ()))

    def seen_slots(self, key: Key) -> frozenset[datetime]:
        """Slots whose Job this operator saw created, even if the Job is gone now."""
        return frozenset(self._seen.get(key, ()))

    def scheduledjob_keys(self) -> list[Key]:
        return list(self._scheduledjobs.objects)
