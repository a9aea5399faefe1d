"""Polls' default deadline (support.eventually): DEADLINE, or in a scenario's thread the
deadline its Background was given (the shared timeline's, longer: its start is the
suite's heaviest moment)."""

from __future__ import annotations

import pytest

from support import DEADLINE, Background, default_deadline, eventually


def test_a_scenario_polls_by_its_own_deadline_and_other_threads_by_the_default() -> None:
    seen: list[float] = []
    background = Background(lambda: seen.append(default_deadline()), deadline=150.0)
    background.join(10)
    assert seen == [150.0]
    assert default_deadline() == DEADLINE


def test_a_poll_without_a_timeout_gives_up_at_its_threads_deadline() -> None:
    def never() -> None:
        eventually(lambda: False, interval=0.05, what="never")

    background = Background(never, deadline=0.2)
    with pytest.raises(AssertionError, match=r"not true within 0s: never"):
        background.join(10)
    # An explicit timeout is kept as it is, in a scenario too.
    explicit = Background(lambda: eventually(lambda: False, timeout=0.1, interval=0.05),
                          deadline=100.0)  # fmt: skip
    with pytest.raises(AssertionError, match=r"not true within 0s"):
        explicit.join(10)
