"""Whose is it: the one decision both backends make before they write a CronJob or a
Temporal schedule under a name that may be taken. Sundial never writes over or deletes
what it did not make; adoption is explicit (the `sundial.dev/adopt` annotation naming the
object to take over), as kubebuilder's controllers refuse an object without their owner
reference."""

from __future__ import annotations

from enum import Enum

from sundial.api.models import GROUP, ScheduledJob

ADOPT_ANNOTATION = f"{GROUP}/adopt"


class Ownership(Enum):
    ABSENT = "Absent"  # nothing there: made afresh
    OWNED = "Owned"  # made by Sundial for this object: kept in step
    ADOPT = "Adopt"  # somebody else's, and this object asks to take it over
    REFUSE = "Refuse"  # somebody else's: left alone, the object reports it


def adoption_requested(sj: ScheduledJob, name: str) -> bool:
    """The object's adopt annotation names `name` exactly (not any object it may meet)."""
    return sj.metadata.annotations.get(ADOPT_ANNOTATION) == name


def decide(sj: ScheduledJob, name: str, *, exists: bool, made_for_this: bool) -> Ownership:
    """What a backend may do with the object called `name` it found (or did not)."""
    if not exists:
        return Ownership.ABSENT
    if made_for_this:
        return Ownership.OWNED
    return Ownership.ADOPT if adoption_requested(sj, name) else Ownership.REFUSE


def refusal(
    sj: ScheduledJob, what: str, name: str, where: str, remedies: str, adopting: str
) -> str:
    """The message of a REFUSE: what (`what`, called `name`) is there, that Sundial leaves
    it alone, and how to resolve it (`remedies`, or adoption: the command, what it does)."""
    return (
        f"a {what} {name} already exists in {where} and was not made by this ScheduledJob; "
        f"Sundial leaves it alone. {remedies}, or adopt it: `kubectl annotate scheduledjob "
        f"{sj.metadata.name} {ADOPT_ANNOTATION}={name}` ({adopting})"
    )
