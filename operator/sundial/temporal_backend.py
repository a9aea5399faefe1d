"""The temporal backend: keeps one Temporal Schedule in step, holds the finalizer that takes
the schedule along when the ScheduledJob goes, and judges the schedule's slots."""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from temporalio.client import ScheduleDescription, ScheduleState

from sundial import status as st
from sundial.backend import DAY_SEMANTICS_NOTE, Key, Outcome, SpecProblem
from sundial.config import OperatorConfig
from sundial.cronjob import ADOPT_ANNOTATION, adoption_requested
from sundial.events import EventRecorder
from sundial.kube import ApiException, KubeClient, api_error_message, is_not_found
from sundial.missed import (
    Judgement,
    TemporalEvidence,
    judge_temporal,
    start_accounting,
    timetable_hash,
)
from sundial.models import ScheduledJob, TemporalCounters
from sundial.schedule import Timetable, both_days_restricted, parse_duration
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
    SCHEDULEDJOB_UID_MEMO_KEY,
    SPEC_HASH_MEMO_KEY,
    SUSPEND_NOTE,
    SWITCH_NOTE,
    schedule_id,
    temporal_schedule,
)
from sundial.workqueue import Retry

log = logging.getLogger(__name__)

# Held while a Temporal schedule may exist, so deleting the ScheduledJob deletes it too.
TEMPORAL_FINALIZER = "sundial.dev/temporal-schedule"
# Secrets are not watched: a missing one is looked for again this often.
SECRET_RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class Prepared:
    """Temporal answered for this object: where, and what it holds now (None: nothing)."""

    connection: Connection
    schedule_id: str
    description: ScheduleDescription | None


@dataclass
class TemporalBackend:
    kube: KubeClient
    temporal: Temporal
    events: EventRecorder
    config: OperatorConfig
    default_connection: Connection

    async def prepare(self, sj: ScheduledJob) -> Prepared:
        """Everything that can fail before the kubernetes side is touched: the Secrets,
        the finalizer, and one answer from Temporal. A switch from kubernetes removes the
        CronJob only after this, so a bad Secret or an outage never leaves neither."""
        connection = await self._connection(sj)
        if TEMPORAL_FINALIZER not in sj.metadata.finalizers:
            await self._set_finalizer(sj, present=True)
        identity = schedule_id(self.config.schedule_id_prefix, *_key(sj))
        try:
            description = await self.temporal.describe(connection, identity)
        except TemporalRejected as error:  # e.g. no such Temporal namespace, no permission
            raise SpecProblem("TemporalRejected", str(error), retry_after=60.0) from None
        return Prepared(connection, identity, description)

    async def reconcile(
        self,
        sj: ScheduledJob,
        prepared: Prepared,
        table: Timetable,
        now: datetime,
        *,
        hold: bool = False,
    ) -> Outcome:
        """`hold`: a run the CronJob started is still going and the policy is Forbid, so
        a schedule made for the switch stays paused until it ends."""
        prepared = await self._owned_or_adopted(sj, prepared, now)
        try:
            description, spec_hash = await self._upsert(sj, prepared, now, hold=hold)
        except TemporalRejected as error:
            raise SpecProblem("TemporalRejected", str(error)) from None
        judgement = self._judge(sj, table, description, now)
        notes = [DAY_SEMANTICS_NOTE] if table.cron and both_days_restricted(table.cron) else []
        status = st.temporal_status(
            sj,
            description,
            judgement,
            namespace=prepared.connection.namespace,
            schedule_id=prepared.schedule_id,
            spec_hash=spec_hash,
            fingerprint=schedule_fingerprint(description),
            now=now,
            notes=notes,
        )
        return Outcome(status, self.config.temporal_resync_seconds, judgement.new_runs)

    async def stand_by(self, sj: ScheduledJob, prepared: Prepared, now: datetime) -> Prepared:
        """Switching from kubernetes: create the schedule paused, so Temporal's own verdict
        comes before the CronJob is retired; a refusal leaves the CronJob running."""
        prepared = await self._owned_or_adopted(sj, prepared, now)
        if prepared.description is not None:
            return prepared
        _, schedule, spec_hash = temporal_schedule(sj, self.config.schedule_id_prefix)
        schedule = replace(schedule, state=ScheduleState(paused=True, note=SWITCH_NOTE))
        try:
            await self.temporal.create(
                prepared.connection, prepared.schedule_id, schedule, _memo(sj, spec_hash)
            )
        except TemporalRejected as error:
            raise SpecProblem(
                "TemporalRejected",
                f"{error}; the CronJob keeps running until Temporal accepts the schedule",
            ) from None
        description = await self._describe(prepared.connection, prepared.schedule_id)
        return replace(prepared, description=description)

    async def _owned_or_adopted(
        self, sj: ScheduledJob, prepared: Prepared, now: datetime
    ) -> Prepared:
        """A schedule under this id that Sundial did not create for this object is never
        written over, unless adoption was asked for. Temporal keeps a schedule's memo
        from its creation, so adopting means deleting it and creating Sundial's."""
        identity = prepared.schedule_id
        if prepared.description is None or await _made_for(sj, prepared.description):
            return prepared
        if not adoption_requested(sj, identity):
            raise SpecProblem(
                "ScheduleExists",
                f"a Temporal schedule {identity} already exists in namespace "
                f"{prepared.connection.namespace} and was not created by this ScheduledJob; "
                "Sundial leaves it alone. Delete that schedule, or adopt it: `kubectl annotate "
                f"scheduledjob {sj.metadata.name} {ADOPT_ANNOTATION}={identity}` (it is then "
                "deleted and created again from this ScheduledJob; its counters start afresh)",
                retry_after=60.0,
            )
        await self.temporal.delete(prepared.connection, identity)
        await self.events.record(
            sj, "Normal", "Adopted",
            f"adopted the existing Temporal schedule {identity} ({ADOPT_ANNOTATION}): it was "
            "replaced by this ScheduledJob's", now=now,
        )  # fmt: skip
        return replace(prepared, description=None)

    async def retire(self, sj: ScheduledJob, now: datetime) -> None:
        """Switching to kubernetes: the schedule goes before the CronJob comes."""
        if TEMPORAL_FINALIZER not in sj.metadata.finalizers:
            return
        await self.finalize(sj)
        await self.events.record(
            sj, "Normal", "BackendSwitched",
            "switched to backend kubernetes: the Temporal schedule was deleted", now=now,
        )  # fmt: skip

    async def finalize(self, sj: ScheduledJob) -> None:
        """Delete the schedule, then let go of the object."""
        ref = sj.status.backend_ref
        identity = (
            ref.schedule_id
            if ref is not None and ref.schedule_id
            else schedule_id(self.config.schedule_id_prefix, *_key(sj))
        )
        connection = await self._connection(sj)
        description = await self.temporal.describe(connection, identity)
        if description is not None:
            if await _made_for(sj, description):
                await self.temporal.delete(connection, identity)
                log.info("deleted Temporal schedule %s", identity)
            else:
                log.info("left Temporal schedule %s alone: not made for %s/%s", identity,
                         *_key(sj))  # fmt: skip
        await self._set_finalizer(sj, present=False)

    async def _upsert(
        self, sj: ScheduledJob, prepared: Prepared, now: datetime, *, hold: bool = False
    ) -> tuple[ScheduleDescription, str]:
        """Create, update or leave the schedule; returns what the server then holds."""
        connection, identity = prepared.connection, prepared.schedule_id
        _, schedule, spec_hash = temporal_schedule(sj, self.config.schedule_id_prefix)
        description = prepared.description
        if description is None:
            await self.temporal.create(connection, identity, schedule, _memo(sj, spec_hash))
            log.info("created Temporal schedule %s", identity)
            description = await self._describe(connection, identity)
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
            description = await self._describe(connection, identity)
        # suspend pauses with Sundial's note, taking over a pause made by hand (so setting
        # suspend true and back to false clears it, as the PausedInTemporal advice says);
        # lifting it lifts only Sundial's own pause, never one by hand or pause-on-failure.
        state = description.schedule.state
        if sj.spec.suspend and not (state.paused and state.note == SUSPEND_NOTE):
            await self.temporal.set_paused(connection, identity, True, SUSPEND_NOTE)
            description = await self._describe(connection, identity)
        elif (
            not sj.spec.suspend
            and state.paused
            and (state.note == SUSPEND_NOTE or (state.note == SWITCH_NOTE and not hold))
        ):
            await self.temporal.set_paused(connection, identity, False, RESUME_NOTE)
            description = await self._describe(connection, identity)
        return description, spec_hash

    async def _describe(self, connection: Connection, identity: str) -> ScheduleDescription:
        description = await self.temporal.describe(connection, identity)
        if description is None:
            raise TemporalUnavailable(f"schedule {identity} vanished while being written")
        return description

    @staticmethod
    def _judge(
        sj: ScheduledJob, table: Timetable, description: ScheduleDescription, now: datetime
    ) -> Judgement:
        info = description.info
        counters = TemporalCounters(
            missed_catchup_window=info.num_actions_missed_catchup_window,
            overlap_skipped=info.num_actions_skipped_overlap,
            buffer_dropped=description.raw_description.info.buffer_dropped,
        )
        accounting = start_accounting(
            sj.status.run_accounting, timetable_hash(sj.spec), now, since=info.created_at,
            keep_counters=sj.status.backend == "temporal",
        )  # fmt: skip
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
        base = self.default_connection if override.address is None else Connection(address, "")
        cert, key, ca, api_key = base.client_cert, base.client_key, base.server_ca, base.api_key
        if override.tls_secret_ref is not None:
            name = override.tls_secret_ref.name
            data = await self._secret(sj, name)
            cert, key, ca = (_decoded(data, k) for k in ("tls.crt", "tls.key", "ca.crt"))
            if cert is None or key is None:
                raise SpecProblem(
                    "InvalidSecret", f"Secret {name} needs keys tls.crt and tls.key",
                    SECRET_RETRY_SECONDS,
                )  # fmt: skip
        if override.api_key_secret_ref is not None:
            ref = override.api_key_secret_ref
            value = _decoded(await self._secret(sj, ref.name), ref.key or "apiKey")
            if value is None:
                raise SpecProblem(
                    "InvalidSecret", f"Secret {ref.name} has no key {ref.key or 'apiKey'}",
                    SECRET_RETRY_SECONDS,
                )  # fmt: skip
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

    async def _set_finalizer(self, sj: ScheduledJob, *, present: bool) -> None:
        finalizers = [f for f in sj.metadata.finalizers if f != TEMPORAL_FINALIZER]
        if present:
            finalizers.append(TEMPORAL_FINALIZER)
        try:
            # resourceVersion makes this a compare-and-swap: a concurrent change to the
            # list fails with a conflict and the pass is retried, nothing is lost.
            await self.kube.patch_scheduledjob_metadata(
                *_key(sj),
                {"finalizers": finalizers, "resourceVersion": sj.metadata.resource_version},
            )
        except ApiException as error:
            raise Retry(f"updating finalizers: {api_error_message(error)}") from None


def _key(sj: ScheduledJob) -> Key:
    return (sj.metadata.namespace, sj.metadata.name)


def _decoded(data: dict[str, str], key: str) -> bytes | None:
    raw = data.get(key)
    if raw is None:
        return None
    try:
        return base64.b64decode(raw)
    except (binascii.Error, ValueError):
        return None


async def _made_for(sj: ScheduledJob, description: ScheduleDescription) -> bool:
    """Sundial created this schedule for this object: its memo names the object (and its
    uid; a schedule from before uids were written names only the object)."""
    try:
        memo = await description.memo()
    except Exception:  # a memo Sundial cannot decode is not Sundial's
        return False
    if memo.get(SCHEDULEDJOB_MEMO_KEY) != "/".join(_key(sj)):
        return False
    uid = memo.get(SCHEDULEDJOB_UID_MEMO_KEY)
    return uid is None or uid == sj.metadata.uid


def _memo(sj: ScheduledJob, spec_hash: str) -> dict[str, str]:
    """What marks a schedule as made by Sundial for this object (read by _made_for)."""
    return {
        SPEC_HASH_MEMO_KEY: spec_hash,
        SCHEDULEDJOB_MEMO_KEY: "/".join(_key(sj)),
        SCHEDULEDJOB_UID_MEMO_KEY: sj.metadata.uid,
    }
