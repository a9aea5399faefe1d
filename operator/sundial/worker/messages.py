"""What the RunJob workflow and its activities pass each other (plain data, so the
workflow sandbox imports nothing with I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RunStart:
    """Everything the start_job activity needs of the run, read from the workflow."""

    reference: dict[str, Any]  # planning/temporal_schedule.job_reference
    scheduled_by: str | None  # the TemporalScheduledById search attribute
    scheduled_time: str  # RFC 3339: the nominal time (the start time without one)
    workflow_id: str
    run_id: str
    # RFC 3339: when Temporal started the run (the catch-up window counts from it); None
    # from a workflow started before this field (such a run is not judged late).
    started_time: str | None = None


@dataclass
class JobOutcome:
    succeeded: bool
    reason: str | None = None
    message: str | None = None
