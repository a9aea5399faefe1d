"""The one ownership decision both backends make (planning/ownership.py)."""

from __future__ import annotations

import pytest

from sundial.api.models import ScheduledJob
from sundial.planning.ownership import ADOPT_ANNOTATION, Ownership, decide, refusal


def scheduledjob(adopt: str | None = None) -> ScheduledJob:
    annotations = {ADOPT_ANNOTATION: adopt} if adopt is not None else {}
    return ScheduledJob.model_validate({
        "metadata": {"name": "report", "namespace": "team", "uid": "u1",
                     "annotations": annotations},
        "spec": {"schedule": "@daily", "job": {"image": "report:1"}},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("exists", "made_for_this", "adopt", "decision"),
    [
        (False, False, None, Ownership.ABSENT),
        (False, False, "report", Ownership.ABSENT),
        (True, True, None, Ownership.OWNED),
        (True, True, "other", Ownership.OWNED),  # an annotation never unmakes Sundial's own
        (True, False, None, Ownership.REFUSE),
        (True, False, "other", Ownership.REFUSE),  # adoption names exactly what to take
        (True, False, "", Ownership.REFUSE),
        (True, False, "report", Ownership.ADOPT),
    ],
)
def test_whose_it_is(exists: bool, made_for_this: bool, adopt: str | None,
                     decision: Ownership) -> None:  # fmt: skip
    found = decide(scheduledjob(adopt), "report", exists=exists, made_for_this=made_for_this)
    assert found is decision


def test_a_refusal_names_the_object_and_the_exact_command_to_adopt_it() -> None:
    message = refusal(scheduledjob(), "CronJob named", "report", "team", "Delete it", "taken")
    assert message == (
        "a CronJob named report already exists in team and was not made by this "
        "ScheduledJob; Sundial leaves it alone. Delete it, or adopt it: `kubectl annotate "
        f"scheduledjob report {ADOPT_ANNOTATION}=report` (taken)"
    )
