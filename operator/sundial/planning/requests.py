"""Run-now and backfill requests: what the annotations ask for, which are still to do, and
the slots of a backfill. Pure; `now` is passed in.

A request is an annotation carrying an id (`sundial.dev/run-now: <id>`,
`sundial.dev/backfill: <id>;<start>;<end>`), written by a person or `kubectl sundial`.
Annotations, not spec: they do not move metadata.generation, so a request is not a spec
change for GitOps tools, and the one watch event it makes is one pass. Each id is acted on
once: status.requests keeps the ids handled, and each backend's action is idempotent per id
(deterministic Job names; a deterministic Temporal request id), so a pass that acted and
died before writing status acts again harmlessly.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from sundial.api.models import RequestKind, RequestStatus
from sundial.planning import schedule
from sundial.planning.schedule import Timetable

RUN_NOW_ANNOTATION = "sundial.dev/run-now"
BACKFILL_ANNOTATION = "sundial.dev/backfill"
MAX_BACKFILL_SLOTS = 100
REQUESTS_KEPT = 10
_EPSILON = timedelta(microseconds=1)
# A refusal quotes at most this much of what was written: its message must fit
# status.requests[].message (1,024 characters) whatever the annotation holds.
QUOTED_CHARACTERS = 64
ID_PATTERN = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Request:
    kind: RequestKind
    id: str
    start: datetime | None = None
    end: datetime | None = None

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.id}"


class RequestError(ValueError):
    """A request that cannot be acted on; the message says what to write instead."""


def quoted(raw: str) -> str:
    """`raw` for a message: quoted whole when short, else its start, an ellipsis and its
    length. At most QUOTED_CHARACTERS + 2 characters of quote, escapes included."""
    shown = raw[:QUOTED_CHARACTERS]
    while len(repr(shown)) > QUOTED_CHARACTERS + 2:
        shown = shown[:-1]
    if shown == raw:
        return repr(raw)
    return f"{shown!r}... ({len(raw)} characters)"


def parse_time(text: str) -> datetime:
    """A request's time: RFC 3339 with its zone (schedule.parse_time), never absent."""
    value = schedule.parse_time(text)
    if value is None:
        raise ValueError("no time given")
    return value


def parse_backfill(value: str) -> Request:
    """`<id>;<start>;<end>`, times in RFC 3339 with a zone, start before end."""
    parts = value.split(";")
    if len(parts) != 3:
        raise RequestError(
            f"{BACKFILL_ANNOTATION} must be <id>;<start>;<end> (RFC 3339 times), got "
            f"{quoted(value)}"
        )
    request_id = _checked_id(parts[0].strip(), BACKFILL_ANNOTATION)
    try:
        start, end = parse_time(parts[1]), parse_time(parts[2])
    except ValueError:
        raise RequestError(
            f"{BACKFILL_ANNOTATION}: start and end must be RFC 3339 times with a zone, such "
            f"as 2026-12-01T00:00:00Z; got {quoted(parts[1])} and {quoted(parts[2])}"
        ) from None
    if end <= start:
        raise RequestError(f"{BACKFILL_ANNOTATION}: the end ({end.isoformat()}) must be after "
                           f"the start ({start.isoformat()})")  # fmt: skip
    return Request("Backfill", request_id, start, end)


def _checked_id(request_id: str, annotation: str) -> str:
    if not ID_PATTERN.match(request_id):
        raise RequestError(
            f"{annotation}: the id {quoted(request_id)} must be 1-63 letters, digits, '.', '_' or "
            "'-', starting and ending with a letter or digit"
        )
    return request_id


def parse_run_now(value: str) -> Request:
    """`<id>`."""
    return Request("RunNow", _checked_id(value.strip(), RUN_NOW_ANNOTATION))


def run_now_slots(
    request: Request, entry: RequestStatus, table: Timetable, now: datetime
) -> list[datetime]:
    """A run now's one run is for the moment it was received."""
    return [entry.received_time.replace(microsecond=0)]


def backfill_range_slots(
    request: Request, entry: RequestStatus, table: Timetable, now: datetime
) -> list[datetime] | str:
    """A backfill's runs are the past slots in its range, or why it is refused."""
    if request.start is None or request.end is None:
        raise ValueError("a backfill request has a start and an end")
    if request.end > now:
        return (
            f"the backfill range must end in the past (it ends {request.end.isoformat()}): "
            "the schedule itself runs the slots still to come"
        )
    slots = backfill_slots(table, request.start, request.end)
    if len(slots) > MAX_BACKFILL_SLOTS:
        return over_cap_message(len(slots))
    return slots


def catch_up_slots(
    request: Request, entry: RequestStatus, table: Timetable, now: datetime
) -> list[datetime] | str:
    """A catch-up's runs are the slots of its range: Sundial chose them (planning/catchup.py),
    an unbroken run of missed or held slots, at most its cap."""
    if request.start is None or request.end is None:
        raise ValueError("a catch-up request has a start and an end")
    return backfill_slots(table, request.start, request.end)[:MAX_BACKFILL_SLOTS]


def _not_annotated(value: str) -> Request:
    raise RequestError("no annotation asks for a catch-up: spec.catchUp does")


@dataclass(frozen=True)
class RequestKindSpec:
    """One kind of day-2 request: a new verb is a RequestKind in the API model, an entry
    here, and each backend's hook for it (runs.REQUEST_HOOKS on temporal; a CronJob's
    backend makes one Job per slot whatever the kind)."""

    kind: RequestKind
    # None: Sundial makes the request itself (in status.requests), no annotation asks.
    annotation: str | None
    # The annotation's value -> the Request (RequestError if it cannot be read).
    parse: Callable[[str], Request]
    # The id part of a value that cannot be read, to record its refusal under.
    raw_id: Callable[[str], str]
    # The runs it asks for (their scheduled times), or why it is refused.
    slots: Callable[[Request, RequestStatus, Timetable, datetime], list[datetime] | str]
    # Its runs are named by their slots too (several runs); else by the request alone.
    named_by_slot: bool


REQUEST_KINDS: Final[Mapping[RequestKind, RequestKindSpec]] = {
    spec.kind: spec
    for spec in (
        RequestKindSpec("RunNow", RUN_NOW_ANNOTATION, parse_run_now, lambda raw: raw,
                        run_now_slots, named_by_slot=False),
        RequestKindSpec("Backfill", BACKFILL_ANNOTATION, parse_backfill,
                        lambda raw: raw.split(";")[0], backfill_range_slots, named_by_slot=True),
        RequestKindSpec("CatchUp", None, _not_annotated, lambda raw: raw, catch_up_slots,
                        named_by_slot=True),
    )
}  # fmt: skip


def requested(annotations: dict[str, str]) -> list[Request | tuple[RequestKind, str, str]]:
    """The requests the annotations make: a Request, or (kind, id, problem) for one that
    cannot be read (the id is the raw value's, so the refusal is recorded once)."""
    found: list[Request | tuple[RequestKind, str, str]] = []
    for spec in REQUEST_KINDS.values():
        if spec.annotation is None:
            continue
        value = annotations.get(spec.annotation)
        if value is None:
            continue
        try:
            found.append(spec.parse(value))
        except RequestError as error:
            found.append((spec.kind, _refusal_id(spec.raw_id(value)), str(error)))
    return found


def _refusal_id(raw: str) -> str:
    """An id to record a refusal under: the raw id if it is one, else a hash of it."""
    raw = raw.strip()
    if ID_PATTERN.match(raw):
        return raw
    return "invalid-" + hashlib.sha256(raw.encode()).hexdigest()[:12]


def find(handled: list[RequestStatus], kind: RequestKind, request_id: str) -> RequestStatus | None:
    return next((r for r in handled if r.kind == kind and r.id == request_id), None)


def is_settled(entry: RequestStatus | None) -> bool:
    return entry is not None and entry.outcome in ("Done", "Refused")


def backfill_slots(table: Timetable, start: datetime, end: datetime) -> list[datetime]:
    """The slots in [start, end] by the object's own schedule, at most one past the cap (so
    a range over it is known to be over it, without listing it all)."""
    slots: list[datetime] = []
    for slot in table.slots(start - _EPSILON):
        if slot > end or len(slots) > MAX_BACKFILL_SLOTS:
            break
        slots.append(slot)
    return slots


def over_cap_message(count: int) -> str:
    return (
        f"the range holds more than {MAX_BACKFILL_SLOTS} runs ({count}+ counted): split it "
        f"into requests of at most {MAX_BACKFILL_SLOTS} slots each"
    )


def standing(annotations: dict[str, str]) -> set[tuple[RequestKind, str]]:
    """The requests the annotations make now, readable or not, as (kind, id)."""
    return {
        (found.kind, found.id) if isinstance(found, Request) else (found[0], found[1])
        for found in requested(annotations)
    }


def with_new(handled: list[RequestStatus], made: list[RequestStatus]) -> list[RequestStatus]:
    """status.requests with the requests Sundial made this pass (catch-ups) added, those
    it already holds left as they are: a request decided again is the same one, run once."""
    known = {(entry.kind, entry.id) for entry in handled}
    fresh = [entry for entry in made if (entry.kind, entry.id) not in known]
    return [*handled, *fresh] if fresh else handled


def with_entries(
    handled: list[RequestStatus], entries: list[RequestStatus], annotations: dict[str, str]
) -> list[RequestStatus]:
    """status.requests with `entries` in place of the same requests, newest last, the oldest
    dropped beyond REQUESTS_KEPT. The entries of the requests the annotations still make
    are never dropped: the annotation stays on the object, and a request without its entry
    is a new one, run again. (There are at most two: one per annotation.)"""
    for entry in entries:
        rest = [r for r in handled if (r.kind, r.id) != (entry.kind, entry.id)]
        handled = [*rest, entry]
    keep = standing(annotations) | {
        (entry.kind, entry.id)
        for entry in handled
        if not annotated(entry) and not is_settled(entry)
    }
    excess = len(handled) - REQUESTS_KEPT
    kept: list[RequestStatus] = []
    for entry in handled:
        if excess > 0 and (entry.kind, entry.id) not in keep:
            excess -= 1
            continue
        kept.append(entry)
    return kept


def annotated(entry: RequestStatus) -> bool:
    """Asked for by an annotation (a person); else Sundial's own (a catch-up), whose entry
    is all there is of it until it is done."""
    return REQUEST_KINDS[entry.kind].annotation is not None


def job_suffix(uid: str, request: Request, slot: datetime) -> str:
    """The deterministic part of a requested Job's name, fixed by the request before
    anything is made: a repeated pass names the same Job, and its create finds it there.
    A run now's one run is named by the request alone: its slot is when a pass first saw
    it, and a pass that made the Job and could not record it would name a second one. A
    backfill's runs are named by their slots too. The object's uid keeps a new object of
    the same name, asked the same, from finding its predecessor's Jobs. 10 characters,
    as the CronJob controller's own suffix."""
    run = f"/{slot.isoformat()}" if REQUEST_KINDS[request.kind].named_by_slot else ""
    digest = hashlib.sha256(f"{uid}/{request.label}{run}".encode()).hexdigest()
    return "r" + digest[:9]


def temporal_request_id(uid: str, request: Request) -> str:
    """Temporal dedups a schedule patch by its request id: the same for every attempt."""
    return hashlib.sha256(f"{uid}/{request.label}".encode()).hexdigest()[:32]


def entry_for(request: Request, handled: list[RequestStatus], now: datetime) -> RequestStatus:
    """The request's status entry: as handled so far, or a new one received now."""
    return find(handled, request.kind, request.id) or RequestStatus(
        kind=request.kind, id=request.id, outcome="InProgress", received_time=now,
        start=request.start, end=request.end,
    )  # fmt: skip


def refused(kind: RequestKind, request_id: str, message: str, now: datetime) -> RequestStatus:
    return RequestStatus(kind=kind, id=request_id, outcome="Refused", message=message,
                         received_time=now)  # fmt: skip


def slots_for(
    request: Request, entry: RequestStatus, table: Timetable, now: datetime
) -> list[datetime] | str:
    """The runs the request asks for (their scheduled times), or why it is refused."""
    return REQUEST_KINDS[request.kind].slots(request, entry, table, now)


@dataclass(frozen=True)
class OpenRequest:
    """A request to act on in this pass: its entry so far and the runs it asks for."""

    request: Request
    entry: RequestStatus
    slots: list[datetime]


def open_requests(
    annotations: dict[str, str], handled: list[RequestStatus], table: Timetable, now: datetime
) -> tuple[list[RequestStatus], list[OpenRequest]]:
    """The requests still to act on, and the entries of those refused in this pass
    (unreadable, over the cap, ...); settled ids are left alone."""
    refusals: list[RequestStatus] = []
    pending: list[tuple[Request, RequestStatus]] = []
    for request in requested(annotations):
        if isinstance(request, tuple):
            kind, request_id, problem = request
            if find(handled, kind, request_id) is None:
                refusals.append(refused(kind, request_id, problem, now))
            continue
        pending.append((request, entry_for(request, handled, now)))
    # Sundial's own (catch-ups): their entries are all there is of them.
    pending += [(Request(entry.kind, entry.id, entry.start, entry.end), entry)
                for entry in handled if not annotated(entry)]  # fmt: skip
    to_act: list[OpenRequest] = []
    for request, entry in pending:
        if is_settled(entry):
            continue
        slots = slots_for(request, entry, table, now)
        if isinstance(slots, str):
            refusals.append(entry.model_copy(update={"outcome": "Refused", "message": slots}))
        else:
            to_act.append(OpenRequest(request, entry, slots))
    return refusals, to_act


def backfill_of(handled: list[RequestStatus], scheduled: datetime, started: datetime) -> str | None:
    """The backfill request a Temporal run belongs to (Temporal's actions do not say): one
    whose range holds its slot, started after the request was received."""
    for entry in handled:
        if (
            entry.kind in ("Backfill", "CatchUp")
            and entry.outcome == "Done"
            and entry.start is not None
            and entry.end is not None
            and entry.start <= scheduled <= entry.end
            and started >= entry.received_time
        ):
            return f"{entry.kind}/{entry.id}"
    return None
