"""Temporal's structured calendars back to the cron they came from
(backends/temporal/importing.cron_of_calendar); the server's side, with the schedule's own
next action times as the check, is tests/integration/test_import_schedules.py."""

from __future__ import annotations

import pytest
from temporalio.client import ScheduleCalendarSpec, ScheduleRange

from sundial.backends.temporal.importing import cron_of_calendar


def test_ranges_steps_lists_and_whole_fields() -> None:
    calendar = ScheduleCalendarSpec(
        second=[ScheduleRange(0)],
        minute=[ScheduleRange(0, 59, 15)],
        hour=[ScheduleRange(9, 17)],
        day_of_month=[ScheduleRange(1, 31)],
        month=[ScheduleRange(1), ScheduleRange(7)],
        day_of_week=[ScheduleRange(1, 5)],
    )
    assert cron_of_calendar(calendar) == "*/15 9-17 * 1,7 1-5"


def test_empty_fields_take_temporals_defaults() -> None:
    calendar = ScheduleCalendarSpec(second=[], minute=[], hour=[], day_of_month=[], month=[],
                                    day_of_week=[])  # fmt: skip
    assert cron_of_calendar(calendar) == "0 0 * * *"


@pytest.mark.parametrize(
    ("calendar", "message"),
    [
        (ScheduleCalendarSpec(second=[ScheduleRange(30)]), "seconds"),
        (ScheduleCalendarSpec(year=[ScheduleRange(2027)]), "years"),
    ],
)
def test_what_a_cron_cannot_say_is_refused(calendar: ScheduleCalendarSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cron_of_calendar(calendar)
