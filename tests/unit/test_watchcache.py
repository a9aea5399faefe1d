"""The watch cache: objects by owner, Jobs as slots, pruning after a full listing."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from sundial.planning.jobs import job_record
from sundial.watchcache import MAX_DEPARTED_PER_OWNER, MAX_TOMBSTONES, WatchCache

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


# ---- ordering by resourceVersion (issue 14.19) -----------------------------------------


def sj(name: str, version: str, uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "uid": uid,
                         "resourceVersion": version}}  # fmt: skip


def test_a_relist_does_not_bring_back_an_object_deleted_during_the_list() -> None:
    cache = WatchCache()
    cache.put_scheduledjob(sj("invoices", "5"))
    started = time.monotonic()  # the re-list's LIST begins, its snapshot still holds rv 5
    cache.remove_scheduledjob(("shop", "invoices"), resource_version="7")  # watch: DELETED
    cache.put_scheduledjob(sj("invoices", "5"))  # the LIST's item arrives after
    cache.prune("scheduledjobs", {("shop", "invoices")}, started)
    assert cache.scheduledjob(("shop", "invoices")) is None
    assert cache.scheduledjob_keys() == []


def test_listed_items_older_than_what_the_watch_applied_are_ignored() -> None:
    cache = WatchCache()
    newer = sj("invoices", "12")
    cache.put_scheduledjob(newer)  # watch
    cache.put_scheduledjob(sj("invoices", "9"))  # a LIST that started earlier
    assert cache.scheduledjob(("shop", "invoices")) is newer


def test_an_object_created_again_after_its_deletion_is_taken() -> None:
    cache = WatchCache()
    cache.put_scheduledjob(sj("invoices", "5"))
    cache.remove_scheduledjob(("shop", "invoices"), resource_version="7")
    again = sj("invoices", "9", uid="u2")
    cache.put_scheduledjob(again)
    assert cache.scheduledjob(("shop", "invoices")) is again


def test_only_an_object_from_a_watch_event_or_a_get_is_confirmed_to_exist() -> None:
    """What a listing brought may be a ghost: a pass confirms it with a GET before it makes
    a backend object. A watch event or that GET confirms it; a later listed copy, a stale
    one ignored aside, takes the confirmation back; a deletion forgets it."""
    cache, key = WatchCache(), ("shop", "invoices")
    cache.put_scheduledjob(sj("invoices", "5"))  # listed
    assert not cache.scheduledjob_confirmed(key)
    cache.put_scheduledjob(sj("invoices", "6"), confirmed=True)  # watch event
    assert cache.scheduledjob_confirmed(key)
    cache.put_scheduledjob(sj("invoices", "5"))  # an older listing: ignored
    assert cache.scheduledjob_confirmed(key)
    cache.put_scheduledjob(sj("invoices", "8"))  # a re-list's newer copy
    assert not cache.scheduledjob_confirmed(key)
    cache.put_scheduledjob(sj("invoices", "9"), confirmed=True)
    cache.remove_scheduledjob(key, resource_version="10")
    assert not cache.scheduledjob_confirmed(key)
    cache.put_scheduledjob(sj("invoices", "11"), confirmed=True)
    cache.prune("scheduledjobs", set(), time.monotonic())  # a listing without it
    assert not cache.scheduledjob_confirmed(key)


def test_tombstones_go_after_a_relist_that_started_after_the_deletion() -> None:
    cache = WatchCache()
    cache.remove_scheduledjob(("shop", "invoices"), resource_version="7")
    started = time.monotonic()
    cache.prune("scheduledjobs", set(), started)
    assert cache.tombstone_count() == 0


def test_tombstones_are_bounded() -> None:
    cache = WatchCache()
    for i in range(MAX_TOMBSTONES + 50):
        cache.remove_scheduledjob(("shop", f"sj-{i}"), resource_version=str(i + 1))
    assert cache.tombstone_count() == MAX_TOMBSTONES
    # the newest deletions are the ones kept
    cache.put_scheduledjob(sj(f"sj-{MAX_TOMBSTONES + 49}", "3"))
    assert cache.scheduledjob(("shop", f"sj-{MAX_TOMBSTONES + 49}")) is None


def test_deleted_cronjobs_and_jobs_are_not_brought_back_by_an_older_listing() -> None:
    cache = WatchCache()
    cronjob = {"metadata": {"name": "invoices", "namespace": "shop", "labels": LABELS,
                            "resourceVersion": "20"}}  # fmt: skip
    cache.put_cronjob(cronjob)
    cache.remove_cronjob({**cronjob, "metadata": {**cronjob["metadata"], "resourceVersion": "21"}})
    cache.put_cronjob(cronjob)
    assert cache.cronjob(OWNER) is None

    made = job("invoices-1", "2026-12-02T10:01:00Z")
    made["metadata"]["resourceVersion"] = "30"
    cache.put_job(made)
    cache.remove_job({**made, "metadata": {**made["metadata"], "resourceVersion": "31"}})
    cache.put_job(made)
    assert cache.jobs(OWNER) == []


def test_only_news_from_outside_counts_as_a_change() -> None:
    """Sundial's own status write comes back as a watch event: it is not urgent; a spec
    edit, a request annotation or a deletion is."""
    from sundial.planning.news import changed_by_someone

    before = {"metadata": {"generation": 1, "resourceVersion": "5"}, "status": {"x": 1}}
    status_written = {"metadata": {"generation": 1, "resourceVersion": "6"}, "status": {"x": 2}}
    edited = {"metadata": {"generation": 2, "resourceVersion": "7"}}
    requested = {"metadata": {"generation": 1, "annotations": {"sundial.dev/run-now": "a"}}}
    assert changed_by_someone(None, before)
    assert not changed_by_someone(before, status_written)
    assert changed_by_someone(before, edited)
    assert changed_by_someone(before, requested)


def test_a_finalizer_taken_away_is_news_and_one_added_is_not() -> None:
    """Issue 25.2: someone removing Sundial's finalizer wakes a pass at once, which puts
    it back; the finalizer Sundial added, coming back, is no news."""
    from sundial.planning.news import changed_by_someone

    held = {"metadata": {"generation": 1, "finalizers": ["sundial.dev/temporal-schedule"]}}
    bare = {"metadata": {"generation": 1, "finalizers": []}}
    assert changed_by_someone(held, bare)
    assert changed_by_someone(held, {"metadata": {"generation": 1}})
    assert not changed_by_someone(bare, held)


def test_objects_are_cached_without_managed_fields_or_kubectls_last_applied_copy() -> None:
    """Neither is read by any pass, and together they are often most of an object."""
    applied = '{"apiVersion":"sundial.dev/v1alpha1","kind":"ScheduledJob","spec":{}}'
    sj = {
        "metadata": {
            "name": "invoices", "namespace": "shop", "resourceVersion": "3",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied,
                            "sundial.dev/run-now": "a"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"schedule": "@daily"},
        "status": {"observedGeneration": 1},
    }  # fmt: skip
    cronjob = {"metadata": {"name": "invoices", "namespace": "shop", "labels": LABELS,
                            "managedFields": [{"manager": "sundial"}]}, "spec": {}}  # fmt: skip
    cache = WatchCache()
    cache.put_scheduledjob(sj)
    cache.put_cronjob(cronjob)

    cached = cache.scheduledjob(OWNER)
    assert cached is not None
    assert "managedFields" not in cached["metadata"]
    assert cached["metadata"]["annotations"] == {"sundial.dev/run-now": "a"}
    assert cached["spec"] == sj["spec"]
    assert cached["status"] == sj["status"]
    assert "managedFields" not in (cache.cronjob(OWNER) or {})["metadata"]
    # The objects given are not changed (kopf and the caller still hold them).
    assert "managedFields" in sj["metadata"]
    assert "managedFields" in cronjob["metadata"]
    assert len(sj["metadata"]["annotations"]) == 2


def test_a_status_write_coming_back_is_no_news_even_with_kubectls_annotation() -> None:
    """The cached copy lacks the last-applied annotation; the event compared with it must
    be compared as cached, or every status write would look like an annotation edit."""
    from sundial.planning.news import changed_by_someone, without_bookkeeping

    annotations = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    event = {"metadata": {"name": "invoices", "namespace": "shop", "generation": 1,
                          "annotations": annotations, "resourceVersion": "9"}}  # fmt: skip
    cache = WatchCache()
    cache.put_scheduledjob(event)
    previous = cache.scheduledjob(OWNER)
    newer = {**event, "metadata": {**event["metadata"], "resourceVersion": "10"}}
    cache.put_scheduledjob(newer)
    assert not changed_by_someone(previous, cache.scheduledjob(OWNER))
    assert not changed_by_someone(previous, without_bookkeeping(newer))
    assert changed_by_someone(None, cache.scheduledjob(OWNER))


def test_nothing_is_kept_for_jobs_deleted_after_their_scheduledjob() -> None:
    """Issue 25.13: the Jobs of a deleted ScheduledJob go after it (the garbage collector),
    and each deletion kept a record for the owner no pass would ever read again."""
    cache = WatchCache()
    scheduledjob = {"metadata": {"name": "invoices", "namespace": "shop", "uid": "u1",
                                 "resourceVersion": "5"}}  # fmt: skip
    cache.put_scheduledjob(scheduledjob)
    jobs = [job(f"invoices-{n}", f"2026-12-02T10:0{n}:00Z") for n in range(3)]
    for each in jobs:
        cache.put_job(each)
    cache.remove_scheduledjob(OWNER, "6")
    for each in jobs:
        cache.remove_job(each)
    assert cache.departed_jobs(OWNER) == []
    assert cache.owners_remembered() == 0
    # Memories a relist finds without an owner (the owner went while nobody watched) go too.
    cache.put_job(job("orphan-1", "2026-12-02T10:05:00Z"))
    cache.sweep_departed_owners()
    assert cache.owners_remembered() == 0


def test_deleted_jobs_beyond_what_is_kept_are_counted_as_unseen_runs() -> None:
    """Issue 25.11: 16 deleted Jobs are kept per object until the status lists their
    runs; one more let the oldest go silently. Now each let go is an unseen run, kept
    until a status written says so."""
    cache = WatchCache()
    cache.put_scheduledjob({"metadata": {"name": "invoices", "namespace": "shop", "uid": "u1",
                                         "resourceVersion": "5"}})  # fmt: skip
    jobs = [job(f"invoices-{n}", f"2026-12-02T10:{n:02}:00Z") for n in range(20)]
    for each in jobs:
        cache.put_job(each)
    for each in jobs:
        cache.remove_job(each)
    assert len(cache.departed_jobs(OWNER)) == MAX_DEPARTED_PER_OWNER
    assert cache.unseen_runs(OWNER) == 20 - MAX_DEPARTED_PER_OWNER
    kept = {record.name for record in cache.departed_jobs(OWNER)}
    cache.forget_departed(OWNER, kept, unseen=3)
    assert cache.unseen_runs(OWNER) == 1
    cache.forget_departed(OWNER, set(), unseen=1)
    assert (cache.unseen_runs(OWNER), cache.departed_jobs(OWNER)) == (0, [])


def test_a_scheduledjob_let_go_to_another_shard_takes_its_cronjob_and_jobs_along() -> None:
    """Sharded mode: the replica that let the shard go keeps nothing of the object's (the
    CronJob's copy, the Jobs' records, their slots), and leaves no tombstone: it was not
    deleted, and a listing after the shard comes back brings it all in again."""
    cache = WatchCache()
    cache.put_scheduledjob({"metadata": {"name": "invoices", "namespace": "shop",
                                         "resourceVersion": "5"}})  # fmt: skip
    cronjob = {"metadata": {"name": "invoices", "namespace": "shop", "labels": LABELS,
                            "resourceVersion": "6"}}  # fmt: skip
    cache.put_cronjob(cronjob)
    cache.put_job(
        job("invoices-1", "2026-12-02T10:01:00Z")
        | {
            "metadata": {
                **job("invoices-1", "2026-12-02T10:01:00Z")["metadata"],
                "resourceVersion": "7",
            }
        }
    )
    assert cache.cached() == {"scheduledjobs": 1, "cronjobs": 1, "jobs": 1}
    cache.let_go_scheduledjob(OWNER)
    assert cache.cached() == {"scheduledjobs": 0, "cronjobs": 0, "jobs": 0}
    assert (cache.cronjob(OWNER), cache.jobs(OWNER), cache.seen_slots(OWNER)) == (None, [], set())
    cache.put_cronjob(cronjob)  # taken back: the same version is no stale news
    assert cache.cronjob(OWNER) is not None


def test_every_owner_held_is_known_whether_by_its_scheduledjob_cronjob_or_jobs() -> None:
    cache = WatchCache()
    other = {**LABELS, "sundial.dev/scheduledjob": "orphan"}
    cache.put_cronjob({"metadata": {"name": "orphan", "namespace": "shop", "labels": other}})
    cache.put_job(job("invoices-1", "2026-12-02T10:01:00Z"))
    assert cache.owners_held() == {OWNER, ("shop", "orphan")}
    cache.let_go_scheduledjob(("shop", "orphan"))
    assert cache.owners_held() == {OWNER}
