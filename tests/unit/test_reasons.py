"""Condition reasons are part of the API and named once (sundial.api.reasons): Argo CD's
health.lua testdata, the CRD's description and the operator's code use only those names."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import yaml

from sundial.api import reasons
from sundial.api.status_models import MissReason, PauseReason, RunResult

REPO = Path(__file__).resolve().parents[2]
TESTDATA = REPO / "manifests/argocd/resource_customizations/sundial.dev/ScheduledJob/testdata"


def test_every_condition_in_the_health_testdata_uses_a_named_type_and_reason() -> None:
    seen = set()
    for path in sorted(TESTDATA.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            for condition in ((document or {}).get("status") or {}).get("conditions") or []:
                seen.add(condition["type"])
                assert condition["type"] in reasons.CONDITION_TYPES, (path.name, condition)
                if condition["type"] == reasons.READY:
                    assert condition["reason"] in reasons.READY_REASONS, (path.name, condition)
                elif condition["status"] == "False" or condition["type"] == reasons.SWITCHING:
                    assert condition["reason"] in reasons.CONDITION_REASONS, (path.name, condition)
    assert reasons.READY in seen


def test_the_crd_lists_every_ready_reason() -> None:
    crd = (REPO / "crds/scheduledjobs.sundial.dev.yaml").read_text()
    missing = [reason for reason in reasons.READY_REASONS if reason not in crd]
    assert not missing


def test_no_module_spells_a_condition_reason_out() -> None:
    """A reason written as a string literal outside api/reasons.py is a second home."""
    spelled = []
    for path in (REPO / "operator/sundial").rglob("*.py"):
        if path.name == "reasons.py":
            continue
        tree = ast.parse(path.read_text())
        # An API enum's own Literal (MissReason shares WorkerUnavailable with the run
        # reasons) is that enum's one home; the test below keeps the two the same.
        enums = {id(constant) for node in ast.walk(tree)
                 if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                 and node.value.id == "Literal" and path.name == "status_models.py"
                 for constant in ast.walk(node.slice)}  # fmt: skip
        for node in ast.walk(tree):
            if id(node) in enums:
                continue
            if isinstance(node, ast.Constant) and node.value in (
                reasons.CONDITION_REASONS | reasons.RUN_REASONS
            ) - {
                reasons.READY  # also a condition type, and a printer column's text
            }:
                spelled.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value}")
    assert not spelled, spelled


def test_a_run_reason_that_is_also_a_miss_reason_is_spelled_the_same() -> None:
    assert reasons.WORKER_UNAVAILABLE in get_args(MissReason)


def test_a_refused_request_is_retried_with_the_refusals_reason() -> None:
    """One translation of the apiserver's refusals: a 403 says Forbidden wherever it
    happens (six places used to say BackendUnavailable), a 5xx or no answer says
    BackendUnavailable (Ready Unknown)."""
    from sundial.errors import api_retry
    from sundial.kube import ApiException

    def refused(status: int) -> ApiException:
        error = ApiException(status=status, reason="Refused")
        error.body = '{"message": "jobs is forbidden: no"}'
        return error

    retry = api_retry(refused(403), "confirming missed runs")
    assert (retry.reason, str(retry)) == (
        reasons.FORBIDDEN,
        "confirming missed runs: jobs is forbidden: no",
    )
    assert api_retry(refused(401), "x").reason == reasons.UNAUTHORIZED
    assert api_retry(refused(503), "x").reason == reasons.BACKEND_UNAVAILABLE
    assert api_retry(ApiException(status=0), "x").reason == reasons.BACKEND_UNAVAILABLE


def _asserted_reasons(tree: ast.AST) -> set[tuple[int, str]]:
    """The strings a test compares a `reason` (item or attribute) with."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names_reason = any(
            (isinstance(side, ast.Subscript) and isinstance(side.slice, ast.Constant)
             and side.slice.value == "reason")
            or (isinstance(side, ast.Attribute) and side.attr == "reason")
            for side in sides
        )  # fmt: skip
        if names_reason:
            found |= {
                (side.lineno, side.value)
                for side in sides
                if isinstance(side, ast.Constant) and isinstance(side.value, str)
            }
    return found


def test_every_condition_reason_a_test_asserts_is_a_named_one() -> None:
    """The tests read conditions as a user does, by the reason's text; each text they
    expect of a condition is one api/reasons.py names (a renamed reason breaks the API,
    and these tests, not silently)."""
    named = (
        reasons.CONDITION_REASONS
        | reasons.RUN_REASONS
        | set(get_args(MissReason))  # a missed or skipped run's reason
        | set(get_args(RunResult))  # a run's result
        | set(get_args(PauseReason))  # why nothing is scheduled (status.pause.reason)
        # Kubernetes's own words: the CronJob controller's Event, the Job controller's
        # reason for a failed Job (a run's reason on either backend).
        | {"SuccessfulCreate", "BackoffLimitExceeded"}
    )
    unnamed = [
        f"{path.relative_to(REPO)}:{line} {value}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        for line, value in _asserted_reasons(ast.parse(path.read_text()))
        if value not in named
    ]
    assert not unnamed, unnamed
