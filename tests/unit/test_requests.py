"""Run-now and backfill requests (requests.py): reading the annotations, which are still
to do, the slots of a backfill and its cap. Pure: `now` is passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sundial.api.models import RequestStatus, ScheduledJobSpec, ScheduledJobStatus
from sundial.planning import requests as rq
from sundial.planning.schedule import timetable

NOW = datetime(2026, 12, 3, 12, 30, tzinfo=UTC)
HOURLY = timetable(ScheduledJobSpec.model_validate({"schedule": "0 * * * *",
                                                    "job": {"image": "busybox"}}))  # fmt: skip


def done(kind: str, request_id: str) -> RequestStatus:
    return RequestStatus.model_validate(
        {"kind": kind, "id": request_id, "outcome": "Done", "receivedTime": NOW}
    )


def test_the_annotations_make_requests_and_bad_ones_are_refused_once() -> None:
    backfill = "b1;2026-12-01T00:00:00Z;2026-12-01T05:00:00Z"
    found = rq.requested({rq.RUN_NOW_ANNOTATION: "r1", rq.BACKFILL_ANNOTATION: backfill})
    assert found[0] == rq.Request("RunNow", "r1")
    assert found[1] == rq.Request(
        "Backfill", "b1", datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 1, 5, tzinfo=UTC)
    )
    for value, says in [
        ("b2;2026-12-01T05:00:00Z;2026-12-01T00:00:00Z", "must be after"),
        ("b3;yesterday;today", "RFC 3339"),
        ("b4;2026-12-01T00:00:00", "<id>;<start>;<end>"),
        ("b5;2026-12-01T00:00:00;2026-12-02T00:00:00", "with a zone"),
        ("not valid!;2026-12-01T00:00:00Z;2026-12-02T00:00:00Z", "must be 1-63"),
    ]:
        (problem,) = rq.requested({rq.BACKFILL_ANNOTATION: value})
        assert isinstance(problem, tuple), value
        assert says in problem[2], (value, problem)
    # An unreadable id is recorded under a stable stand-in, so it is refused only once.
    a = rq.requested({rq.RUN_NOW_ANNOTATION: "no good"})[0]
    b = rq.requested({rq.RUN_NOW_ANNOTATION: "no good"})[0]
    assert isinstance(a, tuple)
    assert isinstance(b, tuple)
    assert a[1] == b[1]


def test_settled_ids_are_never_acted_on_again() -> None:
    annotations = {rq.RUN_NOW_ANNOTATION: "r1"}
    refusals, to_act = rq.open_requests(annotations, [], HOURLY, NOW)
    assert refusals == []
    assert [o.request.id for o in to_act] == ["r1"]
    assert to_act[0].slots == [NOW]
    _, to_act = rq.open_requests(annotations, [done("RunNow", "r1")], HOURLY, NOW)
    assert to_act == []
    # A refusal is recorded once: the next pass sees it settled.
    bad = {rq.RUN_NOW_ANNOTATION: "no good"}
    refusals, _ = rq.open_requests(bad, [], HOURLY, NOW)
    assert [r.outcome for r in refusals] == ["Refused"]
    refusals, _ = rq.open_requests(bad, refusals, HOURLY, NOW)
    assert refusals == []


def test_a_backfill_asks_for_the_slots_of_its_range_within_the_cap() -> None:
    start, end = NOW - timedelta(hours=5), NOW
    request = rq.Request("Backfill", "b", start, end)
    entry = rq.entry_for(request, [], NOW)
    slots = rq.slots_for(request, entry, HOURLY, NOW)
    assert slots == [datetime(2026, 12, 3, h, tzinfo=UTC) for h in range(8, 13)]
    # A slot exactly at the start is in the range.
    on_the_hour = rq.Request("Backfill", "c", datetime(2026, 12, 3, 8, tzinfo=UTC), end)
    assert rq.slots_for(on_the_hour, entry, HOURLY, NOW)[0] == datetime(2026, 12, 3, 8, tzinfo=UTC)
    huge = rq.Request("Backfill", "h", NOW - timedelta(hours=101), NOW)
    message = rq.slots_for(huge, entry, HOURLY, NOW)
    assert isinstance(message, str)
    assert "split it" in message
    exactly = rq.Request("Backfill", "x", NOW - timedelta(hours=99, minutes=30), NOW)
    assert len(rq.slots_for(exactly, entry, HOURLY, NOW)) == rq.MAX_BACKFILL_SLOTS
    future = rq.Request("Backfill", "f", start, NOW + timedelta(hours=1))
    assert "end in the past" in str(rq.slots_for(future, entry, HOURLY, NOW))


def test_names_and_temporal_request_ids_are_the_same_for_the_same_request() -> None:
    request = rq.Request("Backfill", "b", NOW, NOW)
    assert rq.job_suffix("uid", request, NOW) == rq.job_suffix(
        "uid", rq.Request("Backfill", "b", NOW, NOW), NOW
    )
    later = NOW + timedelta(hours=1)
    assert rq.job_suffix("uid", request, NOW) != rq.job_suffix("uid", request, later)
    assert rq.job_suffix("uid", request, NOW) != rq.job_suffix("uid2", request, NOW)
    run_now = rq.Request("RunNow", "b")
    assert rq.job_suffix("uid", run_now, NOW) != rq.job_suffix("uid2", run_now, NOW)
    assert rq.job_suffix("uid", run_now, NOW) != rq.job_suffix("uid", request, NOW)
    assert len(rq.job_suffix("uid", request, NOW)) == 10
    assert rq.temporal_request_id("uid", request) != rq.temporal_request_id("uid2", request)


def test_the_list_keeps_the_latest_ten_with_one_entry_per_request() -> None:
    handled: list[RequestStatus] = []
    for index in range(12):
        handled = rq.with_entries(handled, [done("RunNow", f"r{index}")], {})
    handled = rq.with_entries(handled, [done("RunNow", "r11")], {})
    assert [e.id for e in handled] == [f"r{i}" for i in range(2, 12)]


@pytest.mark.parametrize("started_late", [False, True])
def test_a_temporal_run_belongs_to_the_backfill_whose_range_holds_it(started_late: bool) -> None:
    entry = done("Backfill", "b").model_copy(
        update={"start": NOW - timedelta(hours=3), "end": NOW - timedelta(hours=1)}
    )
    started = NOW + timedelta(minutes=1) if started_late else NOW - timedelta(minutes=1)
    label = rq.backfill_of([entry], NOW - timedelta(hours=2), started)
    assert label == ("Backfill/b" if started_late else None)


def test_a_standing_request_stays_settled_whatever_came_after_it() -> None:
    # A backfill done and left annotated, then more run-now requests than the list keeps.
    backfill = "b1;2026-12-01T00:00:00Z;2026-12-01T05:00:00Z"
    handled = [done("Backfill", "b1")]
    annotations = {rq.BACKFILL_ANNOTATION: backfill}
    for index in range(rq.REQUESTS_KEPT + 1):
        annotations = {**annotations, rq.RUN_NOW_ANNOTATION: f"r{index}"}
        handled = rq.with_entries(handled, [done("RunNow", f"r{index}")], annotations)
    _, to_act = rq.open_requests(annotations, handled, HOURLY, NOW)
    assert [o.request.label for o in to_act] == []
    # The list still fits status (the CRD's maxItems), the oldest run-now requests dropped.
    assert ScheduledJobStatus.model_validate({"requests": handled}).requests == handled
    assert ("RunNow", "r0") not in {(e.kind, e.id) for e in handled}


LONG = 1100  # over status.requests[].message's 1,024
SHORT = 300  # a refusal says what to write, it does not echo what was written


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (rq.RUN_NOW_ANNOTATION, "x" * LONG),
        (rq.RUN_NOW_ANNOTATION, "bad id " * (LONG // 7)),
        (rq.BACKFILL_ANNOTATION, "b;" + "x" * LONG),
        (rq.BACKFILL_ANNOTATION, "b;" + "x" * LONG + ";" + "y" * LONG),
        (rq.BACKFILL_ANNOTATION, "x" * LONG + ";2026-12-01T00:00:00Z;2026-12-01T05:00:00Z"),
        (rq.BACKFILL_ANNOTATION, "b;" + " " * LONG + "2026-12-01T05:00:00Z;2026-12-01T00:00:00Z"),
        (rq.BACKFILL_ANNOTATION, "b;" + "\x00" * LONG + ";2026-12-01T00:00:00Z"),
    ],
)
def test_a_long_annotation_is_refused_with_a_message_that_fits_status(
    annotation: str, value: str
) -> None:
    refusals, to_act = rq.open_requests({annotation: value}, [], HOURLY, NOW)
    assert to_act == []
    (refusal,) = refusals
    # What the pass does with it: the status as the CRD's schema takes it.
    status = ScheduledJobStatus.model_validate({"requests": [refusal.model_dump(by_alias=True)]})
    assert status.requests[0].outcome == "Refused"
    assert annotation in refusal.message
    assert len(refusal.message) <= SHORT


# Any text, up to a few thousand characters (a piece repeated: hypothesis keeps plain
# text short), and values shaped like a backfill, so its later checks are reached too.
_TEXT = st.builds(lambda piece, times: piece * times, st.text(max_size=20), st.integers(1, 200))
_TIME = st.one_of(st.just("2026-12-01T00:00:00Z"), st.just(" 2026-12-09T00:00:00+01:00"), _TEXT)
_VALUES = st.one_of(_TEXT, st.builds(lambda i, a, b: f"{i};{a};{b}", _TEXT, _TIME, _TIME))


@settings(max_examples=300, deadline=None)
@given(annotation=st.sampled_from([rq.RUN_NOW_ANNOTATION, rq.BACKFILL_ANNOTATION]),
       value=_VALUES)  # fmt: skip
def test_every_refusal_fits_status_whatever_the_annotation_holds(
    annotation: str, value: str
) -> None:
    refusals, to_act = rq.open_requests({annotation: value}, [], HOURLY, NOW)
    for refusal in refusals:
        ScheduledJobStatus.model_validate({"requests": [refusal.model_dump(by_alias=True)]})
        assert len(refusal.message) <= SHORT, refusal.message
    assert len(refusals) + len(to_act) == 1


def test_a_quote_shows_a_short_value_whole_and_a_long_one_by_its_start_and_length() -> None:
    assert rq.quoted("no good") == repr("no good")
    long = "abc" * 400
    shown = rq.quoted(long)
    assert shown.startswith(repr(long[:10])[:-1])
    assert f"{len(long)} characters" in shown
    assert len(rq.quoted("\x00" * 500)) < 100


def test_a_run_now_names_its_job_by_the_request_not_by_when_a_pass_saw_it() -> None:
    # A pass that made the Job and could not record it is followed by one with a later now.
    annotations = {rq.RUN_NOW_ANNOTATION: "r1"}
    names = set()
    for now in (NOW, NOW + timedelta(minutes=3)):
        _, (open_request,) = rq.open_requests(annotations, [], HOURLY, now)
        names.add(rq.job_suffix("uid", open_request.request, open_request.slots[0]))
    assert len(names) == 1
