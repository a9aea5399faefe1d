"""Who may use a connection (connection_policy.py), and when a schedule has moved
(the temporal backend's placement rules): pure functions, no servers."""

from __future__ import annotations

from typing import Any

import pytest

from sundial.api.connection_models import (
    ClusterTemporalConnectionSpec,
    LabelSelector,
    TemporalConnectionSpec,
)
from sundial.api.models import BackendRef, ConnectionRef, ScheduledJob
from sundial.backends.temporal.made import MadeSchedule, previous_schedule, same_place
from sundial.planning.connection_policy import refusal
from sundial.planning.selector import selector_matches

LABELS = {"kubernetes.io/metadata.name": "payments", "team": "pay", "tier": "prod"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ({}, True),
        ({"matchLabels": {"team": "pay"}}, True),
        ({"matchLabels": {"team": "pay", "tier": "dev"}}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["prod"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["dev"]}]}, False),
        ({"matchExpressions": [{"key": "nope", "operator": "In", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}]}, False),
        ({"matchExpressions": [{"key": "nope", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "nope", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, False),
        (
            {
                "matchLabels": {"team": "pay"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}],
            },
            False,
        ),
    ],
)
def test_label_selector_semantics(selector: dict[str, Any], matches: bool) -> None:
    assert selector_matches(LabelSelector.model_validate(selector), LABELS) is matches


def job(namespace: str = "payments", task_queue: str = "q") -> ScheduledJob:
    return ScheduledJob.model_validate(
        {
            "metadata": {"name": "invoices", "namespace": namespace},
            "spec": {
                "backend": "temporal",
                "schedule": "@daily",
                "workflow": {"type": "T", "taskQueue": task_queue},
            },
        }
    )


CLUSTER_REF = ConnectionRef(kind="ClusterTemporalConnection", name="shared")


def cluster_spec(**extra: Any) -> ClusterTemporalConnectionSpec:
    return ClusterTemporalConnectionSpec.model_validate({"address": "t:7233", **extra})


def test_a_cluster_connection_admits_only_the_namespaces_its_selector_matches() -> None:
    only_payments = cluster_spec(
        namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "payments"}}
    )
    assert refusal(job(), CLUSTER_REF, only_payments, LABELS) is None
    other = {"kubernetes.io/metadata.name": "shop"}
    why = refusal(job("shop"), CLUSTER_REF, only_payments, other)
    assert why is not None
    assert "does not admit namespace shop" in why


def test_a_cluster_connection_needs_a_selector() -> None:
    with pytest.raises(ValueError, match="namespaceSelector"):
        ClusterTemporalConnectionSpec.model_validate({"address": "t:7233"})


def test_allowed_task_queues_are_enforced() -> None:
    spec = TemporalConnectionSpec.model_validate({"address": "t:7233", "allowedTaskQueues": ["q"]})
    ref = ConnectionRef(name="own")
    assert refusal(job(task_queue="q"), ref, spec, None) is None
    why = refusal(job(task_queue="payroll"), ref, spec, None)
    assert why is not None
    assert "task queue 'payroll'" in why


def test_a_schedule_made_elsewhere_is_a_move_and_unknown_parts_are_not() -> None:
    ref = ConnectionRef(name="own")
    desired = MadeSchedule(ref, "sundial/payments/invoices", "t:7233", "default")
    # Status from before connections were recorded names no address or connection.
    legacy = BackendRef(
        kind="TemporalSchedule", namespace="default", schedule_id="sundial/payments/invoices"
    )
    previous = previous_schedule(legacy, ref)
    assert previous is not None
    assert same_place(previous, desired)
    moved_namespace = BackendRef(
        kind="TemporalSchedule",
        namespace="other",
        schedule_id="sundial/payments/invoices",
        address="t:7233",
        connection=ref,
    )
    previous = previous_schedule(moved_namespace, ref)
    assert previous is not None
    assert not same_place(previous, desired)
    new_prefix = MadeSchedule(ref, "cluster-b/payments/invoices", "t:7233", "default")
    assert not same_place(desired, new_prefix)
    other_connection = MadeSchedule(CLUSTER_REF, desired.schedule_id, "t:7233", "default")
    assert not same_place(desired, other_connection)
    assert previous_schedule(BackendRef(kind="CronJob", name="invoices"), ref) is None
