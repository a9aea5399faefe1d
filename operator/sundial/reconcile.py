"""One reconcile pass for one ScheduledJob, in numbered steps.

Called by the work queue with a (namespace, name) key whenever the ScheduledJob or the
CronJob it owns changes, and again at the next slot (kubernetes) or after the resync
interval (temporal). Kubernetes reads come from the watch caches (no GET per pass);
writes happen only when the desired state differs from the observed one. Returns the
seconds until the pass should run again, or None.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import ValidationError
from temporalio.client import ScheduleDescription

from sundial import cronjob as cj
from sundial import status as st
from sundial.config import OperatorConfig
from sundial.events import EventRecorder
from sundial.kube import ApiException, KubeClient, api_error_message, is_invalid, is_not_found
from sundial.metrics import Metrics
from sundial.missed import (
    JobRecord,
    Judgement,
    KubernetesEvidence,
    TemporalEvidence,
    judge_kubernetes,
    judge_temporal,
    start_accounting,
    timetable_hash,
)
from sundial.models import MissedRun, ScheduledJob, ScheduledJobStatus, TemporalCounters
from sundial.schedule import (
    ScheduleError,
    Timetable,
    both_days_restricted,
    parse_duration,
    timetable,
)
from sundial.temporal import (
    Connection,
    Temporal,
    TemporalRejected,
    TemporalUnavailable,
    schedule_fingerprint,
)
from sundial.temporal_schedule import (
    RESUME_NOTE,
    SCHEDULEDJOB_MEMO_KEY,
    SPEC_HASH_MEMO_KEY,
    SUSPEND_NOTE,
    schedule_id,
    temporal_schedule,
)
from sundial.workqueue import Retry

log = logging.getLogger(__name__)

Key = tuple[str, str]
# A slot's status settles a little after the slot: the CronJob controller needs a moment.
SLOT_SETTLE_SECONDS = 5.0
# Secrets are not watched: a missing one is looked for again this often.
SECRET_RETRY_SECONDS = 30.0
# Held while a Temporal schedule may exist, so deleting the ScheduledJob deletes it too.
TEMPORAL_FINALIZER = "sundial.dev/temporal-schedule"


class Cache(Protocol):
    """Read access to the watched objects (kopf indexes in production)."""

    def scheduledjob(self, key: Key) -> dict[str, Any] | None: ...

    def cronjob(self, key: Key) -> dict[str, Any] | None: ...

    def jobs(self, key: Key) -> list[JobRecord]: ...

    def seen_slots(self, key: Key) -> frozenset[datetime]: ...

    @property
    def watching_since(self) -> datetime: ...


@dataclass(frozen=True)
class Outcome:
    status: ScheduledJobStatus
    requeue_after: float | None
    new_runs: list[MissedRun]


class SpecProblem(Exception):
    """Only a change to the spec (or to a Secret it names) can fix this."""

    def __init__(self, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


@dataclass
class Reconciler:
    kube: KubeClient
    cache: Cache
    events: EventRecorder
    temporal: Temporal
    config: OperatorConfig
    default_connection: Connection
    metrics: Metrics
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # (spec hash, generation) of each CronJob as last written: the apiserver canonicalises
    # some values (quantities), so a pass also accepts what it wrote itself.
    _written: dict[Key, tuple[str, int]] = field(default_factory=dict)

    async def __call__(self, key: Key) -> float | None:
        # 1. Load the ScheduledJob from the watch cache; gone means nothing to do (the
        #    garbage collector removes the CronJob; the finalizer already took the schedule).
        body = self.cache.scheduledjob(key)
        if body is None:
            self._written.pop(key, None)
            self.events.forget(*key)
            self.metrics.forget(key)
            return None
        now = self.clock()

        # 2. Parse; an unparseable object can still be deleted.
        try:
            sj = ScheduledJob.model_validate(body)
        except ValidationError as error:
            await self._report_unparseable(body, error, now)
            return None
        if sj.metadata.deletion_timestamp is not None:
            await self._finalize(sj, body, now)
            return None

        # 3. Validate what the CRD schema could not; bring the backend in step; 4. rebuild
        #    the status from what the backend reports, and write it if it changed.
        try:
            table = timetable(sj.spec)
            if sj.spec.backend == "temporal":
                outcome = await self._reconcile_temporal(key, sj, table, now)
            else:
                outcome = await self._reconcile_kubernetes(key, sj, table, now)
        except (ScheduleError, SpecProblem) as problem:
            await self._report(sj, body, problem.reason, problem.message, now)
            return problem.retry_after if isinstance(problem, SpecProblem) else None
        except TemporalUnavailable as error:
            await self._report(sj, body, "BackendUnavailable", str(error), now)
            raise
        await self._announce(sj, outcome.status, now)
        # Status first: if the write fails, the next pass judges the same slots again, and
        # the Events and counters below have not been emitted twice.
        await self._write_status(sj, body, outcome.status)
        await self._announce_runs(sj, outcome.new_runs, now)
        self.metrics.runs(key, sj.spec.backend, outcome.new_runs)
        next_runs = outcome.status.next_run_times
        self.metrics.times(
            key, sj.spec.backend, outcome.status.last_schedule_time,
            next_runs[0] if next_runs else None,
        )  # fmt: skip
        return outcome.requeue_after

    # ---- kubernetes backend ----------------------------------------------------------

    async def _reconcile_kubernetes(
        self, key: Key, sj: ScheduledJob, table: Timetable, now: datetime
    ) -> Outcome:
        # A schedule left from backend: temporal goes first: never both active at once.
        if TEMPORAL_FINALIZER in sj.metadata.finalizers:
            await self._delete_schedule(sj)
            await self._set_finalizer(sj, present=False)
            await self.events.record(
                sj, "Normal", "BackendSwitched",
                "switched to backend kubernetes: the Temporal schedule was deleted", now=now,
            )  # fmt: skip
        desired = cj.cronjob_manifest(sj)
        live = self.cache.cronjob(key)
        if live is None or not self._in_step(key, desired, live):
            try:
                live = await self.kube.apply_cronjob(desired)
            except ApiException as error:
                if is_invalid(error):
                    raise SpecProblem(
                        "InvalidJobTemplate",
                        f"the apiserver rejected the CronJob: {api_error_message(error)}",
                    ) from None
                raise Retry(f"writing the CronJob: {api_error_message(error)}") from None
            spec_hash = desired["metadata"]["annotations"][cj.SPEC_HASH_ANNOTATION]
            self._written[key] = (spec_hash, live["metadata"].get("generation", 0))
            log.info("wrote CronJob %s/%s", *key)
        observed = live.get("status") or {}
        last_schedule_time = st.parse_time(observed.get("lastScheduleTime"))
        accounting = start_accounting(
            sj.status.run_accounting, timetable_hash(sj.spec), now,
            since=st.parse_time(live["metadata"].get("creationTimestamp")),
        )  # fmt: skip
        ttl = desired["spec"]["jobTemplate"].get("spec", {}).get("ttlSecondsAfterFinished")
        evidence = KubernetesEvidence(
            jobs=self.cache.jobs(key),
            seen_slots=self.cache.seen_slots(key),
            watching_since=self.cache.watching_since,
            last_schedule_time=last_schedule_time,
            successful_history_limit=sj.spec.successful_runs_history_limit,
            failed_history_limit=sj.spec.failed_runs_history_limit,
            ttl_seconds_after_finished=ttl,
        )
        judgement = judge_kubernetes(table, sj.spec, accounting, evidence, now)
        notes = [_DAY_SEMANTICS] if table.cron and both_days_restricted(table.cron) else []
        new_status = st.kubernetes_status(sj, live, table, judgement, now=now, notes=notes)
        wake = [_seconds_until_next(new_status, now)]
        if judgement.recheck_at is not None:
            wake.append((judgement.recheck_at - now).total_seconds())
        requeue_after = min((w for w in wake if w is not None), default=None)
        return Outcome(new_status, requeue_after, judgement.new_runs)

    def _in_step(self, key: Key, desired: dict[str, Any], live: dict[str, Any]) -> bool:
        if not cj.metadata_in_step(desired, live):
            return False
        if cj.spec_in_step(desired, live):
            return True
        written = (
            desired["metadata"]["annotations"][cj.SPEC_HASH_ANNOTATION],
            live["metadata"].get("generation", 0),
        )
        return self._written.get(key) == written

    # ---- temporal backend ------------------------------------------------------------

    async def _reconcile_temporal(
        self, key: Key, sj: ScheduledJob, table: Timetable, now: datetime
    ) -> Outcome:
        connection = await self._connection(sj)
        if TEMPORAL_FINALIZER not in sj.metadata.finalizers:
            await self._set_finalizer(sj, present=True)
        cronjob = self.cache.cronjob(key)
        if cronjob is not None and not cronjob["metadata"].get("deletionTimestamp"):
            # Orphan, not cascade: a Job that is running now is allowed to finish.
            await self.kube.delete_cronjob(
                sj.metadata.namespace, sj.metadata.name, propagation="Orphan"
            )
            await self.events.record(
                sj, "Normal", "BackendSwitched",
                "switched to backend temporal: the CronJob was deleted (running Jobs finish)",
                now=now,
            )  # fmt: skip

        identity, schedule, spec_hash = temporal_schedule(sj, self.config.schedule_id_prefix)
        try:
            description = await self.temporal.describe(connection, identity)
            if description is None:
                memo = {
                    SPEC_HASH_MEMO_KEY: spec_hash,
                    SCHEDULEDJOB_MEMO_KEY: f"{sj.metadata.namespace}/{sj.metadata.name}",
                }
                await self.temporal.create(connection, identity, schedule, memo)
                log.info("created Temporal schedule %s", identity)
                description = await self.temporal.describe(connection, identity)
            elif (
                sj.status.spec_hash != spec_hash
                or sj.status.backend_fingerprint != schedule_fingerprint(description)
            ):
                if sj.status.spec_hash == spec_hash:
                    await self.events.record(
                        sj, "Warning", "DriftCorrected",
                        f"Temporal schedule {identity} was changed outside Sundial; restored",
                        now=now,
                    )  # fmt: skip
                await self.temporal.update(connection, identity, schedule, keep_state=True)
                log.info("updated Temporal schedule %s", identity)
                description = await self.temporal.describe(connection, identity)
            if description is None:
                raise TemporalUnavailable(f"schedule {identity} vanished while being written")
            state = description.schedule.state
            if sj.spec.suspend and not state.paused:
                await self.temporal.set_paused(connection, identity, True, SUSPEND_NOTE)
                description = await self.temporal.describe(connection, identity)
            elif not sj.spec.suspend and state.paused and state.note == SUSPEND_NOTE:
                await self.temporal.set_paused(connection, identity, False, RESUME_NOTE)
                description = await self.temporal.describe(connection, identity)
        except TemporalRejected as error:
            raise SpecProblem("TemporalRejected", str(error)) from None
        if description is None:
            raise TemporalUnavailable(f"schedule {identity} vanished while being written")

        judgement = self._judge_temporal(sj, table, description, now)
        notes = [_DAY_SEMANTICS] if table.cron and both_days_restricted(table.cron) else []
        new_status = st.temporal_status(
            sj,
            description,
            judgement,
            namespace=connection.namespace,
            schedule_id=identity,
            spec_hash=spec_hash,
            fingerprint=schedule_fingerprint(description),
            now=now,
            notes=notes,
        )
        return Outcome(new_status, self.config.temporal_resync_seconds, judgement.new_runs)

    @staticmethod
    def _judge_temporal(
        sj: ScheduledJob, table: Timetable, description: ScheduleDescription, now: datetime
    ) -> Judgement:
        info = description.info
        counters = TemporalCounters(
            missed_catchup_window=info.num_actions_missed_catchup_window,
            overlap_skipped=info.num_actions_skipped_overlap,
            buffer_dropped=description.raw_description.info.buffer_dropped,
        )
        accounting = start_accounting(
            sj.status.run_accounting, timetable_hash(sj.spec), now, since=info.created_at
        )
        if accounting.temporal_counters is None:
            # A fresh start: what the counters held before is not this schedule's news.
            accounting = accounting.model_copy(update={"temporal_counters": counters})
        evidence = TemporalEvidence(
            counters=counters,
            recent_scheduled=[a.scheduled_at for a in info.recent_actions],
            recent_started=[a.started_at for a in info.recent_actions],
            paused=description.schedule.state.paused,
            jitter=parse_duration(sj.spec.jitter) if sj.spec.jitter else timedelta(0),
        )
        return judge_temporal(table, accounting, evidence, now)

    async def _connection(self, sj: ScheduledJob) -> Connection:
        """The operator's default connection, or the object's own. Credentials come only
        from Secrets in the object's namespace, and the operator's own are never sent to
        an address an object chose."""
        override = sj.spec.temporal
        if override is None:
            return self.default_connection
        address = override.address or self.default_connection.address
        namespace = override.namespace or self.default_connection.namespace
        inherit = override.address is None
        base = self.default_connection if inherit else Connection(address, namespace)
        cert, key, ca, api_key = base.client_cert, base.client_key, base.server_ca, base.api_key
        if override.tls_secret_ref is not None:
            data = await self._secret(sj, override.tls_secret_ref.name)
            cert, key = _secret_value(data, "tls.crt"), _secret_value(data, "tls.key")
            ca = _secret_value(data, "ca.crt")
            if cert is None or key is None:
                raise SpecProblem(
                    "InvalidSecret",
                    f"Secret {override.tls_secret_ref.name} needs keys tls.crt and tls.key",
                    SECRET_RETRY_SECONDS,
                )
        if override.api_key_secret_ref is not None:
            ref = override.api_key_secret_ref
            data = await self._secret(sj, ref.name)
            value = _secret_value(data, ref.key or "apiKey")
            if value is None:
                raise SpecProblem(
                    "InvalidSecret",
                    f"Secret {ref.name} has no key {ref.key or 'apiKey'}",
                    SECRET_RETRY_SECONDS,
                )
            api_key = value.decode().strip()
        return Connection(address, namespace, cert, key, ca, api_key)

    async def _secret(self, sj: ScheduledJob, name: str) -> dict[str, str]:
        try:
            return await self.kube.read_secret(sj.metadata.namespace, name)
        except ApiException as error:
            if is_not_found(error):
                raise SpecProblem(
                    "SecretNotFound",
                    f"Secret {name} named in spec.temporal does not exist in namespace "
                    f"{sj.metadata.namespace}",
                    SECRET_RETRY_SECONDS,
                ) from None
            raise Retry(f"reading Secret {name}: {api_error_message(error)}") from None

    async def _delete_schedule(self, sj: ScheduledJob) -> None:
        ref = sj.status.backend_ref
        identity = (
            ref.schedule_id
            if ref is not None and ref.schedule_id
            else schedule_id(
                self.config.schedule_id_prefix, sj.metadata.namespace, sj.metadata.name
            )
        )
        await self.temporal.delete(await self._connection(sj), identity)
        log.info("deleted Temporal schedule %s", identity)

    async def _set_finalizer(self, sj: ScheduledJob, *, present: bool) -> None:
        finalizers = [f for f in sj.metadata.finalizers if f != TEMPORAL_FINALIZER]
        if present:
            finalizers.append(TEMPORAL_FINALIZER)
        try:
            # resourceVersion makes this a compare-and-swap: a concurrent change to the
            # list fails with a conflict and the pass is retried, nothing is lost.
            await self.kube.patch_scheduledjob_metadata(
                sj.metadata.namespace,
                sj.metadata.name,
                {"finalizers": finalizers, "resourceVersion": sj.metadata.resource_version},
            )
        except ApiException as error:
            raise Retry(f"updating finalizers: {api_error_message(error)}") from None

    async def _finalize(self, sj: ScheduledJob, body: dict[str, Any], now: datetime) -> None:
        """The object is being deleted: take its Temporal schedule with it, then let go."""
        if TEMPORAL_FINALIZER not in sj.metadata.finalizers:
            return
        try:
            await self._delete_schedule(sj)
        except TemporalUnavailable as error:
            message = f"cannot delete the Temporal schedule yet, retrying: {error}"
            await self._report(sj, body, "BackendUnavailable", message, now)
            raise
        except SpecProblem as problem:
            await self._report(sj, body, problem.reason, problem.message, now)
            raise Retry(problem.message) from None
        await self._set_finalizer(sj, present=False)

    # ---- status ----------------------------------------------------------------------

    async def _announce_runs(
        self, sj: ScheduledJob, new_runs: list[MissedRun], now: datetime
    ) -> None:
        """One Warning Event per kind of newly judged run; repeats within the aggregation
        window raise its count, so a long outage is one Event, not a storm."""
        for reason in sorted({run.reason for run in new_runs}):
            runs = [r for r in new_runs if r.reason == reason]
            verb = "skipped" if reason == "OverlapSkipped" else "missed"
            times = ", ".join(st.iso(r.scheduled_time) for r in runs[:5])
            more = f" and {len(runs) - 5} more" if len(runs) > 5 else ""
            message = f"{len(runs)} run(s) {verb} ({reason}): scheduled for {times}{more}"
            await self.events.record(
                sj, "Warning", "RunSkipped" if verb == "skipped" else "RunMissed", message,
                now=now, aggregate_key=reason,
            )  # fmt: skip

    async def _announce(self, sj: ScheduledJob, new: ScheduledJobStatus, now: datetime) -> None:
        """Warning Events for what a healthy pass newly reports (once, not every pass)."""
        old_ready = st.find_condition(sj.status.conditions, st.READY)
        new_ready = st.find_condition(new.conditions, st.READY)
        old_message = old_ready.message if old_ready else ""
        if new_ready is None or new_ready.message == old_message:
            return
        if new_ready.reason == st.PAUSED_IN_TEMPORAL and (
            old_ready is None or old_ready.reason != st.PAUSED_IN_TEMPORAL
        ):
            await self.events.record(
                sj, "Warning", st.PAUSED_IN_TEMPORAL, new_ready.message, now=now
            )
        if _DAY_SEMANTICS in new_ready.message and _DAY_SEMANTICS not in old_message:
            await self.events.record(sj, "Warning", "CronSemanticsDiffer", _DAY_SEMANTICS, now=now)

    async def _write_status(
        self, sj: ScheduledJob, body: dict[str, Any], new: ScheduledJobStatus
    ) -> None:
        old_document = dict(body.get("status") or {})
        patch = st.merge_patch(old_document, st.status_document(new))
        if not patch:
            return
        try:
            await self.kube.patch_scheduledjob_status(
                sj.metadata.namespace, sj.metadata.name, patch
            )
        except ApiException as error:
            if is_not_found(error):
                return  # deleted meanwhile
            raise Retry(f"writing status: {api_error_message(error)}") from None

    async def _report(
        self, sj: ScheduledJob, body: dict[str, Any], reason: str, message: str, now: datetime
    ) -> None:
        """Ready=False with the reason, a Warning Event once, the backend left as it was."""
        new_status = st.not_ready(sj, reason, message, now=now)
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
        await self._report(minimal, body, "InvalidSpec", message, now)


def _secret_value(data: dict[str, str], key: str) -> bytes | None:
    raw = data.get(key)
    if raw is None:
        return None
    try:
        return base64.b64decode(raw)
    except (binascii.Error, ValueError):
        return None


def _lenient_status(body: dict[str, Any]) -> dict[str, Any]:
    try:
        return ScheduledJobStatus.model_validate(body.get("status") or {}).model_dump(by_alias=True)
    except ValidationError:
        return {}


def _seconds_until_next(status: ScheduledJobStatus, now: datetime) -> float | None:
    if not status.next_run_times:
        return None
    return (status.next_run_times[0] - now).total_seconds() + SLOT_SETTLE_SECONDS


_DAY_SEMANTICS = (
    "both day-of-month and day-of-week are restricted: backend kubernetes runs when EITHER "
    "matches, backend temporal only when BOTH match"
)
