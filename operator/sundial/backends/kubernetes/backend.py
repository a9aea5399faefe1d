"""The kubernetes backend: keeps one CronJob in step and judges its slots."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

from sundial.api import reasons
from sundial.api.models import (
    BackendRef,
    MissedRun,
    RequestStatus,
    ScheduledJob,
)
from sundial.backends.protocol import DAY_SEMANTICS_NOTE, Cache, ConfirmExists, Key, Outcome, Pass
from sundial.errors import Retry, SpecProblem, api_retry
from sundial.events import EventRecorder
from sundial.kube import (
    ApiException,
    KubeClient,
    api_error_message,
    is_invalid,
    is_not_found,
)
from sundial.ownwrites import OwnWrites
from sundial.planning import cronjob as cj
from sundial.planning import cronjob_evidence as evidence
from sundial.planning import ownership
from sundial.planning import requests as rq
from sundial.planning import status as st
from sundial.planning.jobs import job_record
from sundial.planning.missed import (
    SETTLE,
    KubernetesEvidence,
    judge_kubernetes,
    timetable_hash,
)
from sundial.planning.news import without_bookkeeping
from sundial.planning.ownership import Ownership
from sundial.planning.pod_times import listed_pods_ended, pod_times_needed, with_pod_times
from sundial.planning.runs import (
    ObservedRun,
    job_run,
    limits,
    run_history,
)
from sundial.planning.schedule import (
    Timetable,
    both_days_restricted,
)
from sundial.planning.summaries import PodsEnded

log = logging.getLogger(__name__)


@dataclass
class KubernetesBackend:
    """backend: kubernetes (protocol.Backend): one CronJob the cluster's controller fires.
    Nothing needs preparing (its prepared value is None) and nothing outlives the object
    but what owner references take along, so `finalize` has nothing to do."""

    name: ClassVar[str] = "kubernetes"
    kube: KubeClient
    cache: Cache
    events: EventRecorder
    # Each CronJob as Sundial's last write returned it: read instead of the cache until the
    # cache shows that write (ownwrites.py); and since the apiserver canonicalises some
    # values (quantities), a live CronJob of the same spec hash and generation is in step.
    _applied: OwnWrites[dict[str, Any]] = field(
        default_factory=lambda: OwnWrites(settled=cj.write_fingerprint)
    )

    def forget(self, key: Key) -> None:
        self._applied.forget(key)

    def _live(self, key: Key) -> dict[str, Any] | None:
        applied = self._applied.read(key, self.cache.cronjob_version(key))
        return applied if applied is not None else self.cache.cronjob(key)

    def lane(self, body: dict[str, Any] | None) -> Hashable | None:
        return None  # the apiserver is everyone's: its passes need no lane of their own

    def holds(self, p: Pass) -> bool:
        return self.in_place(p.key, p.sj)

    async def prepare(self, p: Pass, confirm_exists: ConfirmExists) -> tuple[Pass, None]:
        """The pass may create the CronJob: the object is confirmed to exist first (a
        GET) only when its copy came from a listing, which may hold one deleted
        meanwhile. One from a watch event existed at its resourceVersion; and were it
        deleted since, the CronJob's owner reference names its uid, so the garbage
        collector takes the CronJob."""
        if self.cache.cronjob(p.key) is None and not self.cache.scheduledjob_confirmed(p.key):
            await confirm_exists()
        return p, None

    def unrecorded(self, prepared: None) -> BackendRef | None:
        # The CronJob's place is fixed by the object (its namespace, its name), and its
        # owner reference lets the garbage collector find it: nothing to record first.
        return None

    async def accept(self, p: Pass, prepared: None) -> None:
        """Switching from temporal: before the schedule goes, the CronJob must be ours to
        write and the apiserver must accept it (a server-side dry run of the write the
        pass will make, admission included). SpecProblem or Retry otherwise, and the
        schedule keeps running."""
        desired = cj.cronjob_manifest(p.sj)
        try:
            if self._live(p.key) is None and await self.kube.create_cronjob(desired, dry_run=True):
                return
            live = await self._owned_or_adopted(p.key, p.sj, desired, await self._existing(p.key),
                                                p.now)  # fmt: skip
            await self.kube.replace_cronjob(cj.replacement(desired, live), dry_run=True)
        except ApiException as error:
            raise _write_refused(error, "checking") from None

    async def finalize(self, p: Pass) -> None:
        """The CronJob goes with the object: its owner reference lets the garbage
        collector take it (its Jobs too)."""

    async def reconcile(self, p: Pass, prepared: None, *, hold: bool) -> Outcome:
        """`hold`: switching from temporal under Forbid while the last Temporal run's Job
        is still going: the CronJob is made only once it has ended, so the first CronJob
        run never overlaps the last Temporal one (slots in that wait are not run, as a
        paused schedule's are not)."""
        key, sj, table, now = p.key, p.sj, p.table, p.now
        if hold and not self.in_place(key, sj):
            message = (
                "the CronJob is made once the run the Temporal schedule started has "
                "finished (concurrencyPolicy Forbid)"
            )
            return Outcome(st.waiting_for_run(sj, message, now=now), None, [])
        desired = cj.cronjob_manifest(sj)
        sj, judged_before_change = await self.judge_before_change(key, sj, now)
        live = self._live(key)
        if live is None:
            live = await self._create(key, sj, desired, now)
        else:  # Sundial's labels are anyone's to set: the owner reference decides
            live = await self._owned_or_adopted(key, sj, desired, live, now)
        if not self._in_step(key, desired, live):
            live = await self._replace(key, desired, live)
        notes = [DAY_SEMANTICS_NOTE] if table.cron and both_days_restricted(table.cron) else []
        outcome = await self._judge(key, sj, live, table, now, notes)
        if not judged_before_change:
            return outcome
        return replace(outcome, new_runs=[*judged_before_change, *outcome.new_runs])

    async def _create(
        self, key: Key, sj: ScheduledJob, desired: dict[str, Any], now: datetime
    ) -> dict[str, Any]:
        """Create-first: a create never writes over anything, so the common case (no
        CronJob of the name yet) costs one request. Only when the apiserver answers that
        one exists (the watch cache holds only Sundial's) is it read and its ownership
        decided (`_owned_or_adopted`)."""
        try:
            created = await self.kube.create_cronjob(desired)
        except ApiException as error:
            raise _write_refused(error, "creating") from None
        if created is not None:
            log.info("created CronJob %s/%s", *key)
            created = without_bookkeeping(created)
            self._applied.remember(key, created, created)
            return created
        return await self._owned_or_adopted(key, sj, desired, await self._existing(key), now)

    async def _existing(self, key: Key) -> dict[str, Any]:
        """The CronJob the apiserver says is there: the cache's, else a GET (the cache holds
        only Sundial-labelled ones). Gone meanwhile: Retry, the next pass looks again."""
        live = self._live(key)
        if live is None:
            try:
                live = await self.kube.read_cronjob(*key)
            except ApiException as error:
                raise api_retry(error, "reading the CronJob") from None
            if live is None:
                raise _changed_meanwhile()
        return live

    async def _owned_or_adopted(
        self, key: Key, sj: ScheduledJob, desired: dict[str, Any], live: dict[str, Any],
        now: datetime,
    ) -> dict[str, Any]:  # fmt: skip
        """`live` if Sundial made it for this object (its owner reference names this uid);
        one made by anybody else is never written over, unless adoption was asked for."""
        name = live["metadata"]["name"]
        decision = ownership.decide(sj, name, exists=True, made_for_this=cj.is_owned_by(live, sj))
        if decision is Ownership.OWNED:
            return live
        if decision is Ownership.REFUSE:
            raise SpecProblem(
                reasons.CRONJOB_EXISTS,
                ownership.refusal(
                    sj, "CronJob named", name, key[0],
                    "Rename the ScheduledJob, delete that CronJob",
                    "its spec is then replaced wholly by this ScheduledJob's; its Jobs and "
                    "history are kept",
                ),
                # That CronJob is not watched: look again now and then, for its deletion.
                retry_after=60.0,
            )  # fmt: skip
        try:
            adopted = await self.kube.replace_cronjob(
                {**desired, "metadata": {**desired["metadata"],
                                         "resourceVersion": live["metadata"]["resourceVersion"]}}
            )  # fmt: skip
        except ApiException as error:
            raise _write_refused(error, "adopting") from None
        adopted = without_bookkeeping(adopted)
        self._applied.remember(key, adopted, adopted)
        log.info("adopted CronJob %s/%s", *key)
        await self.events.record(
            sj, "Normal", "Adopted",
            f"adopted the existing CronJob {name} ({ownership.ADOPT_ANNOTATION}): its spec "
            "was replaced by this ScheduledJob's, its Jobs and history kept", now=now,
        )  # fmt: skip
        return adopted

    async def judge_before_change(
        self, key: Key, sj: ScheduledJob, now: datetime
    ) -> tuple[ScheduledJob, list[MissedRun]]:
        """When the schedule changed, the old one's slots up to now are judged first, by
        the CronJob still in place, so a change does not drop what happened since the
        last look. Returns the object with that judgement in its status, and the runs."""
        accounting = sj.status.run_accounting
        if accounting is None or accounting.spec_hash == timetable_hash(sj.spec):
            return sj, []
        before = await self._judge_running(key, sj, now)
        if before is None:
            return sj, []
        return sj.model_copy(update={"status": before.status}), before.new_runs

    async def judge_running(self, p: Pass) -> Outcome | None:
        return await self._judge_running(p.key, p.sj, p.now)

    async def _judge_running(self, key: Key, sj: ScheduledJob, now: datetime) -> Outcome | None:
        """The slots of the CronJob already in place, while the spec cannot be applied.

        That CronJob keeps running by its own schedule, so its slots are judged as usual and
        the watermark keeps moving: an object stuck for days floods no false misses when
        it is fixed. None when there is no CronJob in place (nothing runs, nothing to judge).
        """
        live = self._live(key)
        found = evidence.running(sj, live)
        if live is None or found is None:
            return None  # none, one being deleted, not this object's, not Sundial's schedule
        running, table = found
        return await self._judge(key, running, live, table, now, notes=[])

    async def _judge(
        self,
        key: Key,
        sj: ScheduledJob,
        live: dict[str, Any],
        table: Timetable,
        now: datetime,
        notes: list[str],
    ) -> Outcome:
        """Judge the slots by the watch cache; a slot that looks missed there is judged
        only after a look beyond it (one LIST of the Jobs, one of the controller's Events),
        so a watch gap never passes for a miss."""
        accounting = evidence.accounting(sj, live, now)
        found = self._evidence(key, sj, live)
        judgement = judge_kubernetes(table, sj.spec, accounting, found, now)
        if judgement.needs_confirmation:
            found = await self._beyond_cache(sj, found)
            judgement = judge_kubernetes(table, sj.spec, accounting, found, now)
        judgement = judgement.caught_up(sj.spec, "kubernetes", table, now)
        observed = [job_run(job) for job in [*self.cache.departed_jobs(key),
                                              *self.cache.jobs(key)]]  # fmt: skip
        run_limits = limits(sj.spec)
        unseen = self.cache.unseen_runs(key)
        history = run_history(sj.status, observed, run_limits, now, complete=True, unseen=unseen)
        ended = {run.job_name for run in history.newly_finished if run.job_name}
        if ended:
            # Counted once, when first seen ended: then with its Pods' own times.
            observed = await self._with_pod_times(sj.metadata.namespace, observed, ended)
            history = run_history(
                sj.status, observed, run_limits, now, complete=True, unseen=unseen
            )
        status = st.kubernetes_status(
            sj, cj.cronjob_view(live), table, judgement, history, now=now, notes=notes
        )
        # Look again once the next slot has settled (the controller needs a moment).
        wake = [(t - now + SETTLE).total_seconds() for t in status.next_run_times[:1]]
        for moment in (judgement.recheck_at, history.wake_at):
            if moment is not None:
                wake.append(max((moment - now).total_seconds(), 0.0))
        return Outcome(status, min(wake, default=None), judgement.new_runs, history)

    async def _with_pod_times(
        self, namespace: str, observed: list[ObservedRun], ended: set[str]
    ) -> list[ObservedRun]:
        """The runs of the Jobs in `ended` with their Pods' start and finish, on the one
        pass that counts each ended (the Job's own times are the Job controller's, seconds
        off on a busy node), and the summary the last Pod left in its termination message
        as the run's message (the Job controller's reason stays): from the Pod watch, or,
        when it has not shown all the Job's ended Pods yet, one LIST of them."""
        needed = pod_times_needed(
            observed, ended, lambda job_name: self.cache.pods_ended(namespace, job_name)
        )
        pods: dict[str, PodsEnded | None] = dict(needed.watched)
        for job_name in needed.to_list:
            pods[job_name] = listed_pods_ended(await self._list_pods(namespace, job_name))
        return with_pod_times(observed, pods)

    async def _list_pods(self, namespace: str, job_name: str) -> list[dict[str, Any]]:
        try:
            return await self.kube.list_pods(namespace, f"{cj.JOB_NAME_LABEL}={job_name}")
        except ApiException as error:
            raise api_retry(error, f"reading the Pods of Job {job_name}") from None

    async def _beyond_cache(
        self, sj: ScheduledJob, found: KubernetesEvidence
    ) -> KubernetesEvidence:
        """The evidence with what the API still keeps (cronjob_evidence.beyond_cache): the
        owner's Jobs listed afresh, and the CronJob controller's Events."""
        namespace, name = sj.metadata.namespace, cj.cronjob_name(sj.metadata.name)
        try:
            jobs = await self.kube.list_all("jobs", [namespace], f"{cj.SCHEDULEDJOB_LABEL}={name}")
            messages = await self.kube.cronjob_event_messages(namespace, name)
        except ApiException as error:
            raise api_retry(error, "confirming missed runs") from None
        return evidence.beyond_cache(found, name, jobs, messages)

    async def handle_requests(self, p: Pass, prepared: None) -> list[RequestStatus]:
        """Run-now and backfill requests not yet settled: one Job per run, named by the
        request and slot (so a repeated pass creates nothing twice). Under Forbid (and
        Replace: a request never kills a run) one at a time, the rest waiting in status;
        the CronJob controller does not count these Jobs for its own concurrency policy."""
        key, sj, table, now = p.key, p.sj, p.table, p.now
        live = self._live(key)
        if live is None or not cj.is_owned_by(live, sj):
            return []
        entries, to_act = rq.open_requests(sj.metadata.annotations, sj.status.requests, table, now)
        for open_request in to_act:
            entries.append(await self._start_requested(key, sj, live, open_request))
        return entries

    async def _start_requested(
        self,
        key: Key,
        sj: ScheduledJob,
        live: dict[str, Any],
        open_request: rq.OpenRequest,
    ) -> RequestStatus:
        request, entry, slots = open_request.request, open_request.entry, open_request.slots
        one_at_a_time = sj.spec.concurrency_policy != "Allow"
        started = entry.runs_started

        def job_name(slot: datetime) -> str:
            suffix = rq.job_suffix(sj.metadata.uid, request, slot)
            return f"{cj.cronjob_name(sj.metadata.name)}-{suffix}"

        while started < len(slots):
            slot = slots[started]
            name = job_name(slot)
            # A Job of this name in the cache was made by an earlier pass whose record was
            # lost (a failed status write): it is started, not waited for as another run.
            if name not in self.cache.job_names(key):
                previous = job_name(slots[started - 1]) if started else None
                if one_at_a_time and (
                    self.run_in_progress(key)
                    or (previous is not None and await self._still_running(key, previous))
                ):
                    break
                job = cj.requested_job(live, name, slot, request.label)
                try:
                    # False (409 AlreadyExists) for such a Job the cache does not show yet.
                    await self.kube.create_job(job)
                except ApiException as error:
                    what = f"creating Job {name} for {request.label}"
                    raise _write_refused(error, what) from None
            started += 1
            if one_at_a_time:
                break  # the next one once this one has ended (its events wake the pass)
        waiting = len(slots) - started
        message = f"{started} of {len(slots)} run(s) started"
        if waiting:
            message += (
                f"; {waiting} waiting for the running one to end (concurrencyPolicy "
                f"{sj.spec.concurrency_policy}: one at a time)"
            )
        return entry.model_copy(update={
            "outcome": "InProgress" if waiting else "Done", "message": message,
            "runs_requested": len(slots), "runs_started": started,
        })  # fmt: skip

    async def _still_running(self, key: Key, name: str) -> bool:
        """The Job made for the previous run, which the cache may not show yet: looked up."""
        if name in self.cache.job_names(key):
            return False  # in the cache: run_in_progress has judged it
        try:
            job = await self.kube.read_job(key[0], name)
        except ApiException as error:
            raise api_retry(error, f"reading Job {name}") from None
        record = job_record(job) if job is not None else None
        return record is not None and record.finished_at is None

    def in_place(self, key: Key, sj: ScheduledJob) -> bool:
        """This object's CronJob is there and active (one being deleted is inert)."""
        cronjob = self._live(key)
        return (
            cronjob is not None
            and not cronjob["metadata"].get("deletionTimestamp")
            and cj.is_owned_by(cronjob, sj)
        )

    def run_in_progress(self, key: Key) -> bool:
        """A Job the CronJob started is still running (it outlives its CronJob)."""
        return any(job.finished_at is None for job in self.cache.jobs(key))

    async def retire(self, p: Pass) -> None:
        """Switching to temporal: remove the CronJob. Orphan, not cascade: a Job that is
        running now is allowed to finish; without an owner, only a TTL removes the Jobs
        afterwards, so those that have none get the default one first."""
        key, sj, now = p.key, p.sj, p.now
        # Sundial's own write counts even before the cache has seen it: never both active.
        cronjob = self._live(key) if self.in_place(key, sj) else None
        self.forget(key)  # whatever happens next, what was applied is no longer in force
        if cronjob is None:
            return  # none, one being deleted (inert), or not this object's to delete
        template = cronjob["spec"]["jobTemplate"].get("spec", {})
        if template.get("ttlSecondsAfterFinished") is None:
            for name in self.cache.job_names(key):
                try:
                    await self.kube.set_job_ttl(key[0], name, cj.DEFAULT_TTL_SECONDS_AFTER_FINISHED)
                except ApiException as error:
                    if not is_not_found(error):
                        raise api_retry(error, f"giving Job {name} a TTL") from None
        await self.kube.delete_cronjob(*key, propagation="Orphan")
        await self.events.record(
            sj, "Normal", "BackendSwitched",
            "switched to backend temporal: the CronJob was deleted (running Jobs finish)",
            now=now,
        )  # fmt: skip

    async def _replace(
        self, key: Key, desired: dict[str, Any], live: dict[str, Any]
    ) -> dict[str, Any]:
        """The whole CronJob written over Sundial's own (cj.replacement): what the spec no
        longer says is gone. A CronJob changed since it was read answers 409: retried."""
        try:
            written = await self.kube.replace_cronjob(cj.replacement(desired, live))
        except ApiException as error:
            raise _write_refused(error, "writing") from None
        log.info("wrote CronJob %s/%s", *key)
        written = without_bookkeeping(written)
        self._applied.remember(key, written, written)
        return written

    def _in_step(self, key: Key, desired: dict[str, Any], live: dict[str, Any]) -> bool:
        if not cj.metadata_in_step(desired, live):
            return False
        if cj.spec_in_step(desired, live):
            return True
        applied = self._applied.last(key)
        if applied is None:
            return False
        written = applied["metadata"]
        same_spec: bool = (
            desired["metadata"]["annotations"][cj.SPEC_HASH_ANNOTATION]
            == written["annotations"][cj.SPEC_HASH_ANNOTATION]
        )
        return same_spec and live["metadata"].get("generation") == written.get("generation")

    def _evidence(self, key: Key, sj: ScheduledJob, live: dict[str, Any]) -> KubernetesEvidence:
        """The watch cache's evidence and the live CronJob's (cronjob_evidence)."""
        return evidence.cache_evidence(
            sj, live, self.cache.jobs(key), self.cache.seen_slots(key), self.cache.watching_since
        )


def _changed_meanwhile() -> Retry:
    """A CronJob the apiserver said was there, gone when read: the next pass looks again."""
    return Retry("the CronJob changed while it was being written; trying again")


def _write_refused(error: ApiException, doing: str) -> SpecProblem | Retry:
    """What a refused CronJob write means: the object itself is invalid (only a spec
    change helps), or it is refused or failed for now (retried, with the reason)."""
    if is_invalid(error):
        return SpecProblem(
            reasons.INVALID_JOB_TEMPLATE,
            f"the apiserver rejected the CronJob: {api_error_message(error)}",
        )
    return api_retry(error, f"{doing} the CronJob")
