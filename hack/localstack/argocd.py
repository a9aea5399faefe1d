"""A live Argo CD beside the local stack: its application controller and repo server (the one
argocd binary built by hack/build-argocd-cli.sh), redis (Debian's package) as its cache and
`git daemon` serving local repositories on loopback. No argocd-server, Dex or UI: what it
takes to sync Applications against the stack's cluster and read their health.

Not part of LocalStack.start(): only the tests that need it start it (ArgoCD(stack).start()),
or `python -m localstack up --argocd`. Its servers keep their pid files in the stack's pid
directory, so `python -m localstack down` and the next stack start clean up after a crash.
The facts this rests on are in ../shared/reference/argocd.md on the development machines."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import POLL, REPO, StackError, log
from .process import Server, http_ok, port_open

if TYPE_CHECKING:
    from .stack import LocalStack

NAMESPACE = "argocd"
# The field manager of Sundial's health check in argocd-cm (README "GitOps"), and the one of
# what this module applies besides.
HEALTH_CHECK_MANAGER = "sundial-health-check"
SETTINGS_MANAGER = "sundial-localstack"
BUILD_SCRIPT = REPO / "hack" / "build-argocd-cli.sh"

# What a real install's argocd-server would have created: the default AppProject, open to
# every repository and destination, as Argo CD's own default is.
DEFAULT_PROJECT = {
    "apiVersion": "argoproj.io/v1alpha1",
    "kind": "AppProject",
    "metadata": {"name": "default", "namespace": NAMESPACE},
    "spec": {
        "sourceRepos": ["*"],
        "destinations": [{"server": "*", "namespace": "*"}],
        "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
    },
}
PART_OF = {"app.kubernetes.io/part-of": "argocd"}  # the label Argo CD's settings watch
# The settings manager reads argocd-secret; argocd-server would fill it, the controller
# needs only that it exists.
SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "argocd-secret", "namespace": NAMESPACE, "labels": PART_OF},
}
# Git is polled every 20 s rather than 180 s, so a commit is seen without a refresh too.
# As host processes they read it from the environment (a real install maps argocd-cm's
# timeout.reconciliation into it).
RECONCILIATION_TIMEOUT = "20s"


def free_ports(*names: str) -> dict[str, int]:
    """A distinct free loopback port per name, held open until all are picked."""
    probes: list[socket.socket] = []
    try:
        for _ in names:
            probe = socket.socket()
            probes.append(probe)
            probe.bind(("127.0.0.1", 0))
        return {name: probe.getsockname()[1] for name, probe in zip(names, probes, strict=True)}
    finally:
        for probe in probes:
            probe.close()


def build() -> Path:
    """The directory holding argocd, its role symlinks, git-verify-wrapper.sh and crds/
    (built once; minutes the first time)."""
    built = subprocess.run([str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True)
    if built.returncode != 0:
        raise StackError(f"{BUILD_SCRIPT.name} failed (exit {built.returncode})")
    return Path(built.stdout.strip().splitlines()[-1])


def rss_mb(pid: int) -> float | None:
    """Resident memory of a live process, from /proc (None where there is none)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


class GitRepo:
    """A working tree served by the git daemon as git://127.0.0.1:<port>/<name>; commits are
    made here directly, as a push would land them."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        self.url = url

    def git(self, *args: str) -> str:
        ran = subprocess.run(
            ["git", "-C", str(self.path), "-c", "user.name=sundial-tests",
             "-c", "user.email=tests@sundial.invalid", *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if ran.returncode != 0:
            raise StackError(f"git {' '.join(args)} failed: {ran.stderr.strip()}")
        return ran.stdout.strip()

    def commit(self, message: str, files: Mapping[str, str | None]) -> str:
        """Writes (or, for None, deletes) files relative to the tree, commits, returns the
        commit's sha."""
        for relative, text in files.items():
            path = self.path / relative
            if text is None:
                path.unlink(missing_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")


class ArgoCD:
    """redis, git daemon, argocd-repo-server and argocd-application-controller as host
    processes against `stack`'s cluster, with Argo CD's CRDs, the argocd namespace, the
    default AppProject and argocd-cm holding Sundial's health check."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.dir = stack.state_dir / "argocd"
        logs, pids = stack.log_dir, stack.state_dir / "pids"
        self.redis = Server("argocd-redis", logs, pids)
        self.git_daemon = Server("argocd-git-daemon", logs, pids)
        self.repo_server = Server("argocd-repo-server", logs, pids)
        self.controller = Server("argocd-application-controller", logs, pids)
        self.ports: dict[str, int] = {}
        self.bin_dir: Path | None = None

    @property
    def servers(self) -> tuple[Server, ...]:
        return (self.redis, self.git_daemon, self.repo_server, self.controller)

    @property
    def git_root(self) -> Path:
        return self.dir / "git"

    def repo(self, name: str) -> GitRepo:
        """A new (or the existing) repository `name`, branch main, served by the daemon."""
        path = self.git_root / name
        repo = GitRepo(path, f"git://127.0.0.1:{self.ports['git']}/{name}")
        if not (path / ".git").is_dir():
            path.mkdir(parents=True, exist_ok=True)
            repo.git("init", "--quiet", "--initial-branch=main")
        return repo

    def rss_mb(self) -> dict[str, float | None]:
        return {s.name: rss_mb(s.proc.pid) if s.proc is not None else None for s in self.servers}

    # -- start and stop

    def start(self, ready_timeout: float = 180.0) -> None:
        if any(server.running for server in self.servers):
            raise StackError("this ArgoCD is already started")
        redis = shutil.which("redis-server")
        if shutil.which("git") is None or redis is None:
            raise StackError(
                "Argo CD needs git and redis-server: run hack/install-node-packages.sh "
                "(or apt-get install git redis-server)"
            )
        self.bin_dir = build()  # before anything starts: the first time it takes minutes
        self.ports = free_ports("redis", "git", "repo", "repo_metrics", "controller_metrics")
        for server in self.servers:
            server.rotate_log()
        shutil.rmtree(self.dir, ignore_errors=True)
        for sub in ("redis", "git", "home", "tmp", "app/config/tls", "app/config/ssh",
                    "app/config/gpg/source", "app/config/gpg/keys", "plugins"):  # fmt: skip
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        try:
            self.redis.start(
                [redis, "--bind", "127.0.0.1", "--port", str(self.ports["redis"]),
                 "--save", "", "--appendonly", "no", "--dir", str(self.dir / "redis"),
                 # Its title would replace its argv, which the pid file is checked against.
                 "--set-proc-title", "no"],
                ports=[self.ports["redis"]],
            )  # fmt: skip
            self.git_daemon.start(
                ["git", "daemon", "--reuseaddr", "--export-all", "--informative-errors",
                 "--listen=127.0.0.1", f"--port={self.ports['git']}",
                 f"--base-path={self.git_root}", str(self.git_root)],
                ports=[self.ports["git"]], env=self._env(),
            )  # fmt: skip
            self._install()
            self._spawn_argocd()
            self.redis.wait_ready(lambda: port_open(self.ports["redis"]), ready_timeout)
            self.git_daemon.wait_ready(lambda: port_open(self.ports["git"]), ready_timeout)
            repo_health = f"http://127.0.0.1:{self.ports['repo_metrics']}/healthz"
            self.repo_server.wait_ready(lambda: http_ok(repo_health), ready_timeout)
            controller_health = f"http://127.0.0.1:{self.ports['controller_metrics']}/healthz"
            self.controller.wait_ready(lambda: http_ok(controller_health), ready_timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        # The controller first, so that it does not log the repo server and cache going away
        # as errors; the others then all at once.
        self.controller.stop()
        for server in self.servers:
            server.terminate()
        for server in self.servers:
            server.stop()

    def check(self) -> None:
        """Raises if one of the servers has exited on its own."""
        for server in self.servers:
            if server.proc is not None and server.proc.poll() is not None:
                raise server.failure(f"exited unexpectedly with code {server.proc.returncode}")

    # -- internals

    def _kubectl(self, *args: str, stdin: str | None = None) -> None:
        ran = subprocess.run(
            [str(self.stack.kubectl), f"--kubeconfig={self.stack.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if ran.returncode != 0:
            raise StackError(f"kubectl {' '.join(args)} failed: {ran.stderr.strip()}")

    def _wait_established(self, crd: str, timeout: float = 60.0) -> None:
        # Not `kubectl wait`: just after the apply the CRD may have no conditions yet, which
        # kubectl wait reports as an error instead of waiting.
        deadline = time.monotonic() + timeout
        query = '{.status.conditions[?(@.type=="Established")].status}'
        while True:
            ran = subprocess.run(
                [str(self.stack.kubectl), f"--kubeconfig={self.stack.kubeconfig}", "get",
                 f"crd/{crd}", f"-o=jsonpath={query}"],
                capture_output=True, text=True, check=False, timeout=60,
            )  # fmt: skip
            if ran.stdout.strip() == "True":
                return
            if time.monotonic() > deadline:
                raise StackError(f"CRD {crd} not Established after {timeout:.0f}s")
            time.sleep(POLL)

    def _apply(self, manifest: dict[str, Any], manager: str) -> None:
        # JSON is YAML: no yaml import needed here.
        self._kubectl("apply", "--server-side", f"--field-manager={manager}", "-f", "-",
                      stdin=json.dumps(manifest))  # fmt: skip

    def _install(self) -> None:
        """What Argo CD's install manifests would have put in the cluster, less its servers."""
        assert self.bin_dir is not None
        log("  argocd: CRDs, namespace, default AppProject, argocd-cm, argocd-secret")
        self._kubectl("apply", "--server-side", "-k", str(self.bin_dir / "crds"))
        for crd in ("applications.argoproj.io", "appprojects.argoproj.io"):
            self._wait_established(crd)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        self._apply(namespace, SETTINGS_MANAGER)
        self._apply(DEFAULT_PROJECT, SETTINGS_MANAGER)
        self._apply(SECRET, SETTINGS_MANAGER)
        # Exactly as README "GitOps" tells users to install the health check.
        self._kubectl("apply", "--server-side", f"--field-manager={HEALTH_CHECK_MANAGER}",
                      "-k", str(REPO / "manifests" / "argocd"))  # fmt: skip

    def _env(self) -> dict[str, str]:
        """Every default path under /app, /tmp and /home moved into the state dir."""
        assert self.bin_dir is not None
        d = self.dir
        return {
            **os.environ,
            "KUBECONFIG": str(self.stack.kubeconfig),
            # git-verify-wrapper.sh and argocd (as git's askpass helper) must be on PATH.
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(d / "home"),
            "TMPDIR": str(d / "tmp"),
            "ARGOCD_APP_CONF_PATH": str(d / "app" / "config"),
            "ARGOCD_TLS_DATA_PATH": str(d / "app" / "config" / "tls"),
            "ARGOCD_SSH_DATA_PATH": str(d / "app" / "config" / "ssh"),
            "ARGOCD_GPG_DATA_PATH": str(d / "app" / "config" / "gpg" / "source"),
            "ARGOCD_GNUPGHOME": str(d / "app" / "config" / "gpg" / "keys"),
            "ARGOCD_GPG_ENABLED": "false",
            "ARGOCD_PLUGINSOCKFILEPATH": str(d / "plugins"),
            "ARGOCD_ASK_PASS_SOCK": str(d / "tmp" / "reposerver-ask-pass.sock"),
            "ARGOCD_ENABLE_PROFILER_FILE_PATH": str(d / "profiler.enabled"),
            # Destination https://kubernetes.default.svc is $KUBECONFIG's cluster.
            "ARGOCD_FAKE_IN_CLUSTER": "true",
            # A failed manifest generation is otherwise cached for 60 minutes after three
            # attempts, which would outlive a test that fixes its repository.
            "ARGOCD_PAUSE_GEN_AFTER_FAILED_ATTEMPTS": "0",
            "ARGOCD_RECONCILIATION_TIMEOUT": RECONCILIATION_TIMEOUT,
        }

    def _spawn_argocd(self) -> None:
        assert self.bin_dir is not None
        p, env = self.ports, self._env()
        redis = f"127.0.0.1:{p['redis']}"
        self.repo_server.start(
            [str(self.bin_dir / "argocd-repo-server"), "--loglevel=info", "--logformat=text",
             # Plain gRPC on loopback; v3.6.1 refuses --disable-tls beside its default
             # --client-ca-path ("cannot be used when --disable-tls is enabled"), hence "".
             "--address=127.0.0.1", f"--port={p['repo']}", "--disable-tls", "--client-ca-path=",
             "--metrics-address=127.0.0.1", f"--metrics-port={p['repo_metrics']}",
             f"--redis={redis}"],
            ports=[p["repo"], p["repo_metrics"]], env=env,
        )  # fmt: skip
        # Its metrics server binds 0.0.0.0 whatever is asked (controller/appcontroller.go),
        # hence a free port rather than the well-known 8082.
        self.controller.start(
            [str(self.bin_dir / "argocd-application-controller"), "--loglevel=info",
             "--logformat=text", f"--kubeconfig={self.stack.kubeconfig}",
             f"--namespace={NAMESPACE}", f"--repo-server=127.0.0.1:{p['repo']}",
             "--repo-server-plaintext", f"--redis={redis}",
             f"--metrics-port={p['controller_metrics']}", "--persist-resource-health",
             "--status-processors=4",
             "--operation-processors=2"],
            ports=[p["controller_metrics"]], env=env,
        )  # fmt: skip
