"""The ScheduledJob resource: its metadata, spec (spec_models.py) and status
(status_models.py). Every name of the API is importable from here."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from sundial.api.spec_models import (
    DURATION_PATTERN,
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    ApiModel,
    Backend,
    CatchUpPolicy,
    ConcurrencyPolicy,
    ConnectionKind,
    ConnectionRef,
    FailurePolicy,
    IntervalSpec,
    JobSpec,
    MonitoringSpec,
    RetryPolicy,
    ScheduledJobSpec,
    WorkflowSpec,
)
from sundial.api.status_models import (
    BackendRef,
    Condition,
    ConditionStatus,
    CountedRun,
    MissedRun,
    MissReason,
    PauseReason,
    PauseStatus,
    RecentRun,
    RequestKind,
    RequestOutcome,
    RequestStatus,
    RunAccounting,
    RunResult,
    ScheduledJobStatus,
    TemporalCounters,
)

__all__ = [
    "DURATION_PATTERN",
    "GROUP",
    "KIND",
    "MAX_NAME_LENGTH",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "ApiModel",
    "Backend",
    "BackendRef",
    "CatchUpPolicy",
    "ConcurrencyPolicy",
    "Condition",
    "ConditionStatus",
    "ConnectionKind",
    "ConnectionRef",
    "CountedRun",
    "FailurePolicy",
    "IntervalSpec",
    "JobSpec",
    "MissReason",
    "MissedRun",
    "MonitoringSpec",
    "ObjectMeta",
    "PauseReason",
    "PauseStatus",
    "RecentRun",
    "RequestKind",
    "RequestOutcome",
    "RequestStatus",
    "RetryPolicy",
    "RunAccounting",
    "RunResult",
    "ScheduledJob",
    "ScheduledJobSpec",
    "ScheduledJobStatus",
    "TemporalCounters",
    "WorkflowSpec",
]


class ObjectMeta(BaseModel):
    """Only what the operator reads; the apiserver owns the rest."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    name: str
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    resource_version: str = Field(default="", alias="resourceVersion")
    creation_timestamp: datetime | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: datetime | None = Field(default=None, alias="deletionTimestamp")
    finalizers: list[str] = Field(default_factory=list)
    annotations: dict[str, str] = Field(default_factory=dict)


class ScheduledJob(BaseModel):
    """The whole object. The CRD's root schema is generated from spec and status."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    metadata: ObjectMeta
    spec: ScheduledJobSpec
    status: ScheduledJobStatus = Field(default_factory=ScheduledJobStatus)
