"""Sundial's Argo CD health check (manifests/argocd), run by Argo CD's own code in the
three ways Argo CD runs a check: its health_test.yaml cases (real objects captured from
the local stack by tests/integration/test_argocd_health.py) give the same verdict in each."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from argocd_harness import (
    ARGOCD_DIR,
    CHECK_DIR,
    HEALTH_KEY,
    HEALTH_LUA,
    MODES,
    evaluate,
    harness,
    health_cases,
    shown,
)

pytestmark = pytest.mark.argocd


@pytest.mark.parametrize("mode", MODES)
def test_every_case_gives_its_health_in_each_mode(mode: str, tmp_path: Path) -> None:
    cases = health_cases(CHECK_DIR)
    assert len(cases) >= 10
    results = evaluate(mode, [path for path, _ in cases], tmp_path)
    for (path, expected), result in zip(cases, results, strict=True):
        assert result.error is None, (path.name, result.error)
        assert result.script == expected, path.name
        obj = yaml.safe_load(path.read_text())
        assert result.health == shown(expected, obj), path.name


def test_the_harness_gives_what_argo_cds_own_tests_expect(tmp_path: Path) -> None:
    """Argo CD's built-in CronJob check through the harness: exactly what its own
    health_test.yaml says, so the harness evaluates as Argo CD does."""
    upstream = harness().parent / "upstream-cronjob"
    cases = health_cases(upstream)
    script = (upstream / "health.lua").read_text()
    results = evaluate("builtin", [path for path, _ in cases], tmp_path, script=script)
    assert [r.script for r in results] == [expected for _, expected in cases]


def test_without_open_libraries_the_string_library_is_absent(tmp_path: Path) -> None:
    """The modes differ as Argo CD's do: a check that calls string.format works built in
    and fails as an argocd-cm customization unless useOpenLibs is set. (Sundial's check
    uses no library, so it passes in all three.)"""
    script = 'return {status = "Healthy", message = string.format("%d runs", 3)}'
    obj = next(iter(health_cases(CHECK_DIR)))[0]
    verdicts = {mode: evaluate(mode, [obj], tmp_path, script=script)[0] for mode in MODES}
    assert verdicts["builtin"].script == {"status": "Healthy", "message": "3 runs"}
    assert verdicts["configmap-open-libs"].script == {"status": "Healthy", "message": "3 runs"}
    assert verdicts["configmap"].error is not None
    assert verdicts["configmap"].health is not None
    assert verdicts["configmap"].health["status"] == "Unknown"


def test_the_argocd_cm_snippet_is_the_script() -> None:
    """manifests/argocd generates argocd-cm's key from the one health.lua: no copy to drift."""
    kustomization = yaml.safe_load((ARGOCD_DIR / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["name"] == "argocd-cm"
    key, _, relative = generator["files"][0].partition("=")
    assert key == HEALTH_KEY
    assert (ARGOCD_DIR / relative).resolve() == HEALTH_LUA.resolve()
