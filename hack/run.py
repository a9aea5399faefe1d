"""`make run`: the operator in the foreground, on the local stack or on your own cluster.

    python hack/run.py --cluster local      # build/reuse the real servers, start them
    python hack/run.py --cluster existing   # your current kubeconfig context

Installs the CRDs (locally also the default ClusterTemporalConnection, to the stack's
Temporal), applies manifests/samples/ (and, on the local stack's node, a `hello`
ScheduledJob that really runs), prints how to reach everything, then runs
`python -m sundial` and `python -m sundial worker` until Ctrl-C, which stops them and
(local) the stack.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from localstack import LocalStack
from localstack.cli import source_line
from localstack.sundial_setup import default_connection_manifest

REPO = Path(__file__).resolve().parent.parent
CRDS = [
    f"crd/{plural}.sundial.dev"
    for plural in ("scheduledjobs", "temporalconnections", "clustertemporalconnections")
]


def kubectl_for_existing_cluster() -> str:
    found = shutil.which("kubectl")
    if found:
        return found
    built = subprocess.run(
        [str(REPO / "hack" / "build-binaries.sh")], check=True, capture_output=True, text=True
    ).stdout.split()
    # The first line is the Kubernetes binaries' directory (the second, containerd's).
    return str(Path(built[0]) / "kubectl")


def install(kubectl: str, env: dict[str, str]) -> None:
    def run(*args: str) -> None:
        subprocess.run([kubectl, *args], check=True, env=env)

    run("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    run("wait", "--for=condition=Established", "--timeout=60s", *CRDS)
    run("apply", "-f", str(REPO / "manifests" / "samples"))


def hello(image: str) -> str:
    """A ScheduledJob whose Jobs really run on the local node, every minute."""
    return f"""
apiVersion: sundial.dev/v1alpha1
kind: ScheduledJob
metadata:
  name: hello
  namespace: default
spec:
  schedule: "* * * * *"
  job:
    image: {image}
    command: ["sh", "-c", "echo hello from $(hostname) at $(date)"]
    ttlSecondsAfterFinished: 600
"""


def run_operator(env: dict[str, str]) -> int:
    """The operator and Sundial's worker (the container jobs of backend temporal), until
    Ctrl-C stops both; the operator's exit status."""
    operator = subprocess.Popen([sys.executable, "-m", "sundial"], env=env)
    worker = subprocess.Popen([sys.executable, "-m", "sundial", "worker"], env=env)
    try:
        return operator.wait()
    except KeyboardInterrupt:
        for process in (operator, worker):
            process.send_signal(signal.SIGINT)
        return _stopped(operator)
    finally:
        worker.send_signal(signal.SIGINT)
        _stopped(worker)


def _stopped(process: subprocess.Popen[bytes]) -> int:
    try:
        return process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", choices=["local", "existing"], default="local")
    args = parser.parse_args()
    # SIGTERM (e.g. from a process manager) stops everything like Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)

    if args.cluster == "existing":
        env = dict(os.environ)
        kubectl = kubectl_for_existing_cluster()
        install(kubectl, env)
        print(f"\nSundial runs against your current context ({kubectl} config current-context).")
        print("Try: kubectl get scheduledjobs -A\n", flush=True)
        return run_operator(env)

    with LocalStack() as stack:
        env = {**os.environ, **stack.env()}
        install(str(stack.kubectl), env)
        subprocess.run(
            [str(stack.kubectl), "apply", "-f", "-"],
            input=default_connection_manifest(stack.temporal_address),
            text=True,
            check=True,
            env=env,
        )
        if stack.with_node:
            subprocess.run(
                [str(stack.kubectl), "apply", "-f", "-"],
                input=hello(stack.images["busybox"]),
                text=True,
                check=True,
                env=env,
            )
        pods = (
            "  kubectl get jobs,pods               # hello runs every minute\n"
            "  kubectl logs job/<name>             # a Job's log, name from get jobs\n"
            if stack.with_node
            else "  (no node: SUNDIAL_NODE=0, Pods are created but never run)\n"
        )
        print(
            "\nThe local stack is up. In another terminal, paste this one line:\n\n"
            f"  {source_line(stack)}\n\n"
            "then, for example:\n"
            "  kubectl get scheduledjobs -A\n"
            f"{pods}"
            "  temporal schedule list\n"
            f"Server logs: {stack.log_dir}\n"
            "Ctrl-C stops the operator and the stack.\n",
            flush=True,
        )
        try:
            return run_operator(env)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
