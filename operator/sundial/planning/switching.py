"""Switching backends, as a state machine: every state an object can be in between two
backends, computed from observed facts, never remembered.

A change of `spec.backend` never leaves both backends running, nor neither:

    Accepting      the old backend still holds the object (a CronJob in place, a schedule
                   behind the finalizer); the new one must accept it first (a dry run, a
                   schedule created paused). A refusal stays here: the old keeps running.
    RetiringOld    the new one has accepted; the old one is removed (a CronJob deleted with
                   its running Jobs orphaned to finish, a schedule deleted).
    WaitingForRun  the old one is gone but a run it started is still going, and the policy
                   is Forbid: the new one is in step but held (a schedule kept paused).
    Steady         one backend, nothing of another in force.

A pass computes the phase from the facts at its start (`phase`), acts on it in
reconcile.py, and moves on with `accepted` and `retired` as each step succeeds. The status
reads the phase too (`reported`, `condition`): the Switching condition says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from sundial.api import reasons
from sundial.api.models import Condition

ConditionStatus = Literal["True", "False", "Unknown"]


class Phase(Enum):
    STEADY = "Steady"
    ACCEPTING = "Accepting"
    RETIRING_OLD = "RetiringOld"
    WAITING_FOR_RUN = "WaitingForRun"


@dataclass(frozen=True)
class Facts:
    """What a pass sees of the backends at its start."""

    # Another backend than spec.backend still holds something for the object.
    old_holds: bool
    # A run another backend started is still going.
    old_run_in_progress: bool
    # spec.concurrencyPolicy is Forbid: no run may start beside a running one, whichever
    # backend started it.
    forbid: bool


def phase(facts: Facts) -> Phase:
    """Where the object is at the start of a pass."""
    if facts.old_holds:
        return Phase.ACCEPTING
    return _after_old(facts)


def accepted(current: Phase) -> Phase:
    """The new backend accepted the object."""
    if current is not Phase.ACCEPTING:
        raise ValueError(f"only an object being accepted can be accepted, not {current.value}")
    return Phase.RETIRING_OLD


def retired(current: Phase, facts: Facts) -> Phase:
    """The old backend removed what it held."""
    if current is not Phase.RETIRING_OLD:
        raise ValueError(f"only an object retiring its old backend can retire, not {current.value}")
    return _after_old(facts)


def _after_old(facts: Facts) -> Phase:
    if facts.forbid and facts.old_run_in_progress:
        return Phase.WAITING_FOR_RUN
    return Phase.STEADY


def holds_new_runs(current: Phase) -> bool:
    """The new backend is in step but starts nothing yet."""
    return current is Phase.WAITING_FOR_RUN


def reported(desired: str, effective: str | None, *, held: bool) -> Phase:
    """The phase the status shows, from what it records: `effective` is the backend the
    last pass left in effect (status.backend; it becomes `desired` only once the new one
    is in step), `held` that the new one is held for the old one's run. A pass that stopped
    between accepting and retiring reports Accepting: the old backend still runs."""
    if effective is not None and effective != desired:
        return Phase.ACCEPTING
    return Phase.WAITING_FOR_RUN if held else Phase.STEADY


def condition(
    current: Phase,
    previous: Condition | None,
    desired: str,
    effective: str | None,
    *,
    problem: str | None = None,
    waiting_for: str | None = None,
) -> tuple[ConditionStatus, str, str] | None:
    """The Switching condition for the reported phase, as (status, reason, message): True
    while the switch is not complete, False once done, None (absent, or kept as it was) on
    an object that never switched."""
    if current in (Phase.ACCEPTING, Phase.RETIRING_OLD):
        return (
            "True", reasons.SWITCH_PENDING,
            f"switching from backend {effective} to {desired}"
            f"{': ' + problem if problem else ''}; backend {effective} keeps running until "
            f"{desired} accepts the object",
        )  # fmt: skip
    if current is Phase.WAITING_FOR_RUN:
        return "True", reasons.WAITING_FOR_RUNNING_JOB, waiting_for or "waiting for a run"
    if previous is not None and previous.status == "True":
        return "False", reasons.SWITCHED, f"now on backend {desired}"
    return None
