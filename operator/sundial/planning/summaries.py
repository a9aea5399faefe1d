"""What a run said it did: the summary its container left in its termination message
(`terminationMessagePath`, /dev/termination-log by default), read from the ended Pod the
operator already watches, so it costs no request. Pure.

The sundial-cron library writes one JSON object there (docs/cron-library.md): `message`,
a few `counts`, and its own fields (result, slot, ...), the whole capped at Kubernetes' 4096
bytes. Any other termination message is shown as written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sundial.planning.runs import MESSAGE_LIMIT, pod_span

# A summary is cut in the cache to what status.recentRuns[].message holds (a Pod's message
# may be 4 KB).
SUMMARY_LIMIT = MESSAGE_LIMIT


@dataclass(frozen=True)
class PodsEnded:
    """When a Job's ended Pods ran, and the summary its last one left (None: none)."""

    start: datetime
    end: datetime
    summary: str | None = None


def summary_text(raw: str) -> str | None:
    """The one line a termination message shows as a run's message: the library's JSON as
    `<message> (<name>=<count>, ...)`, anything else as written, whitespace folded."""
    text = raw.strip()
    if not text:
        return None
    try:
        document: Any = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict):
        message = str(document.get("message") or "").strip()
        counts = document.get("counts")
        if isinstance(counts, dict) and counts:
            shown = ", ".join(f"{name}={value}" for name, value in counts.items())
            message = f"{message} ({shown})".strip()
        text = message
    folded = " ".join(text.split())
    return folded[:SUMMARY_LIMIT] or None


def pod_summary(pod: dict[str, Any]) -> str | None:
    """The summary of an ended Pod: the first container's termination message that says
    anything (a Pod of `job.cronJob` has one container; a template's main one is first)."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        summary = summary_text(str(terminated.get("message") or ""))
        if summary is not None:
            return summary
    return None


def pod_ended(pod: dict[str, Any]) -> PodsEnded | None:
    """One ended Pod: its start, its last container's finish and its summary; None when
    it never ran (no start) or nothing in it finished."""
    span = pod_span([pod])
    return PodsEnded(*span, pod_summary(pod)) if span is not None else None


def pods_ended(pods: list[PodsEnded]) -> PodsEnded | None:
    """A Job's ended Pods together: the first start, the last finish, and the summary of
    the Pod that finished last (a retried run's last attempt speaks for it)."""
    if not pods:
        return None
    last = max(pods, key=lambda pod: pod.end)
    return PodsEnded(min(pod.start for pod in pods), last.end, last.summary)
