"""python -m localstack up|down|env|leftovers (with PYTHONPATH=hack)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from . import host
from .argocd import ArgoCD
from .common import STOP_TIMEOUT, StackError, default_state_dir, log
from .process import PidRecord, kill_all, stop_leftovers
from .stack import LocalStack


@contextlib.contextmanager
def interrupt_on_termination() -> Iterator[None]:
    """Turns SIGINT, SIGTERM and SIGHUP into KeyboardInterrupt, so the stack unwinds.

    Later signals are ignored: the first one already started an orderly shutdown, which
    is bounded by STOP_TIMEOUT, and a second Ctrl-C must not cut it short.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, action in previous.items():
            signal.signal(sig, action)


def source_line(stack: LocalStack) -> str:
    """The one line to paste: kubectl and temporal on PATH, KUBECONFIG and TEMPORAL_ADDRESS."""
    script = stack.env_file
    with contextlib.suppress(ValueError):
        script = script.relative_to(Path.cwd())
    return f"source {script}"


def up(stack: LocalStack, command: Sequence[str] = (), argocd: bool = False) -> int:
    """Runs the stack until Ctrl-C/SIGTERM, or, given a command, until the command exits.

    The command gets the stack's environment (KUBECONFIG, TEMPORAL_ADDRESS, PATH with
    kubectl), e.g. ``up(stack, ["python", "-m", "sundial"])``. With argocd, Argo CD's
    controller and repo server run beside it (localstack/argocd.py).
    """
    child: subprocess.Popen[bytes] | None = None
    gitops = ArgoCD(stack) if argocd else None
    with interrupt_on_termination():
        try:
            stack.start()
            if gitops is not None:
                gitops.start()
                log(f"Argo CD in namespace argocd; git repositories in {gitops.git_root}")
            node = "a node, " if stack.with_node else "no node (Pods never run), "
            print(
                f"\nKubernetes {stack.apiserver_url} ({node}logs in {stack.log_dir}) and "
                f"Temporal {stack.temporal_address} are up. In another shell:\n\n"
                f"  {source_line(stack)}\n"
                "  kubectl get pods -A\n",
                flush=True,
            )
            if command:
                env = {**os.environ, **stack.env()}
                env["PATH"] = f"{stack.kubectl.parent}{os.pathsep}{env.get('PATH', '')}"
                child = subprocess.Popen(list(command), env=env)
                while child.poll() is None:
                    stack.check()
                    if gitops is not None:
                        gitops.check()
                    time.sleep(0.5)
                return child.returncode
            print("Ctrl-C stops everything.", flush=True)
            while True:
                stack.check()
                if gitops is not None:
                    gitops.check()
                time.sleep(1)
        except KeyboardInterrupt:
            log("\nstopping")
            return 130 if child is None else _stop_child(child)
        except StackError as error:
            log(f"error: {error}")
            if child is not None:
                _stop_child(child)
            return 1
        finally:
            if gitops is not None:
                gitops.stop()
            stack.stop()


def _stop_child(child: subprocess.Popen[bytes]) -> int:
    # The child shares our terminal, so Ctrl-C has reached it too; SIGTERM covers the
    # SIGTERM and `down` cases, and SIGKILL the stubborn.
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return child.returncode


def clean_node() -> int:
    """Removes what a node left on this machine, unless a live stack's node holds it."""
    if os.geteuid() != 0:
        return 0
    lock = host.HostLock()
    try:
        lock.acquire(Path.cwd())
    except StackError:
        return 0  # a running node, which its own stack stops
    try:
        left = host.leftovers()
        if left:
            log("removing what a node left behind:\n  " + "\n  ".join(left))
        host.reset()
        still = host.leftovers()
        if still:
            log("could not remove:\n  " + "\n  ".join(still))
            return 1
        return 0
    finally:
        lock.release()


def down(state_dir: Path) -> int:
    """Stops a stack left running in `state_dir`, whether its owner is alive or not, and
    cleans up after a node that nobody runs any more."""
    pid_dir = state_dir / "pids"
    owner = PidRecord.load(pid_dir / "owner.pid")
    stopped = False
    if owner is not None and owner.pid != os.getpid() and owner.alive():
        # The owner stops its servers in order; only if it cannot are they killed below.
        log(f"asking pid {owner.pid} ({owner.cmdline}) to stop")
        kill_all([owner], timeout=2 * STOP_TIMEOUT + 30)
        stopped = True
    killed = stop_leftovers(pid_dir)
    (pid_dir / "owner.pid").unlink(missing_ok=True)
    (state_dir / "env.sh").unlink(missing_ok=True)
    if killed:
        log(f"killed {', '.join(killed)}")
    elif not stopped:
        log(f"nothing running in {state_dir}")
    return clean_node()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localstack", description=__doc__)
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="default: $SUNDIAL_STACK_DIR or .stack"
    )
    sub = parser.add_subparsers(dest="action", required=True)
    up_parser = sub.add_parser("up", help="start the stack in the foreground")
    up_parser.add_argument("--keep-data", action="store_true", help="keep etcd and Temporal data")
    up_parser.add_argument("--no-node", action="store_true", help="no kubelet: Pods never run")
    up_parser.add_argument(
        "--argocd", action="store_true", help="Argo CD's controller and repo server beside it"
    )
    up_parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND to run")
    sub.add_parser("down", help="stop a stack left running, clean up a crashed node")
    sub.add_parser("env", help="print export lines for a running stack")
    sub.add_parser("leftovers", help="list what a node left on this machine (exit 1 if any)")
    args = parser.parse_args(argv)
    state_dir: Path = (args.state_dir or default_state_dir()).resolve()

    if args.action == "down":
        return down(state_dir)
    if args.action == "leftovers":
        left = host.leftovers()
        print("\n".join(left) if left else "nothing", flush=True)
        return 1 if left else 0
    if args.action == "env":
        script = state_dir / "env.sh"
        owner = PidRecord.load(state_dir / "pids" / "owner.pid")
        if not script.is_file() or owner is None or not owner.alive():
            log(f"no stack running in {state_dir}: python -m localstack up")
            return 1
        print(script.read_text(), end="")
        return 0
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    node = False if args.no_node else None
    stack = LocalStack(state_dir, keep_data=args.keep_data, node=node)
    return up(stack, command, argocd=args.argocd)


if __name__ == "__main__":
    sys.exit(main())
