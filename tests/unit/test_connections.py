"""Which connection a ScheduledJob's schedule is made over (connections.connection_ref)."""

from __future__ import annotations

from typing import Any

from sundial.api.models import ConnectionRef, ScheduledJob
from sundial.connections import connection_ref

DEFAULT = ConnectionRef(kind="ClusterTemporalConnection", name="default")
TEAM = {"kind": "TemporalConnection", "name": "team"}


def scheduledjob(spec: dict[str, Any], status: dict[str, Any] | None = None) -> ScheduledJob:
    return ScheduledJob.model_validate({
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "u1"},
        "spec": {"schedule": "@daily", "job": {"image": "busybox"},
                 "workflow": {"type": "w", "taskQueue": "q"}, **spec},
        "status": status or {},
    })  # fmt: skip


def test_on_temporal_the_spec_names_the_connection_or_the_default_is_used() -> None:
    assert connection_ref(scheduledjob({"backend": "temporal"}), DEFAULT) == DEFAULT
    named = scheduledjob({"backend": "temporal", "temporalConnectionRef": TEAM})
    assert connection_ref(named, DEFAULT) == ConnectionRef.model_validate(TEAM)


def test_leaving_temporal_the_schedule_is_where_status_says_it_was_made() -> None:
    # backend kubernetes refuses temporalConnectionRef, so the spec no longer names it.
    made = {"backendRef": {"kind": "TemporalSchedule", "scheduleId": "s", "connection": TEAM}}
    leaving = scheduledjob({"backend": "kubernetes"}, made)
    assert connection_ref(leaving, DEFAULT) == ConnectionRef.model_validate(TEAM)
    # Nothing recorded (a status from before connections were): the default, as before.
    assert connection_ref(scheduledjob({"backend": "kubernetes"}), DEFAULT) == DEFAULT
