"""The thundering herd, spread (issue 30): N ScheduledJobs at the top of every hour, as
written and with `H`, on the real local stack (never a timed test).

    python bench/spread.py --size 500

Half the objects (kubernetes) and a fifth (temporal) of each kind are applied with
`H * * * *`; the same number written `0 * * * *` are the herd. The minutes the servers
then hold are read back from them, not from Sundial: the CronJobs' spec.schedule from the
apiserver, each Temporal schedule's next action time from Temporal. Printed (and written to
<state-dir>/spread.json): how many objects start in the busiest minute, and in how many
distinct minutes the hour's starts fall, for the herd and for the spread.

The stack runs without a node (nothing needs to run: the schedules are the measure), on
ports of its own, beside anything else on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests"), str(REPO / "bench")]

from temporalio.client import Client  # noqa: E402

from localstack import LocalStack, Ports  # noqa: E402
from support import Kubectl, OperatorProcess, install_sundial  # noqa: E402

NAMESPACE = "herd"
TEMPORAL_SHARE = 5  # one object in five on temporal


def manifests(size: int, schedule: str, prefix: str) -> str:
    documents: list[dict[str, Any]] = []
    for index in range(size):
        temporal = index % TEMPORAL_SHARE == 0
        spec: dict[str, Any] = (
            {"backend": "temporal", "schedule": schedule,
             "workflow": {"type": "SundialTick", "taskQueue": "herd"}}
            if temporal
            else {"schedule": schedule, "job": {"image": "registry.example/herd:1"}}
        )  # fmt: skip
        documents.append({"apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
                          "metadata": {"name": f"{prefix}-{index}", "namespace": NAMESPACE},
                          "spec": spec})  # fmt: skip
    return "\n---\n".join(json.dumps(d) for d in documents)


def cronjob_minutes(kubectl: Kubectl, prefix: str) -> list[int]:
    listed = json.loads(kubectl.run("get", "cronjobs", "-n", NAMESPACE, "-o", "json").stdout)
    return [int(c["spec"]["schedule"].split()[0]) for c in listed["items"]
            if c["metadata"]["name"].startswith(f"{prefix}-")]  # fmt: skip


def schedule_ids(kubectl: Kubectl, prefix: str) -> list[str]:
    """The Temporal schedules made so far for the temporal-backed objects of `prefix`."""
    listed = json.loads(kubectl.run("get", "scheduledjobs", "-n", NAMESPACE, "-o", "json",
                                    timeout=120).stdout)  # fmt: skip
    return [o["status"]["backendRef"]["scheduleId"] for o in listed["items"]
            if o["metadata"]["name"].startswith(f"{prefix}-")
            and o["spec"].get("backend") == "temporal"
            and (o.get("status") or {}).get("backendRef")]  # fmt: skip


def schedule_minutes(address: str, ids: list[str]) -> list[int]:
    async def read() -> list[int]:
        client = await Client.connect(address)
        minutes = []
        for schedule_id in ids:
            described = await client.get_schedule_handle(schedule_id).describe()
            minutes.append(described.info.next_action_times[0].minute)
        return minutes

    return asyncio.run(read())


def summary(minutes: list[int]) -> dict[str, Any]:
    counts = Counter(minutes)
    return {"objects": len(minutes), "distinct_minutes": len(counts),
            "busiest_minute_starts": max(counts.values(), default=0),
            "by_minute": dict(sorted(counts.items()))}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=500, help="objects of each kind")
    parser.add_argument("--state-dir", default="/tmp/sundial-spread")
    args = parser.parse_args()

    ports = Ports(etcd=23379, apiserver=27443, kcm=31457, temporal=28233)
    os.environ["SUNDIAL_TEMPORAL_TLS"] = "0"
    with LocalStack(args.state_dir, ports, node=False) as stack:
        kubectl = Kubectl(stack.kubectl, stack.kubeconfig)
        install_sundial(kubectl, stack.temporal_address)
        kubectl.run("create", "namespace", NAMESPACE)
        operator = OperatorProcess.on(stack, "spread", log_level="INFO")
        operator.start()
        for schedule, prefix in (("0 * * * *", "herd"), ("H * * * *", "spread")):
            kubectl.run("apply", "-f", "-", stdin=manifests(args.size, schedule, prefix),
                        timeout=600)  # fmt: skip
        on_temporal = len(range(0, args.size, TEMPORAL_SHARE))
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:  # every CronJob and schedule made
            made = len(cronjob_minutes(kubectl, "spread")) + len(cronjob_minutes(kubectl, "herd"))
            scheduled = sum(len(schedule_ids(kubectl, prefix)) for prefix in ("herd", "spread"))
            if made >= 2 * (args.size - on_temporal) and scheduled >= 2 * on_temporal:
                break
            time.sleep(5)
        results: dict[str, Any] = {}
        for prefix in ("herd", "spread"):
            ids = schedule_ids(kubectl, prefix)
            results[prefix] = {
                "kubernetes": summary(cronjob_minutes(kubectl, prefix)),
                "temporal": summary(schedule_minutes(stack.temporal_address, ids)),
            }
            for backend, shown in results[prefix].items():
                print(f"{prefix:6} {backend:10} objects {shown['objects']:4}  distinct "
                      f"minutes {shown['distinct_minutes']:2}  busiest minute "
                      f"{shown['busiest_minute_starts']}")  # fmt: skip
        operator.stop()
        out = Path(args.state_dir) / "spread.json"
        out.write_text(json.dumps(results, indent=2))
        print(f"results in {out}")


if __name__ == "__main__":
    main()
