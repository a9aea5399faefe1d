"""What the dashboard shows of a ScheduledJob: its row (the list's slot cells, upcoming
runs, pause and suspend marks, its state) and its detail (every cell's run or missed slot,
the conditions, the requests), and the filters a page asks for.

Pure: a ScheduledJob as the API server returns it in, JSON-ready dicts out. The cells are
timeline.py's, so the terminal and the page classify a slot the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from pydantic import ValidationError

from sundial import timeline
from sundial.api import reasons
from sundial.api.status_models import MissedRun, RecentRun, ScheduledJobStatus
from sundial.planning.schedule import ScheduleError, parse_duration
from sundial.planning.selector import SelectorError, ShareSelector, parse_selector

State = Literal["failing", "missed", "notready", "running", "suspended", "paused", "ok", "new"]
# The filter's choices and the order the legend lists them; each with its words.
STATES: Final[tuple[tuple[State, str], ...]] = (
    ("failing", "failing (RunsFailing, or the last run failed)"),
    ("missed", "missed runs (RunsMissed)"),
    ("notready", "not Ready"),
    ("running", "running now"),
    ("suspended", "suspended (spec.suspend)"),
    ("paused", "paused by Sundial or in Temporal"),
    ("ok", "ok"),
    ("new", "no runs yet"),
)
CELL_LIMIT: Final = 60  # every run (50 at most) and missed slot (10) the status keeps
NEXT_LIMIT: Final = 5
FAILED_RESULTS: Final = frozenset({"Failed", "TimedOut"})
EPOCH: Final = datetime.fromtimestamp(0, UTC)


class FilterError(ValueError):
    pass


def row(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The list's row: compact cells `[kind, glyph, scheduled (epoch s), duration s or
    None, late]`, oldest first, the next runs (epoch s), the marks, the state."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    out: dict[str, Any] = {
        "key": f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        "ns": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "rv": meta.get("resourceVersion", ""),
        "labels": dict(meta.get("labels") or {}),
        "backend": str(spec.get("backend") or "kubernetes"),
        "schedule": _schedule(spec),
        "zone": str(spec.get("timeZone") or "UTC"),
        "maxRun": _max_run(spec),
    }
    status, error = _status(obj)
    if status is None:
        out.update(state="notready", cells=[], next=[], marks=[], error=error, ready=None,
                   lastResult=None, failures=0, missed=0, skipped=0)  # fmt: skip
        return out
    ready = _condition(status, reasons.READY)
    out.update(
        state=state(spec, status),
        cells=[_compact(cell) for cell in _cells(status)],
        next=[_epoch(moment) for moment in status.next_run_times[:NEXT_LIMIT]],
        marks=marks(spec, status),
        error=None,
        ready=ready,
        lastResult=status.last_result,
        failures=status.consecutive_failures or 0,
        missed=status.missed_runs or 0,
        skipped=status.skipped_runs or 0,
    )
    return out


def detail(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The detail view: the row, each cell in full (the hover's words, in the same order
    as the row's cells), every condition, the backend's object, the requests."""
    out = row(obj)
    status, _ = _status(obj)
    if status is None:
        out.update(cells_detail=[], conditions=[], backendRef=None, requests=[], nextAll=[])
        return out
    ref = status.backend_ref
    out.update(
        cells_detail=[_full(cell) for cell in _cells(status)],
        conditions=[
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "since": _epoch(c.last_transition_time),
            }
            for c in status.conditions
        ],
        backendRef=ref.model_dump(mode="json", by_alias=True, exclude_none=True) if ref else None,
        requests=[
            r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in status.requests
        ],
        nextAll=[_epoch(moment) for moment in status.next_run_times],
        unseen=status.unseen_runs or 0,
    )
    return out


def state(spec: Mapping[str, Any], status: ScheduledJobStatus) -> State:
    """One word for the filter and the row's badge, the most pressing first: suspended and
    paused (nothing runs), failing, not Ready, missed, running, ok, no runs yet."""
    if spec.get("suspend") or (status.pause and status.pause.reason == "MaintenanceWindow"):
        return "suspended"
    ready = _condition(status, reasons.READY)
    if ready is not None and ready["reason"] in timeline.PAUSED_BY_SUNDIAL:
        return "paused"
    failing = _condition(status, reasons.RUNS_FAILING)
    if (failing is not None and failing["status"] == "True") or (
        status.last_result in FAILED_RESULTS and (status.consecutive_failures or 0) > 0
    ):
        return "failing"
    if ready is not None and ready["status"] == "False":
        return "notready"
    missed = _condition(status, reasons.RUNS_MISSED)
    if missed is not None and missed["status"] == "True":
        return "missed"
    if (status.active or 0) > 0 or any(run.result == "Running" for run in status.recent_runs):
        return "running"
    if status.recent_runs or status.recent_missed_runs:
        return "ok"
    return "new"


def marks(spec: Mapping[str, Any], status: ScheduledJobStatus) -> list[dict[str, Any]]:
    """Why nothing is scheduled now: `suspended` (spec.suspend, with its note) or `paused`
    (by Sundial: Temporal, the connection), since the Ready condition's change."""
    note = timeline.pause_note(
        status.conditions, bool(spec.get("suspend")), spec.get("suspendNote"), status.pause
    )
    if note is None:
        return []
    ready = _condition(status, reasons.READY)
    window = status.pause is not None and status.pause.reason == "MaintenanceWindow"
    return [{
        "kind": "suspended" if spec.get("suspend") or window else "paused",
        "note": note,
        "since": ready["since"] if ready is not None else None,
    }]  # fmt: skip


# ---- filters ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Filter:
    """What a page asks to see; every part empty matches everything."""

    namespace: str = ""
    selector: ShareSelector | None = None
    backend: str = ""
    state: str = ""
    search: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filter:
        """From the page's query: ns, label (k=v, k!=v, k, !k; commas: and), backend,
        state, q (a part of the name, any case)."""
        label = query.get("label", "").strip()
        try:
            selector = parse_selector(label) if label else None
        except SelectorError as error:
            raise FilterError(str(error)) from None
        wanted = query.get("state", "").strip()
        if wanted and wanted not in {name for name, _ in STATES}:
            raise FilterError(f"state {wanted!r}: one of {', '.join(n for n, _ in STATES)}")
        return cls(
            namespace=query.get("ns", "").strip(),
            selector=selector,
            backend=query.get("backend", "").strip(),
            state=wanted,
            search=query.get("q", "").strip().lower(),
        )

    def matches(self, shown: Mapping[str, Any]) -> bool:
        return (
            (not self.namespace or shown["ns"] == self.namespace)
            and (not self.backend or shown["backend"] == self.backend)
            and (not self.state or shown["state"] == self.state)
            and (not self.search or self.search in shown["name"].lower())
            and (self.selector is None or self.selector.matches(shown["labels"]))
        )


def facets(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """How many rows each namespace, backend and state has: the filters' choices."""
    namespaces: Counter[str] = Counter()
    backends: Counter[str] = Counter()
    states: Counter[str] = Counter()
    for shown in rows:
        namespaces[shown["ns"]] += 1
        backends[shown["backend"]] += 1
        states[shown["state"]] += 1
    return {
        "ns": dict(sorted(namespaces.items())),
        "backend": dict(sorted(backends.items())),
        "state": {name: states[name] for name, _ in STATES if states[name]},
    }


# ---- helpers ------------------------------------------------------------------------------


def _status(obj: Mapping[str, Any]) -> tuple[ScheduledJobStatus | None, str | None]:
    try:
        return ScheduledJobStatus.model_validate(obj.get("status") or {}), None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return None, f"status unreadable: {where}: {first['msg']}"


def _cells(status: ScheduledJobStatus) -> list[timeline.Cell]:
    # No pause: the page draws it as a mark, not a cell (and `now` dates only that cell).
    return timeline.slots(status, EPOCH, None, CELL_LIMIT)


def _compact(cell: timeline.Cell) -> list[Any]:
    run = cell.source if isinstance(cell.source, RecentRun) else None
    return [cell.kind, cell.glyph, _epoch(cell.at), run.duration_seconds if run else None,
            bool(run and run.late)]  # fmt: skip


def _full(cell: timeline.Cell) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": cell.kind, "glyph": cell.glyph, "words": cell.detail,
        "scheduled": _epoch(cell.at),
    }  # fmt: skip
    if isinstance(cell.source, RecentRun):
        run = cell.source
        out.update(
            start=_epoch(run.start_time) if run.start_time else None,
            completion=_epoch(run.completion_time) if run.completion_time else None,
            duration=run.duration_seconds, delay=run.start_delay_seconds, late=bool(run.late),
            result=run.result, reason=run.reason, message=run.message,
            requested=run.requested, job=run.job_name, workflowId=run.workflow_id,
            runId=run.run_id,
        )  # fmt: skip
    elif isinstance(cell.source, MissedRun):
        out.update(reason=cell.source.reason, approximate=bool(cell.source.approximate))
    return out


def _condition(status: ScheduledJobStatus, kind: str) -> dict[str, Any] | None:
    found = next((c for c in status.conditions if c.type == kind), None)
    if found is None:
        return None
    return {"status": found.status, "reason": found.reason, "message": found.message,
            "since": _epoch(found.last_transition_time)}  # fmt: skip


def _schedule(spec: Mapping[str, Any]) -> str:
    if spec.get("schedule"):
        return str(spec["schedule"])
    every = (spec.get("interval") or {}).get("every")
    return f"every {every}" if every else "-"


def _max_run(spec: Mapping[str, Any]) -> float | None:
    text = (spec.get("monitoring") or {}).get("maxRunDuration")
    if not text:
        return None
    try:
        limit: timedelta = parse_duration(str(text))
    except ScheduleError:
        return None
    return limit.total_seconds() or None


def _epoch(moment: datetime) -> float:
    return moment.timestamp()
