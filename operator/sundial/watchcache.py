"""In-memory copies of the watched objects: what a reconcile pass reads instead of the API.

kopf's own indexes would do this, but kopf holds the operator back until every object of
an indexed resource has been indexed, through a set of per-object toggles it re-checks on
every new object: with thousands of objects start-up grows quadratically (5000
ScheduledJobs took over ten minutes on two cores). So the cache is filled here: one
paginated LIST per resource at start-up, before any reconcile runs, then kopf's watch events.
A periodic re-list drops what a watch can miss, an object deleted between the start-up LIST
and the watch's own listing, as client-go's informers do.

Updates are ordered by resourceVersion: a listed item older than what a watch event already
put is ignored, and a deleted object leaves a tombstone (its resourceVersion) until a
re-list that began after the deletion, so a LIST served from before a deletion cannot bring
the object back.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sundial.backends.protocol import Key
from sundial.planning.cronjob import (
    JOB_NAME_LABEL,
    SCHEDULEDJOB_LABEL,
)
from sundial.planning.jobs import job_record
from sundial.planning.missed import JobRecord
from sundial.planning.news import without_bookkeeping
from sundial.planning.summaries import PodsEnded, pod_ended, pods_ended

# Slots seen are kept this long: enough to outlive any Job history, bounded in memory.
SEEN_SLOTS_KEPT = timedelta(days=2)
# Deletions remembered per resource until a re-list that began after them; beyond this many
# (a mass deletion within one re-list period) the oldest go, and the cache is as before.
MAX_TOMBSTONES = 10_000
# Deleted Jobs kept per owner until the status lists their runs (bounded either way).
MAX_DEPARTED_PER_OWNER = 16
CACHED = ("scheduledjobs", "cronjobs", "jobs")


def owner_key(obj: dict[str, Any]) -> Key | None:
    """The ScheduledJob a CronJob or Job belongs to, by Sundial's label."""
    meta = obj.get("metadata") or {}
    owner = (meta.get("labels") or {}).get(SCHEDULEDJOB_LABEL)
    return (meta.get("namespace", ""), owner) if owner else None


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def resource_version(obj: dict[str, Any]) -> int | None:
    """The object's resourceVersion as a number, None when absent or not one. Kubernetes
    calls it opaque, but etcd-backed servers give one increasing revision per write, and
    ordering by it is what keeps an older listing from undoing a newer watch event."""
    version = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(version) if version is not None else None
    except (TypeError, ValueError):
        return None


@dataclass
class _Entries:
    """One resource's objects by key, the resourceVersion each was put with, when each was
    last heard of (monotonic), and the recently deleted ones (tombstones: resourceVersion
    of the deletion, monotonic time) so that a listing older than a deletion cannot bring
    the object back."""

    objects: dict[Any, dict[str, Any]] = field(default_factory=dict)
    heard: dict[Any, float] = field(default_factory=dict)
    versions: dict[Any, int] = field(default_factory=dict)
    tombstones: dict[Any, tuple[int, float]] = field(default_factory=dict)
    # Keys whose object as held came from a watch event or a GET, not from a listing: one
    # a listing brought may be a ghost (a LIST served from before a deletion).
    confirmed: set[Any] = field(default_factory=set)

    def forget(self, key: Any) -> None:
        """Dropped as if never held: no tombstone (sharded mode lets objects go)."""
        self.objects.pop(key, None)
        self.heard.pop(key, None)
        self.confirmed.discard(key)
        self.versions.pop(key, None)

    def is_stale(self, key: Any, version: int | None) -> bool:
        """An update older than what is held, or than the object's deletion."""
        if version is None:
            return False
        held = self.versions.get(key)
        if held is not None and version < held:
            return True
        tombstone = self.tombstones.get(key)
        return tombstone is not None and version <= tombstone[0]

    def version(self, key: Any) -> int | None:
        """The resourceVersion of what is known of the key: the object, or its deletion."""
        held = self.versions.get(key)
        if held is not None:
            return held
        tombstone = self.tombstones.get(key)
        return tombstone[0] if tombstone is not None else None

    def put(
        self, key: Any, obj: dict[str, Any], version: int | None, *, confirmed: bool = False
    ) -> None:
        self.objects[key] = obj
        self.heard[key] = time.monotonic()
        if confirmed:
            self.confirmed.add(key)
        else:
            self.confirmed.discard(key)
        self.tombstones.pop(key, None)
        if version is None:
            self.versions.pop(key, None)
        else:
            self.versions[key] = version

    def remove(self, key: Any, version: int | None = None) -> None:
        self.objects.pop(key, None)
        self.heard.pop(key, None)
        self.confirmed.discard(key)
        held = self.versions.pop(key, None)
        if version is None:
            version = held
        if version is not None:
            self.tombstones.pop(key, None)  # re-inserted: the newest deletions are last
            self.tombstones[key] = (version, time.monotonic())
            while len(self.tombstones) > MAX_TOMBSTONES:
                del self.tombstones[next(iter(self.tombstones))]

    def prune(
        self, listed: set[Any], list_started: float, spared: frozenset[str] = frozenset()
    ) -> list[Any]:
        """Drop what a full listing lacks and no event has mentioned since it began; and
        the tombstones of deletions before it began, which that listing already reflects.
        Keys in a `spared` namespace (one the listing could not read) are left alone."""
        gone = [k for k in self.objects if k not in listed and self.heard[k] < list_started
                and k[0] not in spared]  # fmt: skip
        for key in gone:
            self.remove(key)
        for key in [k for k, (_, at) in self.tombstones.items()
                    if at < list_started and k[0] not in spared]:  # fmt: skip
            del self.tombstones[key]
        return gone


class WatchCache:
    """Implements reconcile's Cache: ScheduledJobs, their CronJobs and Jobs by owner key."""

    def __init__(self) -> None:
        self._scheduledjobs = _Entries()
        self._cronjobs = _Entries()
        self._jobs = _Entries()  # keyed by (namespace, job name)
        self._jobs_by_owner: dict[Key, set[Key]] = defaultdict(set)
        self._seen: dict[Key, set[datetime]] = defaultdict(set)
        self._departed: dict[Key, dict[str, JobRecord]] = defaultdict(dict)
        # Deleted Jobs let go beyond MAX_DEPARTED_PER_OWNER before a status listed their
        # runs: runs never seen, stated in status (unseenRuns), never silently dropped.
        self._unseen: dict[Key, int] = {}
        # When each ended Pod of a Job ran and what it said, by Job (namespace, name) and
        # Pod name: the run's times and summary, without listing its Pods (podwatch.py).
        self._pod_spans: dict[Key, dict[str, PodsEnded]] = {}
        self.watching_since = datetime.now(UTC)

    # ---- fed by list and watch -------------------------------------------------------

    # Every put is ordered by resourceVersion: one older than what is held (a listing that
    # began before a watch event) or than a deletion (an object deleted during the LIST)
    # is ignored.

    def put_scheduledjob(self, obj: dict[str, Any], *, confirmed: bool = False) -> Key:
        """`confirmed`: the object comes from a watch event or a GET, so it existed at its
        resourceVersion; one from a listing (the default) may be a ghost."""
        key = object_key(obj)
        version = resource_version(obj)
        if not self._scheduledjobs.is_stale(key, version):
            self._scheduledjobs.put(key, without_bookkeeping(obj), version, confirmed=confirmed)
        return key

    def scheduledjob_confirmed(self, key: Key) -> bool:
        """Whether the ScheduledJob held came from a watch event or a GET, not a listing."""
        return key in self._scheduledjobs.confirmed

    def remove_scheduledjob(self, key: Key, resource_version: str | None = None) -> None:
        """`resource_version`: the deleted object's last one (the DELETED event's)."""
        self._scheduledjobs.remove(key, _number(resource_version))
        self._seen.pop(key, None)
        self._departed.pop(key, None)
        self._unseen.pop(key, None)

    def let_go_scheduledjob(self, key: Key) -> None:
        """Sharded mode: another replica serves it now. Dropped with its CronJob and Jobs,
        with no tombstone: it was not deleted, and a listing after this replica takes the
        shard back brings it all in."""
        self._scheduledjobs.forget(key)
        self._cronjobs.forget(key)
        for job in self._jobs_by_owner.pop(key, set()):
            self._jobs.forget(job)
            self._pod_spans.pop(job, None)
        self._seen.pop(key, None)
        self._departed.pop(key, None)
        self._unseen.pop(key, None)

    def put_cronjob(self, obj: dict[str, Any]) -> Key | None:
        owner = owner_key(obj)
        version = resource_version(obj)
        if owner is not None and not self._cronjobs.is_stale(owner, version):
            self._cronjobs.put(owner, without_bookkeeping(obj), version)
        return owner

    def remove_cronjob(self, obj: dict[str, Any]) -> Key | None:
        owner = owner_key(obj)
        if owner is not None:
            self._cronjobs.remove(owner, resource_version(obj))
        return owner

    def put_job(self, obj: dict[str, Any]) -> Key | None:
        owner = owner_key(obj)
        record = job_record(obj)
        if owner is None or record is None:
            return owner
        job = object_key(obj)
        version = resource_version(obj)
        if self._jobs.is_stale(job, version):
            return owner
        self._jobs.put(job, {"owner": owner, "record": record}, version)
        self._jobs_by_owner[owner].add(job)
        if record.requested is None:  # a requested run is no slot's evidence
            self._remember_slot(owner, record.scheduled_time)
        return owner

    def remove_job(self, obj: dict[str, Any]) -> Key | None:
        job = object_key(obj)
        entry = self._jobs.objects.get(job)
        self._jobs.remove(job, resource_version(obj))
        self._pod_spans.pop(job, None)
        if entry is not None:
            owner = entry["owner"]
            jobs = self._jobs_by_owner.get(owner)
            if jobs is not None:
                jobs.discard(job)
                if not jobs:
                    del self._jobs_by_owner[owner]
            if owner not in self._scheduledjobs.objects:
                # Its owner is gone (the garbage collector deletes the Jobs after it): no
                # pass will read a record of it, which would stay for ever.
                return owner_key(obj)
            # Its last state stays until the status lists the run (ttlSecondsAfterFinished
            # 0 deletes a Job as it ends, before a pass may have seen the end).
            record = job_record(obj) or entry["record"]
            departed = self._departed[owner]
            departed[job[1]] = replace(record, deleted=True)
            while len(departed) > MAX_DEPARTED_PER_OWNER:
                del departed[next(iter(departed))]
                self._unseen[owner] = self._unseen.get(owner, 0) + 1
        return owner_key(obj)

    def put_pod(self, obj: dict[str, Any]) -> None:
        """An ended Pod of a Sundial Job: when it ran (its start, its last container's end)
        and the summary it left in its termination message."""
        meta = obj.get("metadata") or {}
        job_name = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
        span = pod_ended(obj)
        if job_name and span is not None:
            self._pod_spans.setdefault((meta.get("namespace", ""), job_name), {})[
                meta.get("name", "")
            ] = span

    def remove_pod(self, obj: dict[str, Any]) -> None:
        """A deleted Pod's times stay while its Job is cached (a TTL of 0 takes the Pods
        as the Job ends, maybe before a pass saw the end); they go with the Job."""
        meta = obj.get("metadata") or {}
        job = (meta.get("namespace", ""), (meta.get("labels") or {}).get(JOB_NAME_LABEL, ""))
        if job in self._jobs.objects:
            return
        spans = self._pod_spans.get(job)
        if spans is not None:
            spans.pop(meta.get("name", ""), None)
            if not spans:
                del self._pod_spans[job]

    def pods_ended(self, namespace: str, job_name: str) -> PodsEnded | None:
        """When the Job's Pods ran and what the last said, if the Pods seen ended are all
        that ended (its succeeded and failed counts); None otherwise: then they are listed."""
        spans = self._pod_spans.get((namespace, job_name))
        entry = self._jobs.objects.get((namespace, job_name))
        if not spans or entry is None or len(spans) < entry["record"].pods_ended:
            return None
        return pods_ended(list(spans.values()))

    def pod_span(self, namespace: str, job_name: str) -> tuple[datetime, datetime] | None:
        """When the Job's Pods ran (pods_ended's times)."""
        ended = self.pods_ended(namespace, job_name)
        return (ended.start, ended.end) if ended is not None else None

    def prune_pods(self, listed: set[tuple[str, str]], namespace: str | None = None) -> None:
        """After a fresh listing of the ended Pods ((namespace, Pod name) pairs) of one
        namespace (None: all): drop the times of Pods it lacks whose Job is not cached (a
        deletion the watch missed)."""
        for job in [j for j in self._pod_spans if j not in self._jobs.objects
                    and namespace in (None, j[0])]:  # fmt: skip
            spans = self._pod_spans[job]
            for pod in [p for p in spans if (job[0], p) not in listed]:
                del spans[pod]
            if not spans:
                del self._pod_spans[job]

    def pod_count(self) -> int:
        return sum(len(spans) for spans in self._pod_spans.values())

    def prune(
        self, kind: str, listed: set[Key], list_started: float,
        spared: frozenset[str] = frozenset(),
    ) -> list[Key]:  # fmt: skip
        """After a full listing of a kind: what it lacks is gone, but in the `spared`
        namespaces, which it could not read (relist.relist)."""
        entries = {"scheduledjobs": self._scheduledjobs, "cronjobs": self._cronjobs,
                   "jobs": self._jobs}[kind]  # fmt: skip
        if kind == "jobs":
            for job in [k for k in entries.objects if k not in listed and k[0] not in spared]:
                if entries.heard[job] < list_started:
                    self._jobs_by_owner[entries.objects[job]["owner"]].discard(job)
                    self._pod_spans.pop(job, None)
        return entries.prune(listed, list_started, spared)

    def sweep_departed_owners(self) -> None:
        """After a full listing: what is remembered for owners that are not (or no longer)
        ScheduledJobs goes, however it came (an owner deleted while nobody watched, a Job
        event after its owner's deletion). Jobs themselves stay while they exist."""
        for memory in (self._seen, self._departed):
            for owner in [o for o in memory if o not in self._scheduledjobs.objects]:
                del memory[owner]
        for owner in [o for o in self._unseen if o not in self._scheduledjobs.objects]:
            del self._unseen[owner]

    def owners_remembered(self) -> int:
        """Owners with memories beyond their live objects (seen slots, departed Jobs)."""
        return len(self._seen.keys() | self._departed.keys() | self._unseen.keys())

    def _remember_slot(self, owner: Key, slot: datetime) -> None:
        slots = self._seen[owner]
        slots.add(slot)
        if len(slots) > 64:
            horizon = datetime.now(UTC) - SEEN_SLOTS_KEPT
            slots.difference_update({s for s in slots if s < horizon})

    def departed_jobs(self, key: Key) -> list[JobRecord]:
        """Jobs seen deleted whose run the status may not list yet, as last seen."""
        return list(self._departed.get(key, {}).values())

    def unseen_runs(self, key: Key) -> int:
        """Deleted Jobs let go before a status listed their runs (more than
        MAX_DEPARTED_PER_OWNER deleted between two passes)."""
        return self._unseen.get(key, 0)

    def forget_departed(self, key: Key, names: set[str], unseen: int = 0) -> None:
        """These Jobs' runs, and `unseen` runs let go unseen, are in the status the server
        holds: their records can go."""
        left = self._unseen.get(key, 0) - unseen
        if left > 0:
            self._unseen[key] = left
        else:
            self._unseen.pop(key, None)
        departed = self._departed.get(key)
        if departed:
            for name in names & departed.keys():
                del departed[name]
            if not departed:
                del self._departed[key]

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

    def scheduledjob_version(self, key: Key) -> int | None:
        return self._scheduledjobs.version(key)

    def cronjob_version(self, key: Key) -> int | None:
        return self._cronjobs.version(key)

    def jobs(self, key: Key) -> list[JobRecord]:
        return [self._jobs.objects[job]["record"] for job in self._jobs_by_owner.get(key, ())]

    def job_names(self, key: Key) -> list[str]:
        return sorted(name for _, name in self._jobs_by_owner.get(key, ()))

    def seen_slots(self, key: Key) -> frozenset[datetime]:
        """Slots whose Job this operator saw created, even if the Job is gone now."""
        return frozenset(self._seen.get(key, ()))

    def scheduledjob_keys(self) -> list[Key]:
        return list(self._scheduledjobs.objects)

    def owners_held(self) -> set[Key]:
        """Every ScheduledJob key the cache holds anything of: itself, its CronJob, Jobs."""
        return {*self._scheduledjobs.objects, *self._cronjobs.objects, *self._jobs_by_owner}

    def cached(self) -> dict[str, int]:
        """Objects held, by resource (sundial_cached_objects)."""
        held = (self._scheduledjobs, self._cronjobs, self._jobs)
        return {kind: len(entries.objects) for kind, entries in zip(CACHED, held, strict=True)}

    def tombstone_count(self) -> int:
        return sum(len(e.tombstones) for e in (self._scheduledjobs, self._cronjobs, self._jobs))


def _number(version: str | None) -> int | None:
    return resource_version({"metadata": {"resourceVersion": version}})
