"""Event aggregation: a repeating problem is one Event with a count, not a storm
(events.repeated, the decision EventRecorder.record acts on). Pure: `now` is passed in.
The Events themselves, posted and patched on the apiserver: tests/integration/
test_event_recorder.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sundial.events import AGGREGATION_WINDOW, MIN_PATCH_INTERVAL, Posted, repeated

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def writes(*seconds: float) -> list[tuple[str, int]]:
    """What occurrences at these moments write: ("create", 1) for an Event posted anew,
    ("patch", count) for a count written on the posted one."""
    posted: Posted | None = None
    done: list[tuple[str, int]] = []
    for second in seconds:
        now = T0 + timedelta(seconds=second)
        again = repeated(posted, now)
        if again is None:
            posted = Posted(f"e{len(done)}", 1, now, now)
            done.append(("create", 1))
            continue
        posted, write = again
        if write:
            done.append(("patch", posted.count))
    return done


def test_repeats_raise_the_count_at_most_once_in_five_minutes() -> None:
    # A minute schedule's repeated skip is one record a minute: one patch in five of them,
    # the rate client-go's spam filter lets through for one object (1 per 5 minutes).
    assert writes(0, 60, 120, 180, 240, 300, 360) == [("create", 1), ("patch", 6)]


def test_after_the_window_a_new_event_is_posted() -> None:
    assert writes(0, 11 * 60) == [("create", 1), ("create", 1)]
    window = AGGREGATION_WINDOW.total_seconds()
    assert writes(0, window - 1, window) == [("create", 1), ("patch", 2), ("create", 1)]


def test_a_count_not_written_yet_is_kept_and_written_with_the_next() -> None:
    first = Posted("e", 1, T0, T0)
    again = repeated(first, T0 + MIN_PATCH_INTERVAL - timedelta(seconds=1))
    assert again == (Posted("e", 2, T0, T0), False)
    later = repeated(again[0], T0 + MIN_PATCH_INTERVAL)
    assert later == (Posted("e", 3, T0, T0 + MIN_PATCH_INTERVAL), True)
