import os
from collections.abc import Iterator

import pytest

from localstack import LocalStack, host


@pytest.fixture(scope="session")
def stack() -> Iterator[LocalStack]:
    """One real cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a
    node: containerd, kubelet, kube-proxy) + Temporal per test run."""
    local_stack = LocalStack()
    # Who wrote which ScheduledJob, CronJob, Job and Lease (tests that need to tell two
    # operator replicas apart read it; support.AuditLog).
    audit_log = local_stack.log_dir / "audit.log"
    audit_log.unlink(missing_ok=True)
    os.environ["SUNDIAL_APISERVER_AUDIT_LOG"] = str(audit_log)
    os.environ["SUNDIAL_APISERVER_AUDIT_POLICY"] = "writes"
    with local_stack:
        yield local_stack
    if local_stack.with_node:
        # A clean stop leaves nothing of the node on the machine.
        assert host.leftovers(local_stack.node.host_before) == []


# ---- the operator under test -------------------------------------------------------

from support import (  # noqa: E402
    SHARD_LABEL,
    Kubectl,
    OperatorProcess,
    fresh_namespace,
    install_sundial,
    namespace_name,
)


@pytest.fixture(scope="session")
def kubectl(stack: LocalStack) -> Kubectl:
    return Kubectl(stack.kubectl, stack.kubeconfig)


@pytest.fixture(scope="session")
def crd_installed(kubectl: Kubectl, stack: LocalStack) -> None:
    """The CRDs, and the operator's default ClusterTemporalConnection to the dev server."""
    install_sundial(kubectl, stack.temporal_address)


@pytest.fixture(scope="session")
def operator(stack: LocalStack, crd_installed: None) -> Iterator[OperatorProcess]:
    """One operator process for the run; its log is beside the servers' logs."""
    process = OperatorProcess.on(
        stack, "",
        connection_refresh_seconds="3",
        temporal_resync_seconds="5",
        # ScheduledJobs labelled with a shard belong to the operators that the install
        # and high-availability tests run themselves.
        label_selector=f"!{SHARD_LABEL}",
    )  # fmt: skip
    process.start()
    yield process
    process.stop()


@pytest.fixture
def stopped_after() -> Iterator[list[OperatorProcess]]:
    """Operators a test starts (it appends them), stopped however the test ends."""
    started: list[OperatorProcess] = []
    yield started
    for process in started:
        process.stop()


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, so tests cannot see each other's objects."""
    with fresh_namespace(kubectl, namespace_name(request.node.name)) as name:
        yield name


# ---- Temporal: the test's own client and worker ------------------------------------

from support import TemporalSide  # noqa: E402


@pytest.fixture(scope="session")
def temporal(stack: LocalStack) -> Iterator[TemporalSide]:
    side = TemporalSide(stack.temporal_address)
    yield side
    side.close()


# ---- the shared timeline: scenarios that wait on minute slots, started together ---------

import shared_timeline  # noqa: E402
from support import Background  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The shared timeline's tests run back to back: nothing else (no other test's fault on
    # a shared server) runs beside their scenarios.
    shared_timeline.ordered(items)


@pytest.fixture(scope="session")
def timeline(
    stack: LocalStack, kubectl: Kubectl, operator: OperatorProcess, temporal: TemporalSide,
    request: pytest.FixtureRequest,
) -> Iterator[shared_timeline.SharedTimeline]:  # fmt: skip
    servers = shared_timeline.Servers(stack, kubectl, operator, temporal)
    running = shared_timeline.SharedTimeline(servers, request.session.items)
    yield running
    running.close()  # a run stopped early (-x, a timeout) has not closed it


@pytest.fixture
def scenario(
    timeline: shared_timeline.SharedTimeline, request: pytest.FixtureRequest
) -> Iterator[Background]:
    """This test's scenario on the shared timeline (tests/shared_timeline.py), already
    running beside the others: the test joins it."""
    yield timeline.scenario(request.node.name)
    timeline.done(request.node.name)


# ---- on failure, say where the servers' logs are ---------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and "stack" in getattr(item, "fixturenames", ()):
        try:
            stack: LocalStack = item._request.getfixturevalue("stack")  # type: ignore[attr-defined]
        except Exception as error:  # the stack itself did not start: its error is the report
            report.sections.append(("local stack", f"did not start: {error}"))
            return
        report.sections.append(("local stack", f"server and operator logs: {stack.log_dir}/*.log"))
        if shared_timeline.FIXTURE in item.fixturenames:
            namespace = shared_timeline.named(item.name)
            lines = shared_timeline.operator_lines(stack.log_dir, namespace)
            report.sections.append((f"operators on {namespace}", "\n".join(lines) or "nothing"))
