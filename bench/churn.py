"""Nothing per object grows with time (issue 25.13): the operator's memory and open
connections over create/run/delete cycles, on the real local stack (never a timed test).

    python bench/churn.py --cycles 2000

Each cycle makes a namespace's worth of churn on both backends: a kubernetes-backed and a
temporal-backed ScheduledJob are created, asked to run now (a Job; a workflow), and
deleted with their runs; every 50 cycles the namespace itself goes, with its own
TemporalConnection and labels, and a new one comes. Every `--every` cycles the operator's
RSS, open file descriptors and TCP connections are sampled from /proc. A bounded operator
levels off; one that keeps something per object climbs with the cycles.

The stack runs without a node (Jobs are made, not run: their records and deletions are
what the operator keeps), on ports of its own, beside anything else on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests"), str(REPO / "bench")]

from observe import Process  # noqa: E402

from localstack import LocalStack, Ports  # noqa: E402
from support import Kubectl, OperatorProcess, install_sundial  # noqa: E402


def open_counts(pid: int) -> tuple[int, int]:
    """(file descriptors, TCP connections established) of a process."""
    fds = os.listdir(f"/proc/{pid}/fd")
    inodes = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    established = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # ESTABLISHED, ours
                established += 1
    return len(fds), established


def manifests(namespace: str, cycle: int) -> str:
    """Odd cycles' temporal object uses the namespace's own TemporalConnection, even ones
    the default ClusterTemporalConnection (whose admission reads the namespace's labels)."""
    job = {"image": "registry.example/churn:1", "cronJob": "churn"}
    workflow = {"type": "SundialTick", "taskQueue": "sundial-churn", "args": ["x"]}
    documents = [
        {"apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
         "metadata": {"name": f"k-{cycle}", "namespace": namespace,
                      "annotations": {"sundial.dev/run-now": f"r{cycle}"}},
         "spec": {"schedule": "0 0 1 1 *", "job": job}},
        {"apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
         "metadata": {"name": f"t-{cycle}", "namespace": namespace,
                      "annotations": {"sundial.dev/run-now": f"r{cycle}"}},
         "spec": {"backend": "temporal", "schedule": "0 0 1 1 *", "workflow": workflow}},
    ]  # fmt: skip
    if cycle % 2:
        documents[1]["spec"]["temporalConnectionRef"] = {"kind": "TemporalConnection",
                                                         "name": "own"}  # fmt: skip
    return "\n---\n".join(json.dumps(d) for d in documents)


def namespace_manifest(namespace: str, temporal_address: str) -> str:
    documents = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": namespace, "labels": {"churn": namespace}}},
        {"apiVersion": "sundial.dev/v1alpha1", "kind": "TemporalConnection",
         "metadata": {"name": "own", "namespace": namespace},
         "spec": {"address": temporal_address, "namespace": "default"}},
    ]  # fmt: skip
    return "\n---\n".join(json.dumps(d) for d in documents)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--every", type=int, default=100, help="cycles between samples")
    parser.add_argument("--state-dir", default="/tmp/sundial-churn")
    args = parser.parse_args()

    ports = Ports(etcd=22379, apiserver=26443, kcm=30457, temporal=27233)
    os.environ["SUNDIAL_TEMPORAL_TLS"] = "0"
    with LocalStack(args.state_dir, ports, node=False) as stack:
        kubectl = Kubectl(stack.kubectl, stack.kubeconfig)
        install_sundial(kubectl, stack.temporal_address)
        operator = OperatorProcess.on(stack, "churn", connection_refresh_seconds="5",
                                      log_level="INFO")  # fmt: skip
        operator.start()
        time.sleep(5)
        assert operator.proc is not None
        process = Process(operator.proc.pid)
        samples = []
        namespace = ""
        began = time.monotonic()
        for cycle in range(args.cycles + 1):
            if cycle % 50 == 0:
                if namespace:
                    kubectl.run("delete", "namespace", namespace, "--wait=false")
                namespace = f"churn-{cycle // 50}"
                made = namespace_manifest(namespace, stack.temporal_address)
                kubectl.run("apply", "-f", "-", stdin=made)
            if cycle % args.every == 0:
                fds, connections = open_counts(process.pid)
                samples.append({
                    "cycle": cycle, "seconds": round(time.monotonic() - began),
                    "rss_mib": round(process.memory_mib(), 1), "fds": fds,
                    "tcp": connections,
                })  # fmt: skip
                print(json.dumps(samples[-1]), flush=True)
            kubectl.run("apply", "-f", "-", stdin=manifests(namespace, cycle))
            time.sleep(0.2)
            kubectl.run("delete", "scheduledjob", f"k-{cycle}", f"t-{cycle}", "-n", namespace,
                        "--wait=false")  # fmt: skip
        kubectl.run("delete", "namespace", namespace, "--wait=false")
        time.sleep(60)  # what the deletions leave, after the operator has seen them
        fds, connections = open_counts(process.pid)
        samples.append({"cycle": "settled", "seconds": round(time.monotonic() - began),
                        "rss_mib": round(process.memory_mib(), 1), "fds": fds,
                        "tcp": connections})  # fmt: skip
        print(json.dumps(samples[-1]), flush=True)
        operator.stop()
        out = Path(args.state_dir) / "churn.json"
        out.write_text(json.dumps(samples, indent=2))
        subprocess.run(["tail", "-n", "3", str(operator.log_file)], check=False)
        print(f"samples in {out}")


if __name__ == "__main__":
    main()
