"""What the kubernetes judge (missed.judge_kubernetes) is given: the schedule the CronJob in
place runs, the watermark to judge from, the evidence of the watch cache and the live
CronJob, and what a look beyond the cache found (the owner's Jobs listed afresh, the CronJob
controller's Events) merged into it. Pure; `now` is passed in. The kubernetes backend reads
the cache and the API and judges with these; tests/unit judge with them directly."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from sundial.api.models import RunAccounting, ScheduledJob, ScheduledJobSpec
from sundial.planning import cronjob as cj
from sundial.planning.jobs import job_record
from sundial.planning.missed import (
    JobRecord,
    KubernetesEvidence,
    start_accounting,
    timetable_hash,
)
from sundial.planning.schedule import ScheduleError, Timetable, parse_time, timetable


def running(sj: ScheduledJob, live: dict[str, Any] | None) -> tuple[ScheduledJob, Timetable] | None:
    """The object as the CronJob in place runs it (its schedule part from the CronJob's
    spec, which a spec not yet applied does not change), and that schedule's timetable.
    None when there is nothing to judge: no CronJob, one being deleted (inert), one that
    is not this object's, or one whose schedule Sundial did not write."""
    if live is None or live["metadata"].get("deletionTimestamp"):
        return None
    if not cj.is_owned_by(live, sj):
        return None  # not Sundial's: its runs are not this object's to judge
    as_running = sj.model_copy(update={"spec": running_spec(sj.spec, live["spec"])})
    try:
        return as_running, timetable(as_running.spec)
    except ScheduleError:
        return None  # not a schedule Sundial wrote: nothing sound to judge by


def running_spec(spec: ScheduledJobSpec, cronjob_spec: dict[str, Any]) -> ScheduledJobSpec:
    """The schedule part of `spec` as the CronJob in place really has it."""
    return spec.model_copy(
        update={
            "backend": "kubernetes",
            "schedule": cronjob_spec.get("schedule", spec.schedule),
            "time_zone": cronjob_spec.get("timeZone", spec.time_zone),
            "suspend": bool(cronjob_spec.get("suspend", False)),
            "concurrency_policy": cronjob_spec.get("concurrencyPolicy", "Allow"),
            "starting_deadline_seconds": cronjob_spec.get("startingDeadlineSeconds"),
            "successful_runs_history_limit": cronjob_spec.get(
                "successfulJobsHistoryLimit", spec.successful_runs_history_limit
            ),
            "failed_runs_history_limit": cronjob_spec.get(
                "failedJobsHistoryLimit", spec.failed_runs_history_limit
            ),
        }
    )


def accounting(sj: ScheduledJob, live: dict[str, Any], now: datetime) -> RunAccounting:
    """The watermark to judge from: the status's while the schedule is unchanged, else
    from now (no earlier than the CronJob's creation)."""
    return start_accounting(
        sj.status.run_accounting, timetable_hash(sj.spec), now,
        since=parse_time(live["metadata"].get("creationTimestamp")),
    )  # fmt: skip


def cache_evidence(
    sj: ScheduledJob,
    live: dict[str, Any],
    jobs: Iterable[JobRecord],
    seen_slots: frozenset[datetime],
    watching_since: datetime,
) -> KubernetesEvidence:
    """The evidence of the watch cache (the owner's Jobs, the slots whose Jobs it saw made,
    since when it watches) and of the live CronJob (its last schedule time, history limits
    and TTL)."""
    observed = live.get("status") or {}
    job_spec = live["spec"]["jobTemplate"].get("spec", {})
    return KubernetesEvidence(
        # Requested runs (run now, backfill) are no slot's: the judge never sees them.
        jobs=[job for job in jobs if job.requested is None],
        seen_slots=seen_slots,
        watching_since=watching_since,
        last_schedule_time=parse_time(observed.get("lastScheduleTime")),
        successful_history_limit=sj.spec.successful_runs_history_limit,
        failed_history_limit=sj.spec.failed_runs_history_limit,
        ttl_seconds_after_finished=job_spec.get("ttlSecondsAfterFinished"),
    )


def beyond_cache(
    evidence: KubernetesEvidence,
    cronjob: str,
    listed_jobs: Iterable[dict[str, Any]],
    event_messages: list[str],
) -> KubernetesEvidence:
    """The evidence with what the API still keeps: the owner's Jobs listed afresh (as the
    apiserver returns them), and the messages of the CronJob controller's Events about
    `cronjob` (kept an hour by default), which name the Jobs it created, saw complete and
    deleted; a slot named there ran. Confirmed: the judge may now call an absence a miss."""
    # Requested runs (run now, backfill) are no slot's, here as in the cache.
    listed = [r for r in map(job_record, listed_jobs) if r is not None and r.requested is None]
    said = cj.controller_events(cronjob, event_messages)
    merged = {job.name: job for job in evidence.jobs} | {job.name: job for job in listed}
    return replace(
        evidence,
        jobs=list(merged.values()),
        confirmed=True,
        confirmed_slots=frozenset({job.scheduled_time for job in listed} | said.named),
        created_events=said.created,
        completed_events=said.completed,
        overlap_skip_reported=said.overlap_skip,
    )
