"""Every state an object can be in between two backends (planning/switching.py), and the
way a pass moves through them, pinned as a table."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sundial.api import reasons
from sundial.api.models import Condition
from sundial.planning import switching as sw
from sundial.planning.switching import Facts, Phase

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


# (old backend holds the object, old backend's run in progress, Forbid) ->
# (phase at the start of the pass, after the new one accepts, after the old one retires)
PASSES = [
    # Nothing of another backend: steady, whatever runs elsewhere unless Forbid holds it.
    ((False, False, False), Phase.STEADY, None, None),
    ((False, True, False), Phase.STEADY, None, None),
    ((False, False, True), Phase.STEADY, None, None),
    ((False, True, True), Phase.WAITING_FOR_RUN, None, None),
    # The old one holds the object: accept, then retire, then steady or held.
    ((True, False, False), Phase.ACCEPTING, Phase.RETIRING_OLD, Phase.STEADY),
    ((True, True, False), Phase.ACCEPTING, Phase.RETIRING_OLD, Phase.STEADY),
    ((True, False, True), Phase.ACCEPTING, Phase.RETIRING_OLD, Phase.STEADY),
    ((True, True, True), Phase.ACCEPTING, Phase.RETIRING_OLD, Phase.WAITING_FOR_RUN),
]


@pytest.mark.parametrize(("facts", "start", "after_accept", "after_retire"), PASSES)
def test_a_pass_moves_through_the_phases(
    facts: tuple[bool, bool, bool],
    start: Phase,
    after_accept: Phase | None,
    after_retire: Phase | None,
) -> None:
    seen = Facts(old_holds=facts[0], old_run_in_progress=facts[1], forbid=facts[2])
    phase = sw.phase(seen)
    assert phase is start
    if after_accept is None:
        with pytest.raises(ValueError, match="accepted"):
            sw.accepted(phase)
        return
    phase = sw.accepted(phase)
    assert phase is after_accept
    phase = sw.retired(phase, seen)
    assert phase is after_retire
    assert sw.holds_new_runs(phase) is (phase is Phase.WAITING_FOR_RUN)


def test_only_an_accepted_object_retires_its_old_backend() -> None:
    facts = Facts(old_holds=True, old_run_in_progress=False, forbid=False)
    with pytest.raises(ValueError, match="retire"):
        sw.retired(Phase.ACCEPTING, facts)  # accepting must succeed first
    with pytest.raises(ValueError, match="retire"):
        sw.retired(Phase.STEADY, facts)


def switching(status: str) -> Condition:
    return Condition(type=reasons.SWITCHING, status=status, reason="Any", message="",
                     last_transition_time=NOW)  # fmt: skip


# (desired, effective, held, the Switching condition before) -> (phase shown, its condition)
REPORTS = [
    ("temporal", "kubernetes", False, None, Phase.ACCEPTING, ("True", reasons.SWITCH_PENDING)),
    ("kubernetes", "temporal", True, None, Phase.ACCEPTING, ("True", reasons.SWITCH_PENDING)),
    ("temporal", "temporal", True, None, Phase.WAITING_FOR_RUN,
     ("True", reasons.WAITING_FOR_RUNNING_JOB)),
    ("temporal", "temporal", False, "True", Phase.STEADY, ("False", reasons.SWITCHED)),
    ("temporal", "temporal", False, "False", Phase.STEADY, None),
    ("temporal", "temporal", False, None, Phase.STEADY, None),
    ("kubernetes", None, False, None, Phase.STEADY, None),  # never reconciled yet
]  # fmt: skip


@pytest.mark.parametrize(("desired", "effective", "held", "before", "shown", "said"), REPORTS)
def test_the_switching_condition_shows_the_phase(
    desired: str,
    effective: str | None,
    held: bool,
    before: str | None,
    shown: Phase,
    said: tuple[str, str] | None,
) -> None:
    phase = sw.reported(desired, effective, held=held)
    assert phase is shown
    previous = switching(before) if before else None
    condition = sw.condition(phase, previous, desired, effective, waiting_for="the run")
    assert (condition[:2] if condition else None) == said


def test_a_pending_switch_says_what_keeps_running_and_why() -> None:
    said = sw.condition(Phase.ACCEPTING, None, "temporal", "kubernetes", problem="refused")
    assert said is not None
    assert said[2] == (
        "switching from backend kubernetes to temporal: refused; backend kubernetes keeps "
        "running until temporal accepts the object"
    )


def test_a_new_backend_waiting_for_the_old_ones_run_says_so_and_lists_no_runs() -> None:
    from sundial.api.models import ScheduledJob
    from sundial.planning.status import find_condition, waiting_for_run

    sj = ScheduledJob.model_validate({
        "metadata": {"name": "flip", "namespace": "shop", "generation": 3},
        "spec": {"schedule": "* * * * *", "job": {"image": "app:1"}},
        "status": {"backend": "temporal", "nextRunTimes": ["2026-12-06T09:01:00Z"]},
    })  # fmt: skip
    status = waiting_for_run(sj, "the CronJob is made once the run has finished", now=NOW)
    assert (status.backend, status.next_run_times, status.observed_generation) == (
        "kubernetes", [], 3)  # fmt: skip
    ready = find_condition(status.conditions, reasons.READY)
    switch = find_condition(status.conditions, reasons.SWITCHING)
    assert ready is not None
    assert switch is not None
    assert (ready.status, ready.reason) == ("True", reasons.RECONCILED)
    assert (switch.status, switch.reason) == ("True", reasons.WAITING_FOR_RUNNING_JOB)
    assert switch.message == "the CronJob is made once the run has finished"
