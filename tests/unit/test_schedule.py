"""Next-run maths with each backend's semantics, `now` passed in."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from sundial.api.models import IntervalSpec, ScheduledJobSpec
from sundial.planning.schedule import (
    MACROS,
    ScheduleError,
    _parsed,
    _shared,
    both_days_restricted,
    cron_slots,
    interval_slots,
    normalize_cron,
    parse_duration,
    timetable,
)

BERLIN = ZoneInfo("Europe/Berlin")


def spec(**fields: object) -> ScheduledJobSpec:
    fields.setdefault("schedule", "* * * * *")
    return ScheduledJobSpec.model_validate(fields)


def local(times: list[datetime], zone: ZoneInfo = BERLIN) -> list[str]:
    return [t.astimezone(zone).isoformat() for t in times]


def test_dst_gap_time_is_skipped_like_the_cronjob_controller() -> None:
    """02:30 does not exist in Berlin on 2026-03-29: that day has no run at all."""
    table = timetable(spec(schedule="30 2 * * *", timeZone="Europe/Berlin"))
    runs = table.next_runs(datetime(2026, 3, 27, 12, tzinfo=UTC), 3)
    assert local(runs) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_repeated_hour_fires_twice_in_order() -> None:
    """02:30 happens twice in Berlin on 2026-10-25 (CEST, then CET)."""
    table = timetable(spec(schedule="30 2 * * *", timeZone="Europe/Berlin"))
    runs = table.next_runs(datetime(2026, 10, 24, 12, tzinfo=UTC), 3)
    assert local(runs) == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-26T02:30:00+01:00",
    ]


def test_frequent_schedule_through_the_repeated_hour_stays_sorted() -> None:
    table = timetable(spec(schedule="*/20 * * * *", timeZone="Europe/Berlin"))
    runs = table.next_runs(datetime(2026, 10, 24, 23, 50, tzinfo=UTC), 7)
    assert runs == sorted(runs)
    assert [t.strftime("%H:%M") for t in runs] == [
        "00:00", "00:20", "00:40", "01:00", "01:20", "01:40", "02:00",
    ]  # fmt: skip


def test_start_inside_the_repeated_hour_sees_the_second_occurrence() -> None:
    table = timetable(spec(schedule="45 2 * * *", timeZone="Europe/Berlin"))
    # 00:50Z is 02:50 CEST: the first 02:45 has passed, the second (CET) has not.
    runs = table.next_runs(datetime(2026, 10, 25, 0, 50, tzinfo=UTC), 1)
    assert local(runs) == ["2026-10-25T02:45:00+01:00"]


def test_day_of_month_and_week_are_or_on_kubernetes_and_and_on_temporal() -> None:
    now = datetime(2026, 3, 1, tzinfo=UTC)
    cron = "0 0 1 * 1"  # the 1st of the month, Mondays
    kubernetes = timetable(spec(schedule=cron)).next_runs(now, 3)
    temporal = timetable(
        spec(schedule=cron, backend="temporal", workflow={"type": "w", "taskQueue": "q"})
    ).next_runs(now, 3)
    assert [t.date().isoformat() for t in kubernetes] == ["2026-03-02", "2026-03-09", "2026-03-16"]
    assert [t.date().isoformat() for t in temporal] == ["2026-06-01", "2027-02-01", "2027-03-01"]
    assert both_days_restricted(cron)
    assert not both_days_restricted("0 0 1 * *")
    assert not both_days_restricted("0 0 ? * 1")


@pytest.mark.parametrize(("macro", "expected"), sorted(MACROS.items()))
def test_every_macro_matches_its_cron_form(macro: str, expected: str) -> None:
    now = datetime(2026, 5, 17, 13, 7, tzinfo=UTC)
    assert timetable(spec(schedule=macro)).next_runs(now, 3) == timetable(
        spec(schedule=expected)
    ).next_runs(now, 3)


def test_macros_fire_when_they_say() -> None:
    now = datetime(2026, 5, 17, 13, 7, tzinfo=UTC)  # a Sunday

    def first(macro: str) -> str:
        return timetable(spec(schedule=macro)).next_runs(now, 1)[0].isoformat()

    assert first("@hourly") == "2026-05-17T14:00:00+00:00"
    assert first("@daily") == first("@midnight") == "2026-05-18T00:00:00+00:00"
    assert first("@weekly") == "2026-05-24T00:00:00+00:00"
    assert first("@monthly") == "2026-06-01T00:00:00+00:00"
    assert first("@yearly") == first("@annually") == "2027-01-01T00:00:00+00:00"


def test_time_zone_defaults_to_utc_not_the_machine_zone() -> None:
    table = timetable(spec(schedule="0 9 * * *"))
    assert table.next_runs(datetime(2026, 1, 1, tzinfo=UTC), 1)[0].hour == 9


def test_next_runs_are_strictly_after_now() -> None:
    now = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    assert timetable(spec(schedule="0 9 * * *")).next_runs(now, 1)[0].day == 2


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("61 * * * *", "InvalidSchedule"),
        ("* * * *", "InvalidSchedule"),
        ("* * * * * *", "InvalidSchedule"),
        ("0 0 L * *", "InvalidSchedule"),
        ("0 0 * * 1#2", "InvalidSchedule"),
        ("0 0 1W * *", "InvalidSchedule"),
        ("@every 5m", "InvalidSchedule"),
        ("@reboot", "InvalidSchedule"),
        ("0 0 30 2 *", "InvalidSchedule"),
        ("hello world", "InvalidSchedule"),
    ],
)
def test_invalid_cron_is_refused_with_a_reason(expression: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        timetable(spec(schedule=expression))
    assert caught.value.reason == reason
    assert expression in caught.value.message


def test_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ScheduleError) as caught:
        timetable(spec(timeZone="Mars/Olympus_Mons"))
    assert caught.value.reason == "InvalidTimeZone"
    assert "Mars/Olympus_Mons" in caught.value.message


def test_names_and_question_mark_are_accepted_where_the_backend_accepts_them() -> None:
    cron = "*/5  * ? jan-mar MON-FRI"
    assert normalize_cron(cron, "kubernetes") == "*/5 * * jan-mar MON-FRI"
    with pytest.raises(ScheduleError, match="Temporal does not accept `\\?`"):
        normalize_cron(cron, "temporal")


def test_day_of_week_7_is_refused_for_the_cronjob_controller() -> None:
    """Issue 14.11: robfig/cron reads day-of-week 0-6 only; croniter takes 7 as Sunday."""
    for cron in ("0 0 * * 7", "0 0 * * 5-7", "0 0 * * 1,7"):
        with pytest.raises(ScheduleError, match="write 0 or SUN"):
            normalize_cron(cron, "kubernetes")
    assert normalize_cron("0 0 * * */2", "kubernetes") == "0 0 * * */2"


def test_a_starred_step_in_a_day_field_ands_the_days_as_the_cronjob_controller_does() -> None:
    """Issue 14.11: `*/1` carries robfig's star bit, so `0 0 */1 * 1` is Mondays only
    (croniter alone would read it as every day, OR-ed with Mondays)."""
    now = datetime(2026, 12, 1, tzinfo=UTC)  # a Tuesday
    runs = timetable(spec(schedule="0 0 */1 * 1")).next_runs(now, 3)
    assert [t.date().isoformat() for t in runs] == ["2026-12-07", "2026-12-14", "2026-12-21"]
    # A step above 1 clears the star bit (robfig): odd days OR Mondays.
    odd_or_mondays = timetable(spec(schedule="0 0 */2 * 1")).next_runs(now, 3)
    assert [t.date().isoformat() for t in odd_or_mondays] == [
        "2026-12-03", "2026-12-05", "2026-12-07",
    ]  # fmt: skip
    assert not both_days_restricted("0 0 */1 * 1")
    assert both_days_restricted("0 0 */2 * 1")


def test_interval_slots_are_anchored_at_the_epoch() -> None:
    after = datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)
    slots = interval_slots(IntervalSpec(every="5s", offset="2s"), after)
    assert [next(slots).second for _ in range(3)] == [12, 17, 22]


def test_end_time_stops_the_slots() -> None:
    table = timetable(
        spec(
            backend="temporal",
            workflow={"type": "w", "taskQueue": "q"},
            schedule="0 * * * *",
            endTime="2026-01-01T02:30:00Z",
        )
    )
    assert len(table.next_runs(datetime(2026, 1, 1, tzinfo=UTC), 5)) == 2


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("1h30m", 5400), ("500ms", 0.5), ("2m3s", 123)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize(
    "start",
    [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 02:30 CEST: inside the first 02:xx
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),  # 02:30 CET: inside the second
        datetime(2026, 3, 29, 0, 45, tzinfo=UTC),  # 01:45 CET, just before the gap
    ],
)
def test_every_minute_is_every_utc_minute_across_both_dst_changes(start: datetime) -> None:
    """Every wall-clock minute that exists is one UTC minute, and every UTC minute has
    one: in the repeated hour (each minute twice) and across the gap (none there)."""
    table = timetable(spec(schedule="* * * * *", timeZone="Europe/Berlin"))
    runs = table.next_runs(start, 150)
    assert runs == [start + timedelta(minutes=n) for n in range(1, 151)]


class CountingCroniter(croniter):  # type: ignore[misc]
    readings = 0
    parsed = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        CountingCroniter.parsed += 1
        super().__init__(*args, **kwargs)

    def get_next(self, *args: object, **kwargs: object) -> object:
        CountingCroniter.readings += 1
        return super().get_next(*args, **kwargs)


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[CountingCroniter]]:
    CountingCroniter.readings = CountingCroniter.parsed = 0
    monkeypatch.setattr("sundial.planning.schedule.croniter", CountingCroniter)
    # Expressions parsed and slots read by earlier tests are plain croniters' work.
    _parsed.cache_clear()
    _shared.clear()
    yield CountingCroniter
    _parsed.cache_clear()
    _shared.clear()


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin"])
def test_slots_are_read_from_the_start_not_hours_before_it(
    readings: type[CountingCroniter], zone: str
) -> None:
    """A minute schedule's next three runs cost about three wall-clock readings, not the
    180 of a fixed three-hour look-back (13 ms a pass, the whole core at a few thousand
    minute schedules)."""
    table = timetable(spec(schedule="* * * * *", timeZone=zone))
    readings.readings = 0
    table.next_runs(datetime(2026, 12, 3, 12, 0, 30, tzinfo=UTC), 3)
    assert readings.readings <= 4


def test_one_timetable_reads_each_slot_once_however_often_it_is_asked(
    readings: type[CountingCroniter],
) -> None:
    """A pass asks for slots several times (the judge from the watermark, the slot after
    each, the next runs): it reads them once."""
    table = timetable(spec(schedule="* * * * *"))
    now = datetime(2026, 12, 3, 12, 0, 30, tzinfo=UTC)
    readings.readings = 0
    table.slots_between(now - timedelta(minutes=5), now, 100)
    table.next_runs(now, 3)
    table.next_runs(now, 3)
    assert table.slots_between(now - timedelta(minutes=5), now, 100) == [
        datetime(2026, 12, 3, 11, 56, tzinfo=UTC) + timedelta(minutes=n) for n in range(5)
    ]
    assert readings.readings <= 10


def test_each_pass_reads_its_own_slots_from_an_expression_parsed_once(
    readings: type[CountingCroniter],
) -> None:
    """Parsing a cron expression costs more than the few slots a pass reads: passes of
    the same schedule share the parsed expression, never its position, even interleaved."""
    after = datetime(2026, 12, 4, 10, 0, 30, tzinfo=UTC)
    first = cron_slots("*/5 * * * *", ZoneInfo("UTC"), after, backend="kubernetes")
    second = cron_slots("*/5 * * * *", ZoneInfo("UTC"), after + timedelta(hours=1),
                        backend="kubernetes")  # fmt: skip
    assert [next(first), next(second), next(first), next(second)] == [
        datetime(2026, 12, 4, 10, 5, tzinfo=UTC), datetime(2026, 12, 4, 11, 5, tzinfo=UTC),
        datetime(2026, 12, 4, 10, 10, tzinfo=UTC), datetime(2026, 12, 4, 11, 10, tzinfo=UTC),
    ]  # fmt: skip
    for _ in range(10):
        next(cron_slots("*/5 * * * *", ZoneInfo("Europe/Berlin"), after, backend="kubernetes"))
    assert readings.parsed == 1


def test_passes_of_objects_with_the_same_schedule_read_each_slot_once(
    readings: type[CountingCroniter],
) -> None:
    """A thousand minute schedules ask for the same minutes each minute: the first pass
    reads them, the others are served what it read (each pass still its own Timetable)."""
    now = datetime(2026, 12, 3, 12, 0, 30, tzinfo=UTC)
    expected = [datetime(2026, 12, 3, 12, 1, tzinfo=UTC) + timedelta(minutes=n) for n in range(3)]
    for _ in range(100):
        table = timetable(spec(schedule="* * * * *", timeZone="Europe/Berlin"))
        assert table.next_runs(now, 3) == expected
        assert table.slots_between(now - timedelta(minutes=2), now, 10) == [
            datetime(2026, 12, 3, 11, 59, tzinfo=UTC), datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
        ]  # fmt: skip
    assert readings.readings <= 10


def test_a_refused_schedule_is_refused_on_every_pass_and_a_valid_one_read_anew() -> None:
    """Validation is remembered per (schedule, zone, backend) for speed; only valid ones."""
    never = ScheduledJobSpec.model_validate({"schedule": "0 0 30 2 *", "job": {"image": "a"}})
    for _ in range(2):
        with pytest.raises(ScheduleError, match="never fires"):
            timetable(never)
    minute = ScheduledJobSpec.model_validate({"schedule": "* * * * *", "job": {"image": "a"}})
    after = datetime(2026, 12, 4, 10, 0, 30, tzinfo=UTC)
    first, second = timetable(minute), timetable(minute)
    assert first is not second  # each pass reads its own slots
    assert (
        first.next_runs(after, 2)
        == second.next_runs(after, 2)
        == [datetime(2026, 12, 4, 10, 1, tzinfo=UTC), datetime(2026, 12, 4, 10, 2, tzinfo=UTC)]
    )
