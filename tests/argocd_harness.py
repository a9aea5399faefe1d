"""Sundial's Argo CD health check, evaluated by Argo CD's own code (hack/argocd-health,
built by hack/build-argocd.sh) in each of the three ways a check can run."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from support import REPO

ARGOCD_DIR = REPO / "manifests" / "argocd"
CHECK_DIR = ARGOCD_DIR / "resource_customizations" / "sundial.dev" / "ScheduledJob"
HEALTH_LUA = CHECK_DIR / "health.lua"
HEALTH_KEY = "resource.customizations.health.sundial.dev_ScheduledJob"
OPEN_LIBS_KEY = "resource.customizations.useOpenLibs.sundial.dev_ScheduledJob"
# builtin: as a script in Argo CD's resource_customizations/ (standard libraries open);
# configmap: as the argocd-cm customization, libraries off (Argo CD's default there);
# configmap-open-libs: the same with useOpenLibs set.
MODES = ("builtin", "configmap", "configmap-open-libs")


@dataclass(frozen=True)
class Evaluated:
    """One object's health: `script` is what the Lua returned (what health_test.yaml
    compares), `health` what Argo CD shows (its deletion handling applied)."""

    script: dict[str, Any] | None
    health: dict[str, Any] | None
    error: str | None


@cache
def harness() -> Path:
    built = subprocess.run(
        [str(REPO / "hack" / "build-argocd.sh")],
        capture_output=True, text=True, check=False,
        env={**os.environ, "SUNDIAL_PYTHON": str(REPO / ".venv" / "bin" / "python")},
    )  # fmt: skip
    if built.returncode != 0:
        raise RuntimeError(f"hack/build-argocd.sh failed:\n{built.stderr[-3000:]}")
    return Path(built.stdout.strip().splitlines()[-1]) / "argocd-health"


def argocd_cm(script: str, *, open_libs: bool) -> dict[str, Any]:
    """argocd-cm holding the check, as manifests/argocd renders it."""
    data = {HEALTH_KEY: script}
    if open_libs:
        data[OPEN_LIBS_KEY] = "true"
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "argocd-cm", "namespace": "argocd"}, "data": data}  # fmt: skip


def evaluate(mode: str, objects: list[Path], workdir: Path,
             script: str | None = None) -> list[Evaluated]:  # fmt: skip
    """Each object's health as Argo CD computes it in `mode`."""
    source = script if script is not None else HEALTH_LUA.read_text()
    if mode == "builtin":
        argument = workdir / "health.lua"
        argument.write_text(source)
    else:
        argument = workdir / f"argocd-cm-{mode}.yaml"
        cm = argocd_cm(source, open_libs=mode == "configmap-open-libs")
        argument.write_text(yaml.safe_dump(cm))
    kind = "builtin" if mode == "builtin" else "configmap"
    ran = subprocess.run([str(harness()), kind, str(argument), *map(str, objects)],
                         capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    results = [json.loads(line) for line in ran.stdout.splitlines()]
    assert [r["input"] for r in results] == [str(o) for o in objects]
    return [Evaluated(r["script"], r["health"], r.get("error")) for r in results]


def health_cases(check_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """health_test.yaml's cases: (object file, expected healthStatus)."""
    spec = yaml.safe_load((check_dir / "health_test.yaml").read_text())
    return [(check_dir / case["inputPath"], case["healthStatus"]) for case in spec["tests"]]


def shown(expected: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """What Argo CD shows for a script result, as gitops-engine's pendingDeletionHealth
    turns it: a terminating object shows deletionMessage when the script set one."""
    meta = obj["metadata"]
    if meta.get("deletionTimestamp") and expected.get("deletionMessage"):
        return {"status": expected["status"], "message": expected["deletionMessage"]}
    if meta.get("deletionTimestamp"):
        blocked = ", ".join(meta.get("finalizers", []))
        message = (
            f"Pending deletion; blocked by finalizers: {blocked}" if blocked else "Pending deletion"
        )
        return {"status": "Progressing", "message": message}
    return {k: v for k, v in expected.items() if k != "deletionMessage"}
