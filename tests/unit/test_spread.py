"""planning/spread.py: `H` in a cron's minute and hour fields, made concrete per object by a
hash of its namespace and name. Pure."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from sundial.api.models import ScheduledJob
from sundial.planning import spread
from sundial.planning.schedule import ScheduleError, timetable

NOW = datetime(2026, 12, 6, 5, 0, tzinfo=UTC)


def scheduledjob(
    schedule: str, name: str = "invoices", backend: str = "kubernetes"
) -> ScheduledJob:
    spec = {"backend": backend, "schedule": schedule}
    spec.update({"job": {"image": "registry.example/a:1"}})
    return ScheduledJob.model_validate({"metadata": {"name": name, "namespace": "shop"},
                                        "spec": spec})  # fmt: skip


def minute_of(sj: ScheduledJob) -> int:
    schedule = spread.resolved(sj).spec.schedule
    assert schedule is not None
    return int(schedule.split()[0])


def test_500_jobs_at_the_top_of_the_hour_spread_over_the_whole_hour() -> None:
    """The thundering herd: 500 objects written `H * * * *` start at minutes all over the
    hour, not in one second; none of the 60 minutes holds more than three times its share."""
    minutes = Counter(minute_of(scheduledjob("H * * * *", f"job-{i}")) for i in range(500))
    assert len(minutes) == 60, sorted(minutes)
    assert max(minutes.values()) <= 3 * 500 / 60, minutes.most_common(3)


def test_a_range_keeps_the_spread_within_its_bounds() -> None:
    minutes = {minute_of(scheduledjob("H(0-9) * * * *", f"job-{i}")) for i in range(200)}
    assert minutes == set(range(10))


def test_the_same_object_gets_the_same_minute_every_time_and_another_may_not() -> None:
    first = spread.resolved(scheduledjob("H H * * *")).spec.schedule
    assert spread.resolved(scheduledjob("H H * * *")).spec.schedule == first
    others = {spread.resolved(scheduledjob("H H * * *", f"o-{i}")).spec.schedule
              for i in range(20)}  # fmt: skip
    assert len(others) > 1


def test_a_step_starts_at_the_spread_offset() -> None:
    schedule = spread.resolved(scheduledjob("H/15 * * * *")).spec.schedule
    assert schedule is not None
    start = int(schedule.split()[0].split("-")[0])
    assert schedule == f"{start}-59/15 * * * *"
    assert 0 <= start < 15
    ranged = spread.resolved(scheduledjob("H(30-59)/10 H(1-4) * * *")).spec.schedule
    assert ranged is not None
    minute, hour = ranged.split()[:2]
    assert minute.endswith("-59/10"), ranged
    assert 30 <= int(minute.split("-")[0]) < 40, ranged
    assert 1 <= int(hour) <= 4


def test_names_with_an_h_and_schedules_without_spread_are_left_alone() -> None:
    sj = scheduledjob("0 3 * * THU")
    assert spread.resolved(sj) is sj
    assert not spread.has_spread("@hourly")


def test_next_runs_are_the_concrete_ones_on_both_backends() -> None:
    """Both backends are given the same concrete expression, so the slots are the same."""
    kubernetes = timetable(spread.resolved(scheduledjob("H * * * *")).spec)
    temporal = timetable(spread.resolved(scheduledjob("H * * * *", backend="temporal")).spec)
    assert kubernetes.next_runs(NOW, 3) == temporal.next_runs(NOW, 3)
    minute = minute_of(scheduledjob("H * * * *"))
    first = kubernetes.next_runs(NOW, 1)[0]
    assert first.minute == minute
    assert first - NOW < timedelta(hours=1)


@pytest.mark.parametrize(
    ("schedule", "said"),
    [
        ("0 0 H * *", "minute and hour fields only"),
        ("H(50-70) * * * *", "must lie within 0-59"),
        ("H(5-1) * * * *", "must lie within 0-59"),
        ("H/0 * * * *", "step /0"),
        ("H(1-5 * * * *", "not a spread form"),
    ],
)
def test_a_spread_that_cannot_be_is_refused_naming_the_field(schedule: str, said: str) -> None:
    with pytest.raises(ScheduleError) as refused:
        spread.resolved(scheduledjob(schedule))
    assert said in str(refused.value)
    assert "spec.schedule" in str(refused.value)
