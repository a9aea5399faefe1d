"""What one new ScheduledJob costs the apiserver, by its audit log (issue 32: the
minimum requests per object on the common path). An operator of its own runs as the
audited user, so every request it makes is counted."""

from __future__ import annotations

from collections import Counter

import pytest

from localstack import LocalStack
from localstack.apiserver import AUDITED_USER
from support import (
    Kubectl,
    OperatorProcess,
    audit_events,
    eventually,
    faulted_operator,
    in_shard,
    ready,
    temporal_scheduledjob,
)

pytestmark = pytest.mark.cluster

SHARD = "requests"


def requests_for(stack: LocalStack, namespace: str, name: str) -> Counter[str]:
    """The audited user's requests on the ScheduledJob `name`, as "verb[/subresource]"."""
    return Counter(
        event["verb"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        for event in audit_events(stack.log_dir / "audit.log")
        if (event.get("user") or {}).get("username") == AUDITED_USER
        and (ref := event.get("objectRef") or {}).get("resource") == "scheduledjobs"
        and ref.get("namespace") == namespace and ref.get("name") == name
    )  # fmt: skip


def test_a_new_temporal_backed_object_is_read_once_before_its_schedule_is_made(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str,
    stopped_after: list[OperatorProcess],
) -> None:  # fmt: skip
    """Its existence is confirmed once, before the finalizer goes on. The pass that then
    records where the schedule is made, and makes it, needs no second read: the record's
    own status write showed the object there, with the finalizer that keeps it until its
    schedule is deleted."""
    operator = faulted_operator(stack, "requests", SHARD, user=AUDITED_USER)
    stopped_after.append(operator)
    operator.start()
    kubectl.apply(in_shard(temporal_scheduledjob("counted", namespace, schedule="0 3 * * *"),
                           SHARD))  # fmt: skip
    eventually(lambda: ready(kubectl, "counted", namespace), timeout=90, what="counted Ready")
    # The audit log is written in batches: the status write that made it Ready shows.
    counted = eventually(
        lambda: (seen := requests_for(stack, namespace, "counted"))["patch/status"] >= 2 and seen,
        timeout=30, what="the record and the Ready status audited",
    )  # fmt: skip
    assert counted["get"] == 1, counted
    assert counted["patch"] == 1, counted  # the finalizer
