"""Which connection a ScheduledJob's schedule is made over (connections.connection_ref)."""

from __future__ import annotations

from typing import Any

from sundial.api.models import ConnectionRef, ScheduledJob
from sundial.backends.temporal.connections import connection_ref

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


class ConnectionsKube:
    """The reads a resolver makes, answered: one ClusterTemporalConnection admitting all."""

    async def read_sundial_object(self, plural: str, name: str, namespace: str | None = None
                                  ) -> dict[str, Any] | None:  # fmt: skip
        return {"spec": {"address": "temporal:7233", "namespace": "default",
                         "namespaceSelector": {}}}  # fmt: skip

    async def namespace_labels(self, name: str) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": name}


def test_connections_and_namespaces_no_object_asks_for_any_more_are_forgotten() -> None:
    """Issue 25.13: an entry per (connection, namespace) and each namespace's labels were
    kept for ever, a deleted namespace's too."""
    import asyncio
    from typing import cast

    from sundial.backends.temporal.connections import ENTRY_IDLE_SECONDS, ConnectionResolver
    from sundial.kube import KubeClient

    now = [1000.0]
    resolver = ConnectionResolver(
        cast(KubeClient, ConnectionsKube()), default_connection="default",
        cluster_resource_namespace="sundial-system", refresh_seconds=30,
        clock=lambda: now[0],
    )  # fmt: skip

    def in_namespace(namespace: str) -> ScheduledJob:
        sj = scheduledjob({"backend": "temporal"})
        return sj.model_copy(update={"metadata": sj.metadata.model_copy(
            update={"namespace": namespace})})  # fmt: skip

    async def scenario() -> tuple[int, int, int]:
        for namespace in ("gone", "kept"):
            await resolver.resolve(in_namespace(namespace))
        both = resolver.held()
        now[0] += ENTRY_IDLE_SECONDS / 2
        await resolver.resolve(in_namespace("kept"))
        now[0] += ENTRY_IDLE_SECONDS / 2 + 1
        await resolver.resolve(in_namespace("kept"))  # a resolve sweeps now and then
        after = resolver.held()
        now[0] += ENTRY_IDLE_SECONDS + 1  # nobody asks any more: the entry goes too
        resolver.sweep()
        return both, after, resolver.held()

    both, after, at_last = asyncio.run(scenario())
    assert both == 3  # the cluster connection's entry, two namespaces' labels
    assert after == 2  # "gone"'s labels went
    assert at_last == 0
