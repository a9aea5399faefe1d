"""One reconcile pass for one ScheduledJob, in numbered steps.

Called by the work queue with a (namespace, name) key whenever the ScheduledJob or the
CronJob or Jobs it owns change, and again at the next slot (kubernetes) or after the resync
interval (temporal). Kubernetes reads come from the watch caches (no GET per pass); the
backends write only when the desired state differs from the observed one. Returns the
seconds until the pass should run again, or None.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError

from sundial.api import reasons
from sundial.api.models import MissedRun, RequestStatus, ScheduledJob, ScheduledJobStatus
from sundial.backends.protocol import DAY_SEMANTICS_NOTE, Backend, Cache, Key, Outcome, Pass
from sundial.errors import Retry, SpecProblem, api_retry
from sundial.events import EventRecorder
from sundial.kube import ApiException, KubeClient, is_not_found
from sundial.metrics import Metrics
from sundial.ownwrites import OwnWrites
from sundial.planning import catchup, pausing, spread
from sundial.planning import status as st
from sundial.planning import switching as sw
from sundial.planning.requests import annotated, with_entries, with_new
from sundial.planning.schedule import ScheduleError, iso, timetable
from sundial.watchcache import resource_version

log = logging.getLogger(__name__)

# Event type, wording and reason per kind of judged run; any other reason is a miss.
RUN_EVENTS: dict[str, tuple[Literal["Normal", "Warning"], str, str]] = {
    "OverlapSkipped": ("Warning", "skipped", "RunSkipped"),
    "Unknown": ("Normal", "could not be verified", "RunUnverified"),
}


# Event reasons when a run condition turns True, and back to False.
RUN_CONDITION_EVENTS = {
    reasons.RUNS_FAILING: ("RunsFailing", "RunsRecovered"),
    reasons.RUN_TOO_LONG: ("RunTooLong", "RunDurationRecovered"),
}


class _Gone(Exception):
    """The cached ScheduledJob is not (or no longer) the one on the server."""


async def _already_confirmed() -> None:
    return None


class _RecordFirst(Exception):
    """The backend is about to make something at a place status does not name: this pass
    writes `status` (the place in pendingBackendRef); once that write is answered, the
    pass runs again and makes it."""

    def __init__(self, status: ScheduledJobStatus) -> None:
        super().__init__("recording where the backend makes its object")
        self.status = status


@dataclass
class Reconciler:
    kube: KubeClient
    cache: Cache
    events: EventRecorder
    metrics: Metrics
    # Every way a job can run, one per value of spec.backend (wiring.py registers them).
    backends: Sequence[Backend[Any]]
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # Sharded mode: whether this replica holds the object's shard (sharding.py).
    serves: Callable[[Key], bool] = field(default=lambda key: True)
    # The status last written for each object, read instead of the cached one until the
    # cache shows that write (ownwrites.py): a pass that read the older one would judge
    # the same slots again and count them twice in Events and metrics.
    _written_status: OwnWrites[dict[str, Any]] = field(default_factory=OwnWrites)
    # The status of each write in flight: its watch event can come before its answer.
    _writing: dict[Key, dict[str, Any]] = field(default_factory=dict)

    def backend(self, name: str) -> Backend[Any]:
        """The backend spec.backend names (the CRD's enum admits no other)."""
        return next(backend for backend in self.backends if backend.name == name)

    def wrote(self, key: Key, obj: dict[str, Any]) -> bool:
        """Whether this ScheduledJob is as Sundial's last status write left it: the pass
        that wrote it saw everything it says, so its watch event needs no pass of its own
        (half the passes of a steady state otherwise)."""
        writing = self._writing.get(key)
        if writing is not None and obj.get("status") == writing:
            return True  # the write in flight, its event before its answer
        version = resource_version(obj)
        if version is None or self._written_status.version(key) != version:
            return False
        # The cache holds this version now: the remembered copy of the status can go (held
        # until the next pass, it was a second copy per object, an hour for an hourly one).
        self._written_status.read(key, version)
        return True

    def remembered_statuses(self) -> int:
        """Status writes held until the cache shows them (memory: at most one per object)."""
        return len(self._written_status)

    async def __call__(self, key: Key) -> float | None:
        return await self._pass(key, recorded=False)

    async def _pass(self, key: Key, *, recorded: bool) -> float | None:
        """`recorded`: this pass follows its own record's status write in the same call."""
        # 1. Load the ScheduledJob from the watch cache; gone means nothing to do (the
        #    garbage collector removes the CronJob; the finalizer already took the schedule).
        #    One of a shard this replica no longer holds is let go the same way, unwritten.
        body = self._with_own_status(key, self.cache.scheduledjob(key))
        if body is None or not self.serves(key):
            self._written_status.forget(key)
            for backend in self.backends:
                backend.forget(key)
            self.events.forget(*key)
            self.metrics.forget(key)
            return None
        now = self.clock()

        # 2. Parse; on deletion, let the finalizer take the schedule along.
        try:
            sj = ScheduledJob.model_validate(body)
        except ValidationError as error:
            await self._report_unparseable(body, error, now)
            return None
        if sj.metadata.deletion_timestamp is not None:
            await self._finalize(sj, body, now)
            return None

        # 3. Validate what the CRD schema could not, and bring the chosen backend in step,
        #    retiring the other one first: never both active at once. The backend runs the
        #    spec as it is to be run: its spread made concrete (planning/spread.py), and
        #    held as spec.suspend would by a maintenance window or the failure policy
        #    (planning/pausing.py).
        verdict = pausing.in_force(sj, now)
        try:
            as_run = pausing.held(spread.resolved(sj), verdict.pause)
            outcome = await self._bring_in_step(Pass(key, as_run, now), recorded)
        except _Gone:
            log.info("%s/%s is gone from the server; nothing is made for it", *key)
            return 0.0
        except _RecordFirst as record:
            written = await self._write_status(sj, body, record.status)
            if written is None:  # gone meanwhile: no pass until the watch says otherwise
                self.cache.remove_scheduledjob(key, sj.metadata.resource_version)
                return None
            # The next pass acts on the object as written (its resourceVersion the lock of
            # the finalizer's patch), not on the older copy the watch may still be behind on.
            self.cache.put_scheduledjob(written, confirmed=True)
            # Then makes it now, in this worker's turn of its Temporal lane: no trip
            # through the queue, and no second read of an object its write just found.
            return 0.0 if recorded else await self._pass(key, recorded=True)
        except (ScheduleError, SpecProblem) as problem:
            self.metrics.spec_problem(key, sj.spec.backend, problem.reason)
            return await self._report_problem(key, sj, body, problem, now)
        except Retry as retry:
            # Transient, retried with backoff; meanwhile the condition says why.
            self.metrics.spec_problem(key, sj.spec.backend, None)
            await self._report(sj, body, retry.reason, str(retry), now)
            raise
        except Exception as error:
            self.metrics.spec_problem(key, sj.spec.backend, None)
            await self._report(
                sj, body, reasons.INTERNAL_ERROR, f"{type(error).__name__}: {error}", now
            )
            raise
        self.metrics.spec_problem(key, sj.spec.backend, None)
        outcome, verdict = self._with_pause(sj, outcome, verdict, now)
        outcome = _with_catch_up(sj, as_run, outcome, verdict, now)

        # 4. Write the rebuilt status if it changed. Status first: if the write fails, the
        #    next pass judges the same slots again, and no Event or counter moved twice.
        await self._announce(sj, outcome.status, now)
        await self._write_status(sj, body, outcome.status)
        await self._announce_pause(sj, verdict, now)
        await self._announce_runs(sj, outcome.new_runs, now)
        self._settle_runs(key, sj, outcome)
        next_runs = outcome.status.next_run_times
        self.metrics.times(
            key, sj.spec.backend, outcome.status.last_schedule_time,
            next_runs[0] if next_runs else None,
        )  # fmt: skip
        return outcome.requeue_after

    async def _report_problem(
        self,
        key: Key,
        sj: ScheduledJob,
        body: dict[str, Any],
        problem: ScheduleError | SpecProblem,
        now: datetime,
    ) -> float | None:
        """Ready=False for a problem only a spec change can fix. A CronJob already in
        place still runs by its last accepted spec, so its slots are still judged; a
        schedule the problem made Sundial pause comes judged with it (`observed`)."""
        retry_after = problem.retry_after if isinstance(problem, SpecProblem) else None
        running = problem.observed if isinstance(problem, SpecProblem) else None
        if running is None:
            # The backend that runs by the last accepted spec: the chosen one, or mid-switch
            # the old one, which runs until the new one accepts.
            p = Pass(key, _spread_or_as_is(sj), now)
            chosen = self.backend(sj.spec.backend)
            for backend in [chosen, *(b for b in self.backends if b is not chosen)]:
                running = await backend.judge_running(p)
                if running is not None:
                    break
        if running is None:
            await self._report(sj, body, problem.reason, problem.message, now)
            return retry_after
        await self._report(sj, body, problem.reason, problem.message, now, running.status)
        await self._announce_runs(sj, running.new_runs, now)
        self._settle_runs(key, sj, running)
        wakes = [w for w in (retry_after, running.requeue_after) if w is not None]
        return min(wakes, default=None)

    def _with_pause(
        self, sj: ScheduledJob, outcome: Outcome, verdict: pausing.Verdict, now: datetime
    ) -> tuple[Outcome, pausing.Verdict]:
        """The outcome with the pause in its status: tripped by this pass's runs (the next
        pass, at once, pauses the backend), or due to lift by itself (a pass then)."""
        verdict = pausing.after_runs(sj, verdict, outcome.status, now)
        status = pausing.settled(sj, outcome.status, verdict, now)
        wakes = [w for w in (outcome.requeue_after,) if w is not None]
        if verdict.tripped or verdict.recovered:
            wakes.append(0.0)  # the backend pauses, or resumes, on the next pass
        if verdict.wake_at is not None:
            wakes.append(max((verdict.wake_at - now).total_seconds(), 0.0) + 1.0)
        return replace(outcome, status=status, requeue_after=min(wakes, default=None)), verdict

    async def _announce_pause(
        self, sj: ScheduledJob, verdict: pausing.Verdict, now: datetime
    ) -> None:
        """One Event when the failure policy pauses the job, one when that pause lifts, and
        the pause in metrics: after the status write, so a write that fails (the next pass
        trips it again) moves no counter twice."""
        key = (sj.metadata.namespace, sj.metadata.name)
        reason = verdict.pause.reason if verdict.pause is not None else None
        self.metrics.pause(key, sj.spec.backend, reason, tripped=verdict.tripped)
        if verdict.tripped and verdict.pause is not None:
            await self.events.record(
                sj, "Warning", reasons.PAUSED_BY_FAILURE_POLICY, verdict.pause.message, now=now
            )
        if verdict.lifted is not None:
            await self.events.record(
                sj, "Normal", "FailurePauseLifted",
                f"the failure policy's pause lifted: {verdict.lifted}", now=now,
            )  # fmt: skip

    def _settle_runs(self, key: Key, sj: ScheduledJob, outcome: Outcome) -> None:
        """After the status holding them is written: count the runs in metrics once, and
        let the cache drop the deleted Jobs the status now lists."""
        backend = sj.spec.backend
        self.metrics.runs(key, backend, outcome.new_runs)
        self.metrics.history(key, backend, outcome.history, outcome.status)
        history = outcome.history
        if history is not None and (history.observed_jobs or history.unseen_added):
            self.cache.forget_departed(key, set(history.observed_jobs), unseen=history.unseen_added)

    def _with_own_status(self, key: Key, body: dict[str, Any] | None) -> dict[str, Any] | None:
        if body is None:
            return None
        # A deleted and re-created object has a later resourceVersion: the cache wins.
        written = self._written_status.read(key, self.cache.scheduledjob_version(key))
        return body if written is None else {**body, "status": written}

    async def _bring_in_step(self, p: Pass, recorded: bool) -> Outcome:
        """The backend spec.backend names, brought in step, through the phases of
        planning/switching.py: a switch retires the old backend only once the new one has
        accepted the object, so a refusal leaves the old one running (status: Switching
        True, Ready False), and never both run at once."""
        key, sj = p.key, p.sj
        p.table  # noqa: B018  (a schedule that cannot be parsed stops the pass before any write)
        new = self.backend(sj.spec.backend)
        others = [backend for backend in self.backends if backend is not new]
        # Right after its record's status write, the object is known to exist: the write
        # found it, with the finalizer that keeps it until its schedule is deleted.
        confirm = _already_confirmed if recorded else lambda: self._confirm_exists(key, p.sj)
        p, prepared = await new.prepare(p, confirm)
        if (place := new.unrecorded(prepared)) is not None:
            # Decide, record, then act: a create whose answer or status write is lost must
            # still be found by the next pass, wherever the spec points by then.
            raise _RecordFirst(st.pending_place(p.sj, place))
        old = [backend for backend in others if backend.holds(p)]
        facts = sw.Facts(
            old_holds=bool(old),
            old_run_in_progress=any(backend.run_in_progress(key) for backend in others),
            forbid=sj.spec.concurrency_policy == "Forbid",
        )
        phase = sw.phase(facts)
        if phase is sw.Phase.ACCEPTING:
            prepared = await new.accept(p, prepared)
            phase = sw.accepted(phase)
        if phase is sw.Phase.RETIRING_OLD:
            for backend in old:
                await backend.retire(p)
            phase = sw.retired(phase, facts)
        outcome = await new.reconcile(p, prepared, hold=sw.holds_new_runs(phase))
        entries = await new.handle_requests(p, prepared)
        return _with_requests(outcome, entries, sj.metadata.annotations)

    async def _confirm_exists(self, key: Key, sj: ScheduledJob) -> None:
        """A GET before a backend object is first made: the cache may hold an object
        deleted meanwhile (a watch event not yet seen). What the GET finds goes into the
        cache (ordered by resourceVersion, like any update); unless it is this object,
        alive, the pass stops (`_Gone`) and the next one works from the updated cache."""
        try:
            found = await self.kube.read_scheduledjob(*key)
        except ApiException as error:
            raise api_retry(error, "reading the ScheduledJob") from None
        if found is None:
            self.cache.remove_scheduledjob(key, sj.metadata.resource_version)
            raise _Gone
        self.cache.put_scheduledjob(found, confirmed=True)
        meta = found.get("metadata") or {}
        if meta.get("uid") != sj.metadata.uid or meta.get("deletionTimestamp"):
            raise _Gone

    async def _finalize(self, sj: ScheduledJob, body: dict[str, Any], now: datetime) -> None:
        """Each backend that may hold something for the object removes it; the deletion
        waits (the finalizer stays) until they have, and Ready says why meanwhile."""
        p = Pass((sj.metadata.namespace, sj.metadata.name), sj, now)
        for backend in self.backends:
            if not backend.holds(p):
                continue
            try:
                await backend.finalize(p)
            except Retry as retry:
                await self._report(sj, body, retry.reason, str(retry), now)
                raise
            except SpecProblem as problem:
                await self._report(sj, body, problem.reason, problem.message, now)
                raise Retry(problem.message, problem.reason) from None

    # ---- what the pass tells people --------------------------------------------------

    async def _announce(self, sj: ScheduledJob, new: ScheduledJobStatus, now: datetime) -> None:
        """Warning Events for what a healthy pass newly reports (once, not every pass)."""
        await self._announce_run_conditions(sj, new, now)
        await self._announce_requests(sj, new, now)
        old_ready = st.find_condition(sj.status.conditions, reasons.READY)
        new_ready = st.find_condition(new.conditions, reasons.READY)
        old_message = old_ready.message if old_ready else ""
        if new_ready is None or new_ready.message == old_message:
            return
        if new_ready.reason == reasons.PAUSED_IN_TEMPORAL and (
            old_ready is None or old_ready.reason != reasons.PAUSED_IN_TEMPORAL
        ):
            await self.events.record(
                sj, "Warning", reasons.PAUSED_IN_TEMPORAL, new_ready.message, now=now
            )
        if DAY_SEMANTICS_NOTE in new_ready.message and DAY_SEMANTICS_NOTE not in old_message:
            await self.events.record(
                sj, "Warning", "CronSemanticsDiffer", DAY_SEMANTICS_NOTE, now=now
            )

    async def _announce_run_conditions(
        self, sj: ScheduledJob, new: ScheduledJobStatus, now: datetime
    ) -> None:
        """One Event per change of RunsFailing or RunTooLong: failing, recovered, too long."""
        for type_, (true_reason, false_reason) in RUN_CONDITION_EVENTS.items():
            old = st.find_condition(sj.status.conditions, type_)
            current = st.find_condition(new.conditions, type_)
            if current is None or (old is not None and old.status == current.status):
                continue
            if current.status == "True":
                await self.events.record(sj, "Warning", true_reason, current.message, now=now)
            elif old is not None and old.status == "True":
                await self.events.record(sj, "Normal", false_reason, current.message, now=now)

    async def _announce_requests(
        self, sj: ScheduledJob, new: ScheduledJobStatus, now: datetime
    ) -> None:
        """One Event per request settled: done, or refused with the reason."""
        old = {(r.kind, r.id): r.outcome for r in sj.status.requests}
        for entry in new.requests:
            if entry.outcome == "InProgress" or old.get((entry.kind, entry.id)) == entry.outcome:
                continue
            refused = entry.outcome == "Refused"
            await self.events.record(
                sj, "Warning" if refused else "Normal",
                "RequestRefused" if refused else "RequestDone",
                f"{entry.kind} {entry.id}: {entry.message}", now=now,
            )  # fmt: skip

    async def _announce_runs(
        self, sj: ScheduledJob, new_runs: list[MissedRun], now: datetime
    ) -> None:
        """One Warning Event per kind of newly judged run; repeats within the aggregation
        window raise its count, so a long outage is one Event, not a storm."""
        for reason in sorted({run.reason for run in new_runs}):
            runs = [r for r in new_runs if r.reason == reason]
            kind, verb, event_reason = RUN_EVENTS.get(reason, ("Warning", "missed", "RunMissed"))
            times = ", ".join(iso(r.scheduled_time) for r in runs[:5])
            more = f" and {len(runs) - 5} more" if len(runs) > 5 else ""
            message = f"{len(runs)} run(s) {verb} ({reason}): scheduled for {times}{more}"
            await self.events.record(sj, kind, event_reason, message, now=now, aggregate_key=reason)

    async def _write_status(
        self, sj: ScheduledJob, body: dict[str, Any], new: ScheduledJobStatus
    ) -> dict[str, Any] | None:
        """Writes the status if it changed; returns the object as the server then holds
        it (`body` when nothing changed), None if it is gone."""
        old_document = dict(body.get("status") or {})
        new_document = st.status_document(new)
        patch = st.merge_patch(old_document, new_document)
        if not patch:
            self._settle_accounting((sj.metadata.namespace, sj.metadata.name), new)
            return body
        log.debug("writing status of %s/%s: %s", sj.metadata.namespace, sj.metadata.name,
                  sorted(patch))  # fmt: skip
        key = (sj.metadata.namespace, sj.metadata.name)
        self._writing[key] = new_document
        try:
            written = await self.kube.patch_scheduledjob_status(
                sj.metadata.namespace, sj.metadata.name, patch
            )
        except ApiException as error:
            if is_not_found(error):
                return None  # deleted meanwhile
            raise api_retry(error, "writing status") from None
        finally:
            del self._writing[key]
        self._written_status.remember(key, written, new_document)
        self._settle_accounting(key, new)
        return written

    def _settle_accounting(self, key: Key, written: ScheduledJobStatus) -> None:
        """The server holds this watermark now: the slots before it need no memory."""
        if written.run_accounting is not None:
            self.cache.forget_slots_before(key, written.run_accounting.accounted_until)

    async def _report(
        self,
        sj: ScheduledJob,
        body: dict[str, Any],
        reason: str,
        message: str,
        now: datetime,
        observed: ScheduledJobStatus | None = None,
    ) -> None:
        """Ready=False with the reason, a Warning Event once, the backend left as it was
        (with `observed`, what the backend still running was judged to have done)."""
        new_status = st.not_ready(sj, reason, message, now=now, observed=observed)
        if new_status != sj.status:
            await self.events.record(sj, "Warning", reason, message, now=now)
        await self._write_status(sj, body, new_status)

    async def _report_unparseable(
        self, body: dict[str, Any], error: ValidationError, now: datetime
    ) -> None:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5]
        )
        message = f"spec is not valid: {problems}"
        meta = body["metadata"]
        log.warning("%s/%s: %s", meta.get("namespace"), meta["name"], message)
        # Only the Ready condition can be said with confidence; keep the rest of the status.
        minimal = ScheduledJob.model_validate(
            {"metadata": meta, "spec": {"schedule": "@daily"}, "status": _lenient_status(body)}
        )
        await self._report(minimal, body, reasons.INVALID_SPEC, message, now)


def _with_requests(
    outcome: Outcome, entries: list[RequestStatus], annotations: dict[str, str]
) -> Outcome:
    """The outcome with this pass's request entries in status.requests."""
    if not entries:
        return outcome
    handled = with_entries(outcome.status.requests, entries, annotations)
    return replace(outcome, status=outcome.status.model_copy(update={"requests": handled}))


def _with_catch_up(
    sj: ScheduledJob,
    as_run: ScheduledJob,
    outcome: Outcome,
    verdict: pausing.Verdict,
    now: datetime,
) -> Outcome:
    """The outcome with the catch-ups of a maintenance window that ended this pass, and a
    pass at once for any catch-up newly decided (by the window, or by the judge of this
    pass's misses): recorded first, acted on by the next pass (planning/catchup.py)."""
    ended = sj.status.pause
    status = outcome.status
    # Ended, and nothing holds the job now (a window turned into suspend: true is a stop).
    if ended is not None and ended.reason == "MaintenanceWindow" and verdict.pause is None:
        made = catchup.after_window(as_run.spec, as_run.spec.backend, timetable(as_run.spec),
                                    ended, now)  # fmt: skip
        status = status.model_copy(update={"requests": with_new(status.requests, made)})
    known = {(entry.kind, entry.id) for entry in sj.status.requests}
    if not any(
        (entry.kind, entry.id) not in known for entry in status.requests if not annotated(entry)
    ):
        return replace(outcome, status=status)
    return replace(outcome, status=status, requeue_after=0.0)


def _spread_or_as_is(sj: ScheduledJob) -> ScheduledJob:
    """The ScheduledJob with its spread made concrete, or as it is if its spread is the
    problem (the backend in place then runs by its last accepted schedule)."""
    try:
        return spread.resolved(sj)
    except ScheduleError:
        return sj


def _lenient_status(body: dict[str, Any]) -> dict[str, Any]:
    try:
        return ScheduledJobStatus.model_validate(body.get("status") or {}).model_dump(by_alias=True)
    except ValidationError:
        return {}
