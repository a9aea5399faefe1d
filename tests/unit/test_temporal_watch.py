"""Which schedules a listing wakes (backends.temporal.watch.changed): pure, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sundial.backends.temporal.watch import changed, listed_lately

TRACKED = {"a", "b", "c"}


def test_a_schedule_whose_entry_changed_or_that_left_the_list_is_looked_at() -> None:
    listed = {"a": 1, "b": 2, "c": 3}
    assert changed(listed, {"a": 1, "b": 20, "c": 3}, {}, TRACKED) == {"b"}
    assert changed(listed, {"a": 1, "b": 2}, {}, TRACKED) == {"c"}
    assert changed(listed, dict(listed), {}, TRACKED) == set()


def test_a_first_listing_is_compared_with_what_the_pass_saw() -> None:
    """The pass described the schedule, then someone paused it before the first listing
    that shows it: that listing is the only one to tell."""
    assert changed({}, {"a": 5}, {"a": 4}, {"a"}) == {"a"}
    assert changed({}, {"a": 4}, {"a": 4}, {"a"}) == set()
    # Not in the list yet (eventually consistent): nothing to say.
    assert changed({}, {}, {"a": 4}, {"a"}) == set()


def test_a_change_the_objects_own_pass_has_seen_already_wakes_nothing() -> None:
    """A minute schedule's run: the slot's own pass describes it at the settling, and the
    next listing shows the same change. Waking the object again was a second describe per
    slot, half of Temporal's requests in the steady state."""
    assert changed({"a": 1}, {"a": 2}, {"a": 2}, {"a"}) == set()
    # The pass saw an older state than the listing shows now: news.
    assert changed({"a": 1}, {"a": 3}, {"a": 2}, {"a"}) == {"a"}
    # The listing lags the pass (eventually consistent): it still shows the old entry.
    assert changed({"a": 1}, {"a": 1}, {"a": 2}, {"a"}) == set()


def test_schedules_of_other_objects_or_operators_are_ignored() -> None:
    assert changed({"x": 1}, {"x": 2, "y": 3}, {"y": 1}, TRACKED) == set()


def test_a_listing_vouches_for_its_connection_for_two_rounds_only() -> None:
    """A new object's schedule is created without a describe only while a listing of its
    connection answered lately; a listing that stopped answering stops vouching."""
    answered = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    assert listed_lately(answered, answered + timedelta(seconds=10), interval=10)
    assert listed_lately(answered, answered + timedelta(seconds=21), interval=10)
    assert not listed_lately(answered, answered + timedelta(seconds=22), interval=10)
