"""The status patch: what the server holds after it equals what was computed, nested too."""

from __future__ import annotations

from typing import Any

from sundial.planning.status import merge_patch


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 as the API server applies it: objects merge, null removes, the rest replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


TEMPORAL = {
    "backend": "temporal",
    "backendRef": {"kind": "TemporalSchedule", "name": "shop/invoices",
                   "scheduleId": "sundial-shop/invoices", "namespace": "default"},
    "nextRunTimes": ["2026-12-02T10:01:00Z", "2026-12-02T10:02:00Z"],
    "runAccounting": {"accountedUntil": "2026-12-02T10:00:00Z", "unknown": 1},
    "conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled"}],
}  # fmt: skip
KUBERNETES = {
    "backend": "kubernetes",
    "backendRef": {"kind": "CronJob", "name": "invoices"},
    "nextRunTimes": ["2026-12-02T10:01:00Z"],
    "runAccounting": {"accountedUntil": "2026-12-02T10:00:00Z"},
    "conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled"}],
}


def test_nested_keys_that_are_gone_are_removed_with_explicit_nulls() -> None:
    patch = merge_patch(TEMPORAL, KUBERNETES)
    assert patch["backendRef"] == {"kind": "CronJob", "name": "invoices",
                                   "scheduleId": None, "namespace": None}  # fmt: skip
    assert patch["runAccounting"] == {"unknown": None}
    assert patch["nextRunTimes"] == ["2026-12-02T10:01:00Z"]  # lists are replaced whole
    assert "conditions" not in patch
    assert "backend" in patch


def test_applying_the_patch_gives_exactly_what_was_computed() -> None:
    for old, new in ((TEMPORAL, KUBERNETES), (KUBERNETES, TEMPORAL), ({}, TEMPORAL),
                     (TEMPORAL, {"backend": "temporal"})):  # fmt: skip
        assert apply_merge_patch(old, merge_patch(old, new)) == new


def test_no_change_is_no_patch() -> None:
    assert merge_patch(TEMPORAL, dict(TEMPORAL)) == {}
    assert (
        merge_patch({"backendRef": {"kind": "CronJob"}}, {"backendRef": {"kind": "CronJob"}}) == {}
    )


def test_a_value_becoming_an_object_or_leaving_one_is_replaced() -> None:
    old = {"a": "x", "b": {"c": 1}}
    new = {"a": {"d": 2}, "b": "y"}
    assert apply_merge_patch(old, merge_patch(old, new)) == new


def test_a_problem_beside_an_observed_backend_keeps_its_ready_transition_time() -> None:
    """A pass that reports a problem with what the backend in place was seen to do (a
    CronJob still running, a schedule paused because its connection was revoked) builds
    that observed status with a Ready of its own; the problem's Ready is compared with the
    one the server holds, so passes that say the same thing write nothing new."""
    from datetime import UTC, datetime, timedelta

    from sundial.api.models import ScheduledJob
    from sundial.planning.status import not_ready, status_document

    since = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    stuck = {"type": "Ready", "status": "False", "reason": "ConnectionNotAllowed",
             "message": "schedule paused: no", "lastTransitionTime": "2026-12-02T10:00:00Z",
             "observedGeneration": 1}  # fmt: skip
    sj = ScheduledJob.model_validate({
        "metadata": {"name": "invoices", "namespace": "shop", "uid": "u", "generation": 1},
        "spec": {"schedule": "@daily", "backend": "temporal",
                 "workflow": {"type": "w", "taskQueue": "q"}},
        "status": {"backend": "temporal", "conditions": [stuck], "observedGeneration": 1,
                   "nextRunTimes": ["2026-12-02T10:01:00Z"]},
    })  # fmt: skip
    later = since + timedelta(minutes=5)
    healthy = {"type": "Ready", "status": "True", "reason": "PausedInTemporal",
               "message": "paused", "lastTransitionTime": "2026-12-02T10:05:00Z"}  # fmt: skip
    observed = sj.status.model_copy(update={"conditions": [
        sj.status.conditions[0].model_validate(healthy)]})  # fmt: skip
    status = not_ready(sj, "ConnectionNotAllowed", "schedule paused: no", now=later,
                       observed=observed)  # fmt: skip
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.last_transition_time == since
    assert merge_patch(status_document(sj.status), status_document(status)) == {}
