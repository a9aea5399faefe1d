"""A new temporal-backed object created just after a minute boundary, while its Temporal
lane is busy with that boundary's wake-ups: how long until it is Ready (never a timed test).

    python bench/lane.py --busy 40 --samples 5
    python bench/lane.py --source /tmp/old-checkout/operator   # another checkout's operator

One operator on a fresh stack (no node, its own ports), with a lane made small and slow on
purpose: two workers (so one pass at a time on the connection) and a Temporal budget of
2 requests a second. `--busy` temporal-backed objects run every minute, so each minute
boundary queues that many describes in the lane: 20 s of budget for 40. Each sample
waits for a boundary, lets 3 s pass, creates one more temporal-backed object and measures
the time until its status says Ready. A new object goes first in its lane; the question
is whether each of its passes does (at 10,000 objects the bench's "one more" p99 was
35.7 s for a temporal-backed object).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests"), str(REPO / "bench")]

from observe import ScheduledJobWatch, wait_for  # noqa: E402
from workload import Item, as_list, scheduledjob  # noqa: E402

from localstack import LocalStack, Ports  # noqa: E402
from localstack.sundial_setup import CLUSTER_RESOURCE_NAMESPACE  # noqa: E402
from support import Kubectl, OperatorProcess, free_port, install_sundial  # noqa: E402

NAMESPACE = "lane"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--busy", type=int, default=40)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument(
        "--source", type=Path, default=REPO / "operator",
        help="the operator's source root to run (default: this checkout's)",
    )  # fmt: skip
    args = parser.parse_args()
    ports = Ports(etcd=free_port(1), apiserver=free_port(1), kcm=free_port(1),
                  temporal=free_port(4))  # fmt: skip
    with LocalStack(REPO / ".stack-lane", ports, node=False) as stack:
        kubectl = Kubectl(stack.kubectl, stack.kubeconfig)
        install_sundial(kubectl, stack.temporal_address)
        kubectl.run("create", "namespace", NAMESPACE)
        busy = [Item(f"busy-{i:03d}", "minute", "temporal", "* * * * *", "UTC")
                for i in range(args.busy)]  # fmt: skip
        manifests = as_list([scheduledjob(item, NAMESPACE) for item in busy])
        kubectl.run("create", "-f", "-", stdin=json.dumps(manifests))
        env = {
            **stack.env(),
            "PYTHONPATH": os.pathsep.join([str(args.source), os.environ.get("PYTHONPATH", "")]),
            "SUNDIAL_CLUSTER_RESOURCE_NAMESPACE": CLUSTER_RESOURCE_NAMESPACE,
            "SUNDIAL_METRICS_PORT": str(free_port()),
            "SUNDIAL_HEALTH_PORT": str(free_port()),
            "SUNDIAL_LOG_LEVEL": "INFO",
            "SUNDIAL_WORKERS": "2",
            "SUNDIAL_TEMPORAL_REQUESTS_PER_SECOND": "2",
        }
        operator = OperatorProcess(env, stack.log_dir / "operator-lane.log")
        operator.start()
        watch = ScheduledJobWatch(stack.kubeconfig, NAMESPACE)
        wait_for("the busy objects Ready", lambda: watch.ready() >= args.busy, 600, every=1)
        times = []
        for sample in range(args.samples):
            now = datetime.now(UTC)
            boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
            time.sleep((boundary + timedelta(seconds=3) - now).total_seconds())
            item = Item(f"new-{sample}", "minute", "temporal", "0 3 * * *", "UTC")
            began = time.time()
            watch.custom.create_namespaced_custom_object(
                "sundial.dev", "v1alpha1", NAMESPACE, "scheduledjobs",
                scheduledjob(item, NAMESPACE),
            )  # fmt: skip
            wait_for(f"{item.name} Ready", lambda n=item.name: watch.ready_at(n), 300, every=0.05)
            times.append(watch.ready_at(item.name) - began)  # type: ignore[operator]
            print(f"{item.name}: Ready {times[-1]:.2f} s after its create "
                  f"({boundary:%H:%M} + 3 s)", flush=True)  # fmt: skip
        operator.stop()
    print(json.dumps({"busy": args.busy, "source": str(args.source), "seconds": times,
                      "median": statistics.median(times), "max": max(times)}))  # fmt: skip


if __name__ == "__main__":
    main()
