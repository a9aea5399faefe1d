"""Issue 14.4: read-your-writes. What Sundial wrote is read instead of the watch cache only
until the cache shows that write (or later); a retire or a deletion drops the memory.
The kubernetes backend's use of it, while the watch lags behind the real apiserver, is
tests/integration/test_read_your_writes.py."""

from __future__ import annotations

from sundial.ownwrites import OwnWrites

KEY = ("shop", "invoices")


def test_the_write_is_read_until_the_cache_shows_its_version_or_a_later_one() -> None:
    writes: OwnWrites[str] = OwnWrites()
    writes.remember(KEY, {"metadata": {"resourceVersion": "10"}}, "written")
    assert writes.read(KEY, None) == "written"  # not in the cache yet
    assert writes.read(KEY, 9) == "written"  # the cache still holds the version before
    assert writes.read(KEY, 10) is None  # caught up: the cache is the truth from now on
    assert writes.read(KEY, 9) is None
    writes.remember(KEY, {"metadata": {"resourceVersion": "12"}}, "again")
    writes.forget(KEY)
    assert writes.read(KEY, None) is None


def test_once_the_cache_shows_a_write_only_what_settled_keeps_is_held() -> None:
    """Memory per object: no second copy of an object the cache already holds."""
    statuses: OwnWrites[str] = OwnWrites()
    statuses.remember(KEY, {"metadata": {"resourceVersion": "10"}}, "a whole status")
    assert len(statuses) == 1
    assert statuses.read(KEY, 10) is None
    assert len(statuses) == 0
    assert statuses.last(KEY) is None

    kept: OwnWrites[str] = OwnWrites(settled=lambda value: value[:5])
    kept.remember(KEY, {"metadata": {"resourceVersion": "10"}}, "a whole CronJob")
    assert kept.read(KEY, 10) is None
    assert kept.last(KEY) == "a who"
