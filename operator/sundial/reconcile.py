"""One reconcile pass for one ScheduledJob, in numbered steps.

Called by the work queue with a (namespace, name) key whenever the ScheduledJob or
anything it owns changes, and at the next slot. Reads come from the watch caches (no
GET per pass); writes happen only when the desired state differs from the observed one.
Returns the seconds until the pass should run again, or None.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from sundial import cronjob as cj
from sundial import status as st
from sundial.events import EventRecorder
from sundial.kube import ApiException, KubeClient, api_error_message, is_invalid
from sundial.models import ScheduledJob, ScheduledJobStatus
from sundial.schedule import ScheduleError, Timetable, both_days_restricted, timetable
from sundial.workqueue import Retry

log = logging.getLogger(__name__)

Key = tuple[str, str]
# A slot's status settles a little after the slot: the CronJob controller needs a moment.
SLOT_SETTLE_SECONDS = 5.0


class Cache(Protocol):
    """Read access to the watched objects (kopf indexes in production)."""

    def scheduledjob(self, key: Key) -> dict[str, Any] | None: ...

    def cronjob(self, key: Key) -> dict[str, Any] | None: ...


@dataclass
class Reconciler:
    kube: KubeClient
    cache: Cache
    events: EventRecorder
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # (spec hash, generation) of the CronJob as last written, per key: the apiserver
    # canonicalises some values (quantities), so a pass compares against what it wrote.
    _written: dict[Key, tuple[str, int]] = field(default_factory=dict)

    async def __call__(self, key: Key) -> float | None:
        # 1. Load the ScheduledJob from the watch cache; gone means nothing to do
        #    (the garbage collector removes the CronJob through its owner reference).
        body = self.cache.scheduledjob(key)
        if body is None:
            self._written.pop(key, None)
            self.events.forget(*key)
            return None
        now = self.clock()

        # 2. Parse and validate what the CRD schema could not.
        try:
            sj = ScheduledJob.model_validate(body)
        except ValidationError as error:
            await self._report_unparseable(body, error, now)
            return None
        try:
            table = timetable(sj.spec)
        except ScheduleError as error:
            await self._report_invalid(sj, body, error.reason, error.message, now)
            return None

        # 3. Bring the backend in step, then 4. rebuild status from what it reports.
        result = await self._reconcile_kubernetes(key, sj, body, table, now)
        if result is None:
            return None
        new_status, requeue_after = result
        await self._write_status(sj, body, new_status)
        return requeue_after

    async def _reconcile_kubernetes(
        self, key: Key, sj: ScheduledJob, body: dict[str, Any], table: Timetable, now: datetime
    ) -> tuple[ScheduledJobStatus, float | None] | None:
        desired = cj.cronjob_manifest(sj)
        live = self.cache.cronjob(key)
        if live is None or not self._in_step(key, desired, live):
            try:
                live = await self.kube.apply_cronjob(desired)
            except ApiException as error:
                if not is_invalid(error):
                    raise Retry(f"writing the CronJob: {api_error_message(error)}") from error
                message = f"the apiserver rejected the CronJob: {api_error_message(error)}"
                await self._report_invalid(sj, body, "InvalidJobTemplate", message, now)
                return None
            written_hash = desired["metadata"]["annotations"][cj.SPEC_HASH_ANNOTATION]
            self._written[key] = (written_hash, live["metadata"].get("generation", 0))
            log.info("wrote CronJob %s/%s", *key)
        notes = []
        if sj.spec.schedule and table.cron and both_days_restricted(table.cron):
            notes.append(_DAY_SEMANTICS_NOTE)
        new_status = st.kubernetes_status(sj, live, table, now=now, notes=notes)
        return new_status, _seconds_until_next(new_status, now)

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

    async def _write_status(
        self, sj: ScheduledJob, body: dict[str, Any], new: ScheduledJobStatus
    ) -> None:
        old_document = dict(body.get("status") or {})
        patch = st.merge_patch(old_document, st.status_document(new))
        if not patch:
            return
        await self.kube.patch_scheduledjob_status(sj.metadata.namespace, sj.metadata.name, patch)

    async def _report_invalid(
        self, sj: ScheduledJob, body: dict[str, Any], reason: str, message: str, now: datetime
    ) -> None:
        """A problem only a spec change can fix: say so once, leave the backend as it was,
        and do not retry (the spec change itself triggers the next pass)."""
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
        log.warning(
            "%s/%s: %s", body["metadata"].get("namespace"), body["metadata"]["name"], message
        )
        # Keep the rest of the status; only the Ready condition can be said with confidence.
        minimal = ScheduledJob.model_validate(
            {
                "metadata": body["metadata"],
                "spec": {"schedule": "@daily"},
                "status": _lenient_status(body),
            }
        )
        await self._report_invalid(minimal, body, "InvalidSpec", message, now)


def _lenient_status(body: dict[str, Any]) -> dict[str, Any]:
    try:
        return ScheduledJobStatus.model_validate(body.get("status") or {}).model_dump(by_alias=True)
    except ValidationError:
        return {}


def _seconds_until_next(status: ScheduledJobStatus, now: datetime) -> float | None:
    if not status.next_run_times:
        return None
    return (status.next_run_times[0] - now).total_seconds() + SLOT_SETTLE_SECONDS


_DAY_SEMANTICS_NOTE = (
    "both day-of-month and day-of-week are restricted: the CronJob runs when EITHER matches, "
    "backend temporal would run only when BOTH match"
)
