"""The watch cache: objects by owner, Jobs as slots, pruning after a full listing."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from sundial.watchcache import WatchCache, job_record

OWNER = ("shop", "invoices")
LABELS = {"sundial.dev/scheduledjob": "invoices", "app.kubernetes.io/managed-by": "sundial"}


def job(name: str, slot: str | None, **status: Any) -> dict[str, Any]:
    annotations = {"batch.kubernetes.io/cronjob-scheduled-timestamp": slot} if slot else {}
    return {
        "metadata": {"name": name, "namespace": "shop", "labels": LABELS,
                     "annotations": annotations, "creationTimestamp": "2026-12-02T10:01:02Z"},
        "status": status,
    }  # fmt: skip


def test_jobs_are_slots_of_their_owner_and_seen_slots_outlive_them() -> None:
    cache = WatchCache()
    assert cache.put_job(job("invoices-1", "2026-12-02T10:01:00Z")) == OWNER
    cache.put_job(job("manual", None))  # kubectl create job --from: not a slot
    (record,) = cache.jobs(OWNER)
    assert record.scheduled_time == datetime(2026, 12, 2, 10, 1, tzinfo=UTC)
    cache.remove_job(job("invoices-1", "2026-12-02T10:01:00Z"))
    assert cache.jobs(OWNER) == []
    assert cache.seen_slots(OWNER) == {datetime(2026, 12, 2, 10, 1, tzinfo=UTC)}


def test_finished_jobs_carry_their_outcome() -> None:
    succeeded = job_record(job("a", "2026-12-02T10:01:00Z", startTime="2026-12-02T10:01:03Z",
                               completionTime="2026-12-02T10:01:09Z",
                               conditions=[{"type": "Complete", "status": "True"}]))  # fmt: skip
    assert succeeded is not None
    assert succeeded.succeeded
    assert succeeded.finished_at == datetime(2026, 12, 2, 10, 1, 9, tzinfo=UTC)
    failed = job_record(
        job(
            "b",
            "2026-12-02T10:01:00Z",
            conditions=[
                {"type": "Failed", "status": "True", "lastTransitionTime": "2026-12-02T10:02:00Z"}
            ],
        )
    )
    assert failed is not None
    assert (failed.failed, failed.finished_at) == (True, datetime(2026, 12, 2, 10, 2, tzinfo=UTC))
    assert job_record(job("c", "not a time")) is None


def test_cronjobs_are_found_by_their_scheduledjob() -> None:
    cache = WatchCache()
    cronjob = {"metadata": {"name": "invoices", "namespace": "shop", "labels": LABELS}}
    assert cache.put_cronjob(cronjob) == OWNER
    assert cache.cronjob(OWNER) is cronjob
    cache.remove_cronjob(cronjob)
    assert cache.cronjob(OWNER) is None


def test_prune_drops_only_what_the_listing_lacks_and_no_event_mentioned_since() -> None:
    cache = WatchCache()
    for name in ("kept", "ghost"):
        cache.put_scheduledjob({"metadata": {"name": name, "namespace": "shop"}})
    started = time.monotonic()
    cache.put_scheduledjob({"metadata": {"name": "new", "namespace": "shop"}})  # after the LIST
    gone = cache.prune("scheduledjobs", {("shop", "kept")}, started)
    assert gone == [("shop", "ghost")]
    assert sorted(cache.scheduledjob_keys()) == [("shop", "kept"), ("shop", "new")]


def test_slots_before_the_written_watermark_are_forgotten() -> None:
    cache = WatchCache()
    for minute in range(1, 6):
        cache.put_job(job(f"invoices-{minute}", f"2026-12-02T10:0{minute}:00Z"))
    cache.forget_slots_before(OWNER, datetime(2026, 12, 2, 10, 4, tzinfo=UTC))
    assert cache.seen_slots(OWNER) == {
        datetime(2026, 12, 2, 10, 4, tzinfo=UTC),
        datetime(2026, 12, 2, 10, 5, tzinfo=UTC),
    }


def test_without_the_annotation_the_slot_comes_from_the_controllers_job_name() -> None:
    """Issue 14.9: clusters whose Jobs lack the scheduled-timestamp annotation."""
    made = job("invoices-29412245", None)
    made["metadata"]["ownerReferences"] = [
        {"kind": "CronJob", "name": "invoices", "controller": True, "uid": "u"}
    ]
    record = job_record(made)
    assert record is not None
    assert record.scheduled_time == datetime.fromtimestamp(29412245 * 60, UTC)
    # `kubectl create job --from=cronjob/invoices invoices-12345`: no controller reference.
    manual = job("invoices-12345", None)
    manual["metadata"]["ownerReferences"] = [{"kind": "CronJob", "name": "invoices", "uid": "u"}]
    assert job_record(manual) is None
