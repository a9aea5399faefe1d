"""Who may use a Temporal connection: pure rules over the connection's spec, the
ScheduledJob and its namespace's labels. No I/O, no SDK types."""

from __future__ import annotations

from sundial.api.connection_models import (
    ClusterTemporalConnectionSpec,
    TemporalConnectionSpec,
)
from sundial.api.models import ConnectionRef, ScheduledJob
from sundial.planning.selector import selector_matches


def refusal(
    sj: ScheduledJob,
    ref: ConnectionRef,
    spec: TemporalConnectionSpec,
    namespace_labels: dict[str, str] | None,
) -> str | None:
    """Why this ScheduledJob may not use this connection, or None if it may.
    `namespace_labels` is needed (not None) for a ClusterTemporalConnection only."""
    if isinstance(spec, ClusterTemporalConnectionSpec):
        labels = namespace_labels or {}
        if not selector_matches(spec.namespace_selector, labels):
            return (
                f"ClusterTemporalConnection {ref.name} does not admit namespace "
                f"{sj.metadata.namespace} (its namespaceSelector does not match the "
                "namespace's labels): ask the administrator to admit it, or use a "
                "TemporalConnection in this namespace"
            )
    allowed = spec.allowed_task_queues
    workflow = sj.spec.workflow
    if allowed is not None and workflow is not None and workflow.task_queue not in allowed:
        return (
            f"{ref.kind} {ref.name} does not allow task queue {workflow.task_queue!r} "
            f"(allowedTaskQueues: {', '.join(allowed) or 'none'})"
        )
    return None
