"""Issue 14.11: Sundial's slot maths against each backend's own parser, on the real servers.

For every expression of the table: the kube-apiserver's verdict on a CronJob (a server-side
dry run), robfig/cron's (the CronJob controller's parser, run by hack/robfig) acceptance
and next times, and the Temporal dev server's acceptance and next_action_times. Where
Sundial accepts an expression for a backend, the backend must accept it and the next times
must be the same; where the backend refuses, Sundial must refuse too, at validation time.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleSpec,
    ScheduleState,
)

from sundial.api.models import ScheduledJobSpec
from sundial.planning.schedule import ScheduleError, timetable
from support import REPO, Kubectl, TemporalSide

pytestmark = pytest.mark.cluster

ROBFIG_VERSION = "v3.0.1"  # hack/robfig/go.mod: the version k8s.io/kubernetes requires
COUNT = 5
AFTER = datetime(2027, 3, 25, 0, 0, tzinfo=UTC)  # the days before Europe's DST switch

ZONES = ["UTC", "Europe/Berlin", "America/New_York"]
EXPRESSIONS = [
    "* * * * *", "*/5 * * * *", "*/1 * * * *", "0 * * * *", "0 0 * * *", "30 2 * * *",
    "15 3 * * *", "0 0 1 * *", "0 0 31 * *", "0 0 29 2 *", "0 0 28-31 * *", "0 12 * * 0",
    "0 12 * * 6", "0 12 * * 7", "0 12 * * 1-5", "0 12 * * 5-7", "0 12 * * MON-FRI",
    "0 12 * * mon,wed,fri", "0 12 * * SUN", "0 9 * JAN-MAR *", "0 9 1 jan *",
    "0 9 * * 1,7", "0 0 1 * 1", "0 0 */1 * 1", "0 0 */2 * 1", "0 0 1-7 * 1",
    "0 0 * * */2", "0 0 15 * 5", "0 0 ? * *", "0 12 ? * MON", "0 0 1 ? *", "5,35 * * * *",
    "0-10/5 * * * *", "0 0-23/6 * * *", "0 8-17 * * 1-5", "59 23 31 12 *", "0 0 1 1 *",
    "0 0 1 */3 *", "1-59/2 * * * *", "0 2,14 * * *", "*/15 9-17 * * MON-FRI",
    "0 0 L * *", "0 0 * * 5L", "0 0 * * 1#2", "0 0 15W * *", "60 * * * *", "0 24 * * *",
    "0 0 0 * *", "0 0 32 * *", "0 0 * 13 *", "0 0 * * 8", "*/0 * * * *", "0 0 30 2 *",
    "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually",
    "0 0 * * * *", "0 0 *", "0 3 * * 0-6", "0 1 * * 0,6", "30 1 * * *",
]  # fmt: skip
CASES = [(expr, zone) for expr in EXPRESSIONS for zone in ZONES]
# What Sundial refuses on purpose though the backend takes it (a backend may be looser,
# never Sundial): a schedule that can never fire is a mistake to report, not to run; a
# seconds field and Temporal's `#` are outside the 5-field cron that both backends share.
DELIBERATE_REFUSALS = {
    ("kubernetes", "0 0 30 2 *"): "never fires",
    ("temporal", "0 0 30 2 *"): "never fires",
    ("temporal", "0 0 * * * *"): "has 6 fields",
    ("temporal", "0 0 * * 1#2"): "not supported",
}


def sundial_verdict(
    expr: str, zone: str, backend: str, after: datetime = AFTER
) -> tuple[bool, list[datetime], str]:
    """(accepted, next times after `after`, why not)."""
    spec: dict[str, Any] = {"backend": backend, "schedule": expr, "timeZone": zone}
    if backend == "kubernetes":
        spec["job"] = {"image": "x"}
    else:
        spec["workflow"] = {"type": "w", "taskQueue": "q"}
    try:
        table = timetable(ScheduledJobSpec.model_validate(spec))
    except ScheduleError as error:
        return False, [], error.message
    return True, table.next_runs(after, COUNT), ""


@pytest.fixture(scope="module")
def robfig() -> Path:
    """hack/robfig built once and cached by version, like the Kubernetes binaries."""
    cache = Path(os.environ.get("SUNDIAL_CACHE_DIR") or Path.home() / ".cache" / "sundial")
    binary = cache / "bin" / f"robfig-{ROBFIG_VERSION}" / "robfig"
    if not binary.exists():
        go = shutil.which("go") or str(REPO / ".venv" / "bin" / "go")
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [go, "build", "-trimpath", "-o", str(binary), "."],
            cwd=REPO / "hack" / "robfig",
            env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
            check=True,
            timeout=600,
        )
    return binary


def robfig_verdicts(robfig: Path) -> dict[tuple[str, str], tuple[bool, list[datetime]]]:
    queries = "".join(
        json.dumps({"expr": e, "zone": z, "after": AFTER.isoformat(), "count": COUNT}) + "\n"
        for e, z in CASES
    )
    out = subprocess.run(
        [str(robfig)], input=queries, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    answers = [json.loads(line) for line in out.splitlines()]
    return {
        case: (not a.get("error"), [datetime.fromisoformat(t) for t in a["next"]])
        for case, a in zip(CASES, answers, strict=True)
    }


def apiserver_verdicts(kubectl: Kubectl) -> dict[tuple[str, str], bool]:
    """One server-side dry run for all CronJobs; the refused ones are named in stderr."""
    names = {case: f"parity-{i}" for i, case in enumerate(CASES)}
    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
    documents = [
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "schedule": expr,
                "timeZone": zone,
                "jobTemplate": {"spec": {"template": {"spec": pod}}},
            },
        }
        for (expr, zone), name in names.items()
    ]
    result = kubectl.run(
        "create", "--dry-run=server", "-f", "-",
        stdin="\n---\n".join(yaml.safe_dump(d) for d in documents), check=False,
    )  # fmt: skip
    return {case: f'"{name}" is invalid' not in result.stderr for case, name in names.items()}


def temporal_verdicts(
    temporal: TemporalSide,
) -> dict[tuple[str, str], tuple[bool, list[datetime], datetime]]:
    """Each expression as a real schedule, paused (nothing runs); Temporal's verdict and
    next action times, and the moment before it was asked."""
    run = uuid.uuid4().hex[:8]

    async def one(i: int, expr: str, zone: str) -> tuple[bool, list[datetime], datetime]:
        identity = f"parity-{run}-{i}"
        schedule = Schedule(
            action=ScheduleActionStartWorkflow("Parity", id=identity, task_queue="parity"),
            spec=ScheduleSpec(cron_expressions=[expr], time_zone_name=zone),
            state=ScheduleState(paused=True),
        )
        asked = datetime.now(UTC)
        try:
            handle = await temporal.client.create_schedule(identity, schedule)
        except Exception:  # refused: INVALID_ARGUMENT, or the SDK's own check
            return False, [], asked
        try:
            description = await handle.describe()
            return True, list(description.info.next_action_times[:COUNT]), asked
        finally:
            await handle.delete()

    async def all_cases() -> list[tuple[bool, list[datetime], datetime]]:
        limit = asyncio.Semaphore(16)

        async def bounded(i: int, expr: str, zone: str) -> tuple[bool, list[datetime], datetime]:
            async with limit:
                return await one(i, expr, zone)

        return await asyncio.gather(*(bounded(i, e, z) for i, (e, z) in enumerate(CASES)))

    return dict(zip(CASES, temporal.run(all_cases, timeout=300), strict=True))


def test_sundial_matches_the_cronjob_controller_and_temporal(
    kubectl: Kubectl, crd_installed: None, temporal: TemporalSide, robfig: Path
) -> None:
    assert len(EXPRESSIONS) >= 60
    apiserver = apiserver_verdicts(kubectl)
    robfig_says = robfig_verdicts(robfig)
    temporal_says = temporal_verdicts(temporal)
    problems: list[str] = []

    def compare(
        backend: str,
        case: tuple[str, str],
        theirs: tuple[bool, list[datetime]],
        ours: tuple[bool, list[datetime], str],
        parser: str,
        *,
        times_may_be_missing: bool = False,
    ) -> None:
        accepted, times, why = ours
        backend_accepts, backend_times = theirs
        if not accepted and (deliberate := DELIBERATE_REFUSALS.get((backend, case[0]))):
            if deliberate not in why:
                problems.append(f"{backend} {case}: refused, but not saying {deliberate!r}")
        elif accepted != backend_accepts:
            problems.append(
                f"{backend} {case}: Sundial {accepted} ({why}), {parser} {backend_accepts}"
            )
        elif accepted and times != backend_times and (backend_times or not times_may_be_missing):
            problems.append(f"{backend} {case}: Sundial {times} != {parser} {backend_times}")

    for case in CASES:
        expr, zone = case
        # kubernetes: the apiserver's admission and robfig's parse agree with each other
        # (the apiserver validates with robfig), and Sundial with both.
        if apiserver[case] != robfig_says[case][0]:
            problems.append(
                f"{case}: apiserver {apiserver[case]} but robfig {robfig_says[case][0]}"
            )
        compare("kubernetes", case, robfig_says[case],
                sundial_verdict(expr, zone, "kubernetes"), "robfig")  # fmt: skip
        # temporal: its next_action_times are from the moment it was asked.
        temporal_accepts, temporal_times, asked = temporal_says[case]
        ours = sundial_verdict(expr, zone, "temporal", asked - timedelta(seconds=1))
        compare("temporal", case, (temporal_accepts, temporal_times), ours, "Temporal",
                times_may_be_missing=True)  # fmt: skip
    assert problems == [], "\n".join(problems)
