"""Helpers for tests against the real stack: polling with deadlines, kubectl, the operator
as a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import config as kubernetes_config
from kubernetes.client import ApiClient
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.worker import Worker

from temporal_workflows import TASK_QUEUE, Fail, Sleep, Tick

REPO = Path(__file__).resolve().parent.parent
CRD_DIR = REPO / "crds"
CRD_NAMES = [
    f"crd/{plural}.sundial.dev"
    for plural in ("scheduledjobs", "temporalconnections", "clustertemporalconnections")
]
T = TypeVar("T")

# Deadlines hold on a loaded 2-core machine; the happy path returns in a second or two.
DEADLINE = 60.0


# Ports handed out, below the kernel's ephemeral range (32768 and up on Linux): a port
# the kernel picked for bind(0) can be taken by any outgoing connection before the
# server that was given it binds, and scenarios that start several processes at once
# met that (Address already in use). Never the same port twice in one test run.
_PORTS = range(20000, 32000)
_handed_out: set[int] = set()
_handing_out = threading.Lock()


def free_port(following: int = 0) -> int:
    """A free port, and the `following` ports after it free too (the local stack puts a
    server's second listener on the next port, Temporal's on the next four)."""
    with _handing_out:
        while True:
            port = random.choice(_PORTS)
            wanted = range(port, port + following + 1)
            if _handed_out.isdisjoint(wanted) and all(_free(n) for n in wanted):
                _handed_out.update(wanted)
                return port


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """A /metrics page as {(sample name, labels): value}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(metric: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return (metric, frozenset(labels.items()))


# A poll's default deadline in this thread: a scenario on the shared timeline has its own
# (Background's `deadline`).
_polls = threading.local()


def default_deadline() -> float:
    return float(getattr(_polls, "deadline", DEADLINE))


def eventually(
    probe: Callable[[], T], timeout: float | None = None, interval: float = 0.5, what: str = ""
) -> T:
    """Polls until `probe` returns a truthy value without raising AssertionError; by
    default for the thread's deadline (DEADLINE, or its scenario's)."""
    timeout = default_deadline() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last_error = None
        except AssertionError as error:
            last_error = error
        if time.monotonic() > deadline:
            detail = f": {last_error}" if last_error else ""
            raise AssertionError(f"not true within {timeout:.0f}s: {what}{detail}")
        time.sleep(interval)


def consistently(probe: Callable[[], Any], duration: float, interval: float = 0.5) -> None:
    """Asserts `probe` holds (truthy, no AssertionError) for the whole duration."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert probe(), "condition stopped holding"
        time.sleep(interval)


class Background:
    """A test's scenario run in a thread from the moment this is made, so that its waits
    (real minute slots) overlap another scenario's. `join` waits for it and raises what it
    raised: the scenario's own AssertionError, message and traceback, as if the test had
    run it itself."""

    def __init__(self, scenario: Callable[[], None], deadline: float = DEADLINE) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(scenario, deadline), daemon=True)
        self.thread.start()

    def _run(self, scenario: Callable[[], None], deadline: float) -> None:
        """`deadline`: the default of the scenario's polls (`eventually`)."""
        _polls.deadline = deadline
        try:
            scenario()
        except BaseException as error:
            self.error = error

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the scenario still runs after {timeout:.0f}s"
        if self.error is not None:
            raise self.error


# Where `Kubectl.get` and `Kubectl.list` read each kind themselves: (API group path,
# resource, namespaced). Other kinds go through kubectl.
READ_PATHS: dict[str, tuple[str, str, bool]] = {
    "scheduledjob": ("/apis/sundial.dev/v1alpha1", "scheduledjobs", True),
    "cronjob": ("/apis/batch/v1", "cronjobs", True),
    "job": ("/apis/batch/v1", "jobs", True),
    "pod": ("/api/v1", "pods", True),
    "event": ("/api/v1", "events", True),
    "lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "configmap": ("/api/v1", "configmaps", True),
    "serviceaccount": ("/api/v1", "serviceaccounts", True),
    "deployment": ("/apis/apps/v1", "deployments", True),
    "namespace": ("/api/v1", "namespaces", False),
}
READ_PATHS |= {path[1]: path for path in list(READ_PATHS.values())}  # plurals too
READ_TIMEOUT = 30.0


class Kubectl:
    """kubectl against the stack, and reads (`get`, `list`) over one pooled connection of
    this kubeconfig's identity: a kubectl process costs about 70 ms of CPU, the same read
    in process about 1 ms, and the shared timeline's two dozen scenarios each poll every
    half second, which in kubectl processes alone kept both of a 2-core machine's cores
    busy and left the operators under test behind."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self._api: ApiClient | None = None
        self._api_made = threading.Lock()

    def _read(self, path: str, **query: str) -> dict[str, Any] | None:
        """GET of an API path as this kubeconfig's user: None if not found; any other
        refusal, or no answer, fails the probe as a failed kubectl would."""
        with self._api_made:
            if self._api is None:
                # Not sundial.kube.load_api_client: that one says it is Sundial (its
                # User-Agent), and the tests' reads must not look like the operator's.
                self._api = kubernetes_config.new_client_from_config(str(self.kubeconfig))
        method, url, headers, _, _ = self._api.param_serialize(
            "GET", path, query_params=list(query.items()),
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
        )  # fmt: skip
        try:
            answer = self._api.call_api(method, url, headers, _request_timeout=READ_TIMEOUT)
            answer.read()
        except urllib3.exceptions.HTTPError as error:
            raise AssertionError(f"GET {path}: no answer: {error}") from None
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise AssertionError(f"GET {path}: {answer.status} {answer.reason}: {answer.data!r}")
        data: dict[str, Any] = json.loads(answer.data)
        return data

    @staticmethod
    def _path(kind: str, namespace: str | None) -> str | None:
        """The collection's API path of a kind read here, or None: kubectl reads it."""
        known = READ_PATHS.get(kind.lower())
        if known is None:
            return None
        group, resource, namespaced = known
        where = f"/namespaces/{namespace}" if namespaced and namespace else ""
        return f"{group}{where}/{resource}"

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float | None = 60
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    def apply(
        self, manifest: dict[str, Any] | str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        return self.run("apply", "-f", "-", stdin=text, check=check)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        path = self._path(kind, namespace)
        if path is not None:
            found = self._read(f"{path}/{name}")
            return _as_kubectl_shows(found) if found is not None else None
        result = self.run("get", kind, name, "-n", namespace, "-o", "json", check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise AssertionError(result.stderr)
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def list(
        self, kind: str, namespace: str | None, *, labels: str = "", fields: str = ""
    ) -> list[dict[str, Any]]:
        """The objects of a kind read here (READ_PATHS), in a namespace (None: in all), as
        `kubectl get -o json` has them: each item with its apiVersion and kind, and
        without managedFields."""
        path = self._path(kind, namespace)
        assert path is not None, f"{kind} is not read here: use kubectl"
        query = {"labelSelector": labels} if labels else {}
        if fields:
            query["fieldSelector"] = fields
        listed = self._read(path, **query)
        assert listed is not None, f"no such collection: {path}"
        item_kind = str(listed.get("kind", "")).removesuffix("List")
        items: list[dict[str, Any]] = listed.get("items", [])
        for item in items:
            item.setdefault("apiVersion", listed.get("apiVersion"))
            item.setdefault("kind", item_kind)
            _as_kubectl_shows(item)
        return items

    def events(self, namespace: str, **selector: str) -> list[dict[str, Any]]:
        """Events in a namespace; selector keys use _ for dots (involvedObject_name=...)."""
        fields = ",".join(f"{k.replace('_', '.')}={v}" for k, v in selector.items())
        return self.list("events", namespace, fields=fields)


def install_sundial(kubectl: Kubectl, temporal_address: str) -> None:
    """The CRDs, established, and the operator's default ClusterTemporalConnection to the
    stack's Temporal: what a test session and each bench set up before an operator runs."""
    from localstack.sundial_setup import default_connection_manifest

    kubectl.run("apply", "--server-side", "-f", str(CRD_DIR))
    kubectl.run("wait", "--for=condition=Established", "--timeout=60s", *CRD_NAMES)
    kubectl.run("apply", "-f", "-", stdin=default_connection_manifest(temporal_address))


def kubectl_sundial(kubectl: Kubectl, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl sundial ...` on the stack: kubectl finds the kubectl-sundial the package
    installed beside this Python."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(
        [str(kubectl.binary), "sundial", *args, "--kubeconfig", str(kubectl.kubeconfig)],
        capture_output=True, text=True, timeout=180, env={**os.environ, "PATH": path},
    )  # fmt: skip


def namespace_name(test: str) -> str:
    """The namespace of a test: t- and the test's name as a DNS label (40 characters)."""
    name = "t-" + test.lower().replace("_", "-")[:40].strip("-")
    return "".join(c if c.isalnum() or c == "-" else "-" for c in name).rstrip("-")


@contextlib.contextmanager
def fresh_namespace(kubectl: Kubectl, name: str) -> Iterator[str]:
    """A new namespace, with its default ServiceAccount; deleted (not waited for) after."""
    kubectl.run("create", "namespace", name)
    eventually(
        lambda: kubectl.get("serviceaccount", "default", name) is not None,
        what=f"default ServiceAccount in {name}",
    )
    try:
        yield name
    finally:
        kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def ready_condition(kubectl: Kubectl, name: str, namespace: str) -> dict[str, Any]:
    """The ScheduledJob's Ready condition ({} while there is none)."""
    sj = kubectl.get("scheduledjob", name, namespace) or {}
    conditions = {c["type"]: c for c in sj.get("status", {}).get("conditions", [])}
    return conditions.get("Ready", {})


def ready(kubectl: Kubectl, name: str, namespace: str) -> dict[str, Any] | None:
    """The ScheduledJob once it is Ready=True for its current generation, else None."""
    sj = kubectl.get("scheduledjob", name, namespace)
    if sj is None:
        return None
    status = sj.get("status", {})
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    ok = (
        conditions.get("Ready", {}).get("status") == "True"
        and status.get("observedGeneration") == sj["metadata"]["generation"]
    )
    return sj if ok else None


class OperatorProcess:
    """`python -m sundial` against the stack, logging to a file a failing test names."""

    @classmethod
    def on(
        cls, stack: Any, name: str, *, args: tuple[str, ...] = (), **settings: str
    ) -> OperatorProcess:
        """An operator with the admin kubeconfig, DEBUG logs in `operator[-name].log`, its
        own health and metrics ports; `settings` are more SUNDIAL_* variables; `args`
        after `python -m sundial` (("worker",): Sundial's worker)."""
        from localstack.sundial_setup import CLUSTER_RESOURCE_NAMESPACE

        env = {
            **stack.env(),
            "SUNDIAL_HEALTH_PORT": str(free_port()),
            "SUNDIAL_METRICS_PORT": str(free_port()),
            "SUNDIAL_LOG_LEVEL": "DEBUG",
            "SUNDIAL_CLUSTER_RESOURCE_NAMESPACE": CLUSTER_RESOURCE_NAMESPACE,
            **{f"SUNDIAL_{key.upper()}": value for key, value in settings.items()},
        }
        log_file = stack.log_dir / (f"operator-{name}.log" if name else "operator.log")
        return cls(env, log_file, args)

    def __init__(self, env: dict[str, str], log_file: Path, args: tuple[str, ...] = ()) -> None:
        self.env = env
        self.log_file = log_file
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_file.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sundial", *self.args],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def assert_alive(self) -> None:
        assert self.proc is not None, "the operator is not started"
        assert self.proc.poll() is None, f"the operator exited; see {self.log_file}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.env['SUNDIAL_METRICS_PORT']}/metrics"

    def readiness(self) -> tuple[int, str]:
        """/readyz's status and text; (0, why) while nothing answers."""
        url = f"http://127.0.0.1:{self.env['SUNDIAL_HEALTH_PORT']}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode()
        except OSError as error:
            return 0, str(error)

    def signal(self, sig: signal.Signals) -> None:
        """SIGKILL or SIGTERM, as the kubelet or a crash would; waits for the exit."""
        assert self.proc is not None, "the operator is not started"
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)
        self.proc = None

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


R = TypeVar("R")


class TemporalSide:
    """The test's own Temporal client and worker. The client is not thread-safe, so it
    lives on one background event loop and tests hand it coroutines through `run`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client: Client = self.run(lambda: Client.connect(address))
        self.worker_task = self.run(self._start_worker)

    async def _start_worker(self) -> asyncio.Task[None]:
        worker = Worker(self.client, task_queue=TASK_QUEUE, workflows=[Tick, Sleep, Fail])
        return asyncio.create_task(worker.run())

    def ensure_worker(self) -> None:
        """A worker can give up while Temporal is down (a fault test); start a new one."""
        if self.worker_task.done():
            self.worker_task = self.run(self._start_worker)

    def run(self, make: Callable[[], Awaitable[R]], timeout: float = 60) -> R:
        async def call() -> R:
            return await make()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def close(self) -> None:
        self.worker_task.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def temporal_connection(name: str, where: str | None = None, /, **spec: Any) -> dict[str, Any]:
    """A TemporalConnection in namespace `where`, or a ClusterTemporalConnection without one
    (positional, so that `namespace=` in spec is the Temporal namespace)."""
    metadata: dict[str, Any] = {"name": name}
    if where is not None:
        metadata["namespace"] = where
    kind = "TemporalConnection" if where is not None else "ClusterTemporalConnection"
    return {"apiVersion": "sundial.dev/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec}


def tamper_interval(current: ScheduleUpdateInput) -> ScheduleUpdate:
    """An edit by hand in Temporal (for `ScheduleHandle.update`): every 7 hours instead."""
    schedule = current.description.schedule
    schedule.spec.intervals = [ScheduleIntervalSpec(every=timedelta(hours=7))]
    return ScheduleUpdate(schedule=schedule)


def temporal_scheduledjob(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A temporal-backed ScheduledJob running the test worker's SundialTick every 2 s,
    unless spec says otherwise."""
    spec.setdefault("backend", "temporal")
    if "schedule" not in spec:
        spec.setdefault("interval", {"every": "2s"})
    spec.setdefault("workflow", {"type": "SundialTick", "taskQueue": TASK_QUEUE, "args": [name]})
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def parse_time(value: str) -> datetime:
    """An RFC 3339 time as the apiserver writes it."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def wait_until(moment: datetime) -> None:
    delay = (moment - datetime.now(UTC)).total_seconds()
    if delay > 0:
        time.sleep(delay)


def sj_status(kubectl: Kubectl, name: str, namespace: str) -> dict[str, Any]:
    """The ScheduledJob's status ({} before the first write); it must exist."""
    sj = kubectl.get("scheduledjob", name, namespace)
    assert sj is not None, f"no ScheduledJob {namespace}/{name}"
    result: dict[str, Any] = sj.get("status", {})
    return result


def conditions_of(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions", [])}


def _as_kubectl_shows(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without its managedFields, as `kubectl get -o json` shows it."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def user_written(obj: dict[str, Any]) -> tuple[Any, Any]:
    """What a user (kubectl, the plugin, Argo CD) writes of an object: its spec and its
    annotations. The operator's own writes (status, its finalizer) may land between two
    reads, so "the user changed nothing" is judged by these, not by resourceVersion."""
    return obj.get("spec"), obj.get("metadata", {}).get("annotations")


def owned_jobs(kubectl: Kubectl, namespace: str, owner: str) -> list[dict[str, Any]]:
    """The Jobs of a ScheduledJob's CronJob (Sundial's label), as the apiserver has them."""
    return kubectl.list("jobs", namespace, labels=f"sundial.dev/scheduledjob={owner}")


def kubernetes_scheduledjob(name: str, namespace: str, job: dict[str, Any],
                            **spec: Any) -> dict[str, Any]:  # fmt: skip
    """A kubernetes-backed ScheduledJob running `job` every minute, unless spec says
    otherwise."""
    spec.setdefault("schedule", "* * * * *")
    return {
        "apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"job": job, **spec},
    }  # fmt: skip


def no_retry_job(image: str, script: str) -> dict[str, Any]:
    """spec.job for `sh -c script`, no retries (backoffLimit 0), Jobs kept an hour: each
    slot is one Pod, one result."""
    return {"template": {"spec": {
        "backoffLimit": 0, "ttlSecondsAfterFinished": 3600,
        "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "job", "image": image, "command": ["sh", "-c", script]}]}},
    }}}  # fmt: skip


# ---- the operator as it is installed: its ServiceAccount, its manifests ------------------

# ScheduledJobs with this label are served by the operators a test runs itself (their
# SUNDIAL_LABEL_SELECTOR); the session's operator leaves them alone.
SHARD_LABEL = "sundial.dev/shard"
OPERATOR_NAMESPACE = "sundial-system"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:sundial"


def rendered(kubectl: Kubectl, directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` of a manifests/ directory, as documents."""
    text = kubectl.run("kustomize", str(directory)).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def service_account_kubeconfig(
    kubectl: Kubectl, apiserver_url: str, ca_cert: Path, path: Path, account: str = "sundial"
) -> Path:
    """A kubeconfig with a token of the operator's ServiceAccount: what the Pod has."""
    token = kubectl.run(
        "create", "token", account, "-n", OPERATOR_NAMESPACE, "--duration=2h"
    ).stdout.strip()
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sundial",
        "clusters": [{"name": "local", "cluster": {
            "server": apiserver_url, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": "sundial", "user": {"token": token}}],
        "contexts": [{"name": "sundial", "context": {"cluster": "local", "user": "sundial"}}],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


RBAC_KINDS = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def namespaced_overlay_rbac(
    kubectl: Kubectl, *, suffix: str, namespaces: dict[str, str], account: str
) -> list[dict[str, Any]]:
    """The namespaced overlay's RBAC, verbatim but for names: each object named with
    `suffix`, its watched namespaces (team-a, team-b) renamed by `namespaces`, bound to a
    test's own ServiceAccount `account` (the cluster-wide overlay may have bound `sundial`
    more widely)."""
    # The operator's (the worker's, named sundial-worker*, are its own).
    documents = [d for d in rendered(kubectl, REPO / "manifests/overlays/namespaced")
                 if d["kind"] in RBAC_KINDS
                 and not d["metadata"]["name"].startswith("sundial-worker")]  # fmt: skip
    return _rebound(documents, suffix, namespaces, "sundial", account)


def worker_overlay_rbac(kubectl: Kubectl, *, suffix: str, account: str) -> list[dict[str, Any]]:
    """The worker's RBAC in the cluster-wide overlay (its ClusterRole and the base's Role
    for connection Secrets), verbatim but for names, bound to a test's ServiceAccount."""
    documents = [d for d in rendered(kubectl, REPO / "manifests/overlays/cluster-wide")
                 if d["kind"] in RBAC_KINDS
                 and d["metadata"]["name"].startswith("sundial-worker")]  # fmt: skip
    return _rebound(documents, suffix, {}, "sundial-worker", account)


def _rebound(
    documents: list[dict[str, Any]], suffix: str, namespaces: dict[str, str], original: str,
    account: str,
) -> list[dict[str, Any]]:  # fmt: skip
    """The RBAC documents named with `suffix`, in `namespaces`' new names, and bound to
    `account` where the install binds `original`."""
    for doc in documents:
        meta = doc["metadata"]
        meta["name"] = f"{meta['name']}-{suffix}"
        if "namespace" in meta:
            meta["namespace"] = namespaces.get(meta["namespace"], meta["namespace"])
        if "roleRef" in doc:
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{suffix}"
            for subject in doc["subjects"]:
                assert subject == {"kind": "ServiceAccount", "name": original,
                                   "namespace": OPERATOR_NAMESPACE}  # fmt: skip
                subject["name"] = account
    return documents


def lease_holder(kubectl: Kubectl, name: str, namespace: str) -> str:
    """Who holds the Lease now, by the apiserver ("" when none or no Lease)."""
    lease = kubectl.get("lease", name, namespace) or {}
    holder: str = (lease.get("spec") or {}).get("holderIdentity") or ""
    return holder


class AuditReader:
    """The audit log's events, each line parsed once: a poll reads only what the apiserver
    appended since the last one (the log is megabytes by the shared timeline, and parsing
    all of it on every poll of several scenarios kept a core busy). A file made anew (the
    session's first, a restarted stack's) is read from its start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[Path, tuple[int, int, list[dict[str, Any]]]] = {}

    def events(self, path: Path) -> list[dict[str, Any]]:
        with self._lock:
            try:
                opened = path.open("rb")
            except FileNotFoundError:
                self._read.pop(path, None)
                return []
            with opened:
                inode = os.fstat(opened.fileno()).st_ino
                known, offset, events = self._read.get(path, (inode, 0, []))
                if known != inode or os.fstat(opened.fileno()).st_size < offset:
                    offset, events = 0, []
                opened.seek(offset)
                appended = opened.read()
            # Up to the last whole line: the apiserver may be writing the next one.
            whole = appended[: appended.rfind(b"\n") + 1]
            events += [json.loads(line) for line in whole.splitlines() if line.strip()]
            self._read[path] = (inode, offset + len(whole), events)
            return list(events)


_audit = AuditReader()


def audit_events(path: Path) -> list[dict[str, Any]]:
    """The apiserver's audit log (the stack's "writes" policy), oldest first."""
    return _audit.events(path)


def created_jobs(stack: Any, namespace: str) -> list[str]:
    """The Jobs the apiserver created in `namespace`, oldest first (audit log: 201 answers)."""
    return audited_jobs(stack, namespace, "create", {201})


def deleted_jobs(stack: Any, namespace: str) -> list[str]:
    """The Jobs the apiserver deleted in `namespace`, by anyone (audit log)."""
    return audited_jobs(stack, namespace, "delete", {200, 202})


def audited_jobs(stack: Any, namespace: str, verb: str, codes: set[int]) -> list[str]:
    return [
        event["objectRef"]["name"]
        for event in audit_events(stack.log_dir / "audit.log")
        if event.get("verb") == verb
        and event.get("objectRef", {}).get("resource") == "jobs"
        and event.get("objectRef", {}).get("namespace") == namespace
        and event.get("responseStatus", {}).get("code") in codes
    ]


def job_slots(kubectl: Kubectl, namespace: str, owner: str) -> dict[datetime, str]:
    """The Jobs the apiserver holds for a ScheduledJob, by the slot each ran for (its
    scheduled-timestamp annotation): the CronJob controller's and Sundial's own."""
    return {
        parse_time(job["metadata"]["annotations"][
            "batch.kubernetes.io/cronjob-scheduled-timestamp"]): job["metadata"]["name"]
        for job in owned_jobs(kubectl, namespace, owner)
    }  # fmt: skip


def one_create_per_job(stack: Any, kubectl: Kubectl, namespace: str, owner: str) -> bool:
    """The apiserver created each Job it holds for `owner` once, and no other (nothing made
    and deleted): its audit log against its listing. The log is written in batches: poll
    with `eventually`."""
    listed = sorted(job_slots(kubectl, namespace, owner).values())
    created = sorted(j for j in created_jobs(stack, namespace) if j.rsplit("-", 1)[0] == owner)
    assert created == listed, (owner, created, listed)
    return True


def schedule_executions(temporal: TemporalSide, schedule_id: str) -> list[Any]:
    """The workflow executions a schedule started, backfills too, by Temporal's listing."""

    async def listed() -> list[Any]:
        query = f'TemporalScheduledById = "{schedule_id}"'
        return [e async for e in temporal.client.list_workflows(query)]

    return temporal.run(listed)


def in_shard(manifest: dict[str, Any], shard: str) -> dict[str, Any]:
    """A ScheduledJob served only by an operator whose selector names `shard`."""
    manifest["metadata"].setdefault("labels", {})[SHARD_LABEL] = shard
    return manifest


def token_operator(
    stack: Any, kubeconfig: Path, name: str, shard: str, **settings: str
) -> OperatorProcess:
    """An operator process as installed: the ServiceAccount's kubeconfig for kopf's watches
    and Sundial's own calls alike, leader election on, serving one shard; `settings` are
    more SUNDIAL_* variables (`lease="x"` sets SUNDIAL_LEASE)."""
    env = {
        **stack.env(),
        "KUBECONFIG": str(kubeconfig),
        "SUNDIAL_KUBECONFIG": str(kubeconfig),
        "SUNDIAL_LEADER_ELECTION": "true",
        "SUNDIAL_POD_NAME": name,
        "SUNDIAL_LABEL_SELECTOR": f"{SHARD_LABEL}={shard}",
        "SUNDIAL_CLUSTER_RESOURCE_NAMESPACE": OPERATOR_NAMESPACE,
        "SUNDIAL_HEALTH_PORT": str(free_port()),
        "SUNDIAL_METRICS_PORT": str(free_port()),
        **{f"SUNDIAL_{key.upper()}": value for key, value in settings.items()},
    }
    return OperatorProcess(env, stack.log_dir / f"operator-{name}.log")


def shard_holders(kubectl: Kubectl, namespace: str, shards: int) -> dict[int, str]:
    """Each shard's holder, as the apiserver has its Lease (sharded mode): the replica's
    Pod name, its identity without the process's suffix ("" if none)."""
    from sundial.planning.shards import parse_shard_lease

    leases = json.loads(kubectl.run("get", "leases", "-n", namespace, "-o", "json").stdout)
    found: dict[int, str] = {}
    for lease in leases["items"]:
        parsed = parse_shard_lease(lease["metadata"]["name"])
        if parsed is not None and parsed[1] == shards:
            holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            found[parsed[0]] = holder.rpartition("_")[0] if "_" in holder else holder
    return {shard: found.get(shard, "") for shard in range(shards)}


def faulted_operator(
    stack: Any, name: str, shard: str, *, user: str, sundial_via: Any = None, **settings: str
) -> OperatorProcess:
    """An operator process with a user of its own (stack.faults.kubeconfig: cluster-admin,
    but not system:masters, so flow control, admission and RBAC faults reach it), serving
    one shard. `sundial_via`, a relay: Sundial's own calls go through it, kopf's watches
    directly. `settings` are more SUNDIAL_* variables."""
    from localstack.sundial_setup import CLUSTER_RESOURCE_NAMESPACE

    kubeconfig = stack.faults.kubeconfig(user)
    own_calls = stack.faults.kubeconfig(user, via=sundial_via) if sundial_via else kubeconfig
    env = {
        **stack.env(),
        "KUBECONFIG": str(kubeconfig),
        "SUNDIAL_KUBECONFIG": str(own_calls),
        "SUNDIAL_POD_NAME": name,
        "SUNDIAL_LABEL_SELECTOR": f"{SHARD_LABEL}={shard}",
        "SUNDIAL_CLUSTER_RESOURCE_NAMESPACE": CLUSTER_RESOURCE_NAMESPACE,
        "SUNDIAL_HEALTH_PORT": str(free_port()),
        "SUNDIAL_METRICS_PORT": str(free_port()),
        "SUNDIAL_LOG_LEVEL": "DEBUG",
        **{f"SUNDIAL_{key.upper()}": value for key, value in settings.items()},
    }
    return OperatorProcess(env, stack.log_dir / f"operator-{name}.log")


def accepted_writes(audit_log: Path, user: str) -> list[dict[str, Any]]:
    """The writes `user` made that the apiserver accepted, by its audit log."""
    return [
        event for event in audit_events(audit_log)
        if (event.get("user") or {}).get("username") == user
        and event.get("verb") in {"create", "update", "patch", "delete"}
        and (event.get("responseStatus") or {}).get("code", 200) < 300
    ]  # fmt: skip


def received(event: dict[str, Any]) -> datetime:
    """When the apiserver received an audited request."""
    return parse_time(event["requestReceivedTimestamp"])


def created_by(audit_log: Path, resource: str, namespace: str, user: str) -> list[dict[str, Any]]:
    """The creates of a resource in a namespace that `user` made and the apiserver accepted,
    by its audit log: ground truth, not what anyone's status says."""
    return [
        event
        for event in audit_events(audit_log)
        if event.get("verb") == "create"
        and (event.get("objectRef") or {}).get("resource") == resource
        and not event["objectRef"].get("subresource")
        and event["objectRef"].get("namespace") == namespace
        and (event.get("user") or {}).get("username") == user
        and (event.get("responseStatus") or {}).get("code", 200) < 300
    ]


def their_schedule(temporal: TemporalSide, schedule_id: str) -> None:
    """A schedule made outside Sundial under the id Sundial would use: not its to touch."""

    async def create() -> None:
        await temporal.client.create_schedule(
            schedule_id,
            Schedule(
                action=ScheduleActionStartWorkflow(
                    "SundialTick", "theirs", id="their-workflow", task_queue=TASK_QUEUE
                ),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=2))]),
            ),
        )

    temporal.run(create)
