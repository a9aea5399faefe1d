"""The Temporal connection resolver's pure decisions (backends/temporal/connections.py):
which connection a ScheduledJob's schedule is made over (connection_ref), which resource a
reference names (connection_key), and what is read again and forgotten when. Who may use a
connection (admission) is planning/connection_policy.py's: test_connection_policy.py."""

from __future__ import annotations

from typing import Any

from sundial.api.models import ConnectionRef, ScheduledJob
from sundial.backends.temporal.connections import (
    ENTRY_IDLE_SECONDS,
    connection_key,
    connection_ref,
    read_again,
    sweep_due,
    to_forget,
)

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


# ---- what the resolver keeps, and when it reads again (pure: `now` passed in) -----------------
# The resolver itself against the real apiserver: tests/integration/test_connection_resolver.py.

CLUSTER = connection_key("ClusterTemporalConnection", "default", "gone")


def test_the_cluster_connection_is_one_entry_for_every_namespace_a_namespaced_one_is_not() -> None:
    assert connection_key("ClusterTemporalConnection", "default", "kept") == CLUSTER
    team = connection_key("TemporalConnection", "team", "shop")
    assert team != connection_key("TemporalConnection", "team", "other")


def test_what_was_read_is_read_again_once_a_refresh_period_has_passed() -> None:
    assert not read_again(1000.0, 1029.9, 30)
    assert read_again(1000.0, 1030.0, 30)


def test_a_resolve_sweeps_a_refresh_period_after_the_last_sweep_at_most_the_idle_time() -> None:
    assert not sweep_due(1000.0, 1029.0, 30)
    assert sweep_due(1000.0, 1030.0, 30)
    assert sweep_due(1000.0, 1000.0 + ENTRY_IDLE_SECONDS, 10 * ENTRY_IDLE_SECONDS)
    assert not sweep_due(1000.0, 999.0 + ENTRY_IDLE_SECONDS, 10 * ENTRY_IDLE_SECONDS)


def test_connections_and_namespaces_no_object_asks_for_any_more_are_forgotten() -> None:
    """Issue 25.13: an entry per (connection, namespace) and each namespace's labels were
    kept for ever, a deleted namespace's too. Objects in "gone" and "kept" resolved at
    1000; "kept"'s again at the middle of the idle time and at its end."""
    middle = 1000.0 + ENTRY_IDLE_SECONDS / 2
    end = middle + ENTRY_IDLE_SECONDS / 2 + 1
    # The sweep at the end: the entry was asked for at the middle, the labels read then.
    idle, stale = to_forget({CLUSTER: middle}, {"gone": 1000.0, "kept": middle}, end, 30)
    assert idle == []
    assert sorted(stale) == ["gone", "kept"]  # "kept"'s are read again by its resolve
    # Nobody asks any more: the entry goes too, and the labels read at the end.
    later = end + ENTRY_IDLE_SECONDS + 1
    assert to_forget({CLUSTER: end}, {"kept": end}, later, 30) == ([CLUSTER], ["kept"])
    # Asked for within the idle time, read within the refresh period: kept.
    assert to_forget({CLUSTER: end}, {"kept": end}, end + 29, 30) == ([], [])
