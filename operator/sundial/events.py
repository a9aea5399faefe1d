"""Kubernetes Events about ScheduledJobs, aggregated so a repeating problem is one Event
with a growing count (as kubectl describe shows it), not a storm."""

from __future__ import annotations

import hashlib
import logging
import socket
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from sundial.api.models import GROUP, KIND, VERSION, ScheduledJob
from sundial.kube import KubeClient

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
COMPONENT = "sundial"
# Re-posting the same Event within this window only raises its count.
AGGREGATION_WINDOW = timedelta(minutes=10)
# ...and the count is written at most this often, so a hot problem is not a hot write:
# client-go's spam filter lets one Event through per object every 5 minutes. A minute
# schedule's repeated overlap skip is then two writes in ten minutes, not ten.
MIN_PATCH_INTERVAL = timedelta(minutes=5)
# Events remembered for aggregation before old ones are dropped.
MAX_TRACKED = 10_000


@dataclass(frozen=True)
class Posted:
    """An Event posted: its name, its count, when it was first posted and when its count
    was last written."""

    name: str
    count: int
    first: datetime
    last_written: datetime


def repeated(posted: Posted | None, now: datetime) -> tuple[Posted, bool] | None:
    """One more occurrence at `now` of the Event `posted`: None when it is to be posted
    anew (none posted, or its AGGREGATION_WINDOW is over); else the Event with its count
    raised, and whether that count is written now (MIN_PATCH_INTERVAL since the last
    write; until then it is only counted here)."""
    if posted is None or now - posted.first >= AGGREGATION_WINDOW:
        return None
    write = now - posted.last_written >= MIN_PATCH_INTERVAL
    return replace(posted, count=posted.count + 1,
                   last_written=now if write else posted.last_written), write  # fmt: skip


class EventRecorder:
    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._posted: dict[tuple[str, ...], Posted] = {}
        self._instance = socket.gethostname()

    async def record(
        self,
        sj: ScheduledJob,
        type_: EventType,
        reason: str,
        message: str,
        *,
        now: datetime | None = None,
        aggregate_key: str | None = None,
    ) -> None:
        """Post an Event; failures are logged, never raised (an Event is not worth a retry)."""
        now = now or datetime.now(UTC)
        meta = sj.metadata
        key = (meta.namespace, meta.name, meta.uid, type_, reason, aggregate_key or message)
        posted = self._posted.get(key)
        again = repeated(posted, now)
        try:
            if posted is not None and again is not None:
                raised, write = again
                # Counted at once; the write moves last_written only once it is done.
                self._posted[key] = replace(raised, last_written=posted.last_written)
                if write:
                    await self._kube.patch_event(meta.namespace, raised.name, raised.count, now)
                    self._posted[key] = raised
                return
            digest = hashlib.sha256(repr((key, now)).encode()).hexdigest()[:10]
            name = f"{meta.name}.{digest}"
            await self._kube.create_event(
                meta.namespace,
                {
                    "metadata": {"name": name, "namespace": meta.namespace},
                    "involvedObject": {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": KIND,
                        "name": meta.name,
                        "namespace": meta.namespace,
                        "uid": meta.uid,
                    },
                    "type": type_,
                    "reason": reason,
                    "message": message[:1024],
                    "count": 1,
                    "firstTimestamp": now.isoformat(),
                    "lastTimestamp": now.isoformat(),
                    "source": {"component": COMPONENT},
                    "reportingComponent": COMPONENT,
                    "reportingInstance": self._instance,
                },
            )
            self._posted[key] = Posted(name, 1, now, now)
            if len(self._posted) > MAX_TRACKED:
                self._prune(now)
        except Exception as error:
            log.warning(
                "could not post Event %s for %s/%s: %s", reason, meta.namespace, meta.name, error
            )

    def _prune(self, now: datetime) -> None:
        """Past its window an Event is never raised again, only posted anew: drop it."""
        for key in [k for k, p in self._posted.items() if now - p.first >= AGGREGATION_WINDOW]:
            del self._posted[key]

    def forget(self, namespace: str, name: str) -> None:
        for key in [k for k in self._posted if k[0] == namespace and k[1] == name]:
            del self._posted[key]
