"""One timeline for every scenario that waits on real minute slots, runs and refreshes.

A scenario is a test's whole story, run in a thread of its own (support.Background) in a
namespace of its own. The scenarios of every selected test that asks for the `scenario`
fixture start together, when the first of those tests runs, so that their waits overlap:
the real node's five, the container job on temporal's eleven, the failure and pause
policies' three, the longer Temporal connection tests and a run-now under refused status
writes take about as long together as the longest alone. Each test joins its own
scenario, which raises what the scenario found, as if the test had run it.

Those tests run back to back (conftest orders them so), and nothing else runs beside them:
another test's fault on a shared server (the controller manager stopped, the session's
operator restarted) would meet them. The scenarios themselves fault only what is their
own: a namespace's admission policy, their own operator, worker or Temporal relay.

A module puts scenarios on the timeline with a function `on_the_timeline(servers)`: a
context manager that makes what its scenarios share (an operator or worker of its own),
yields their makers by test name, and stops what it made once they are over."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from localstack import LocalStack
from support import (
    Background,
    Kubectl,
    OperatorProcess,
    TemporalSide,
    fresh_namespace,
    namespace_name,
)

# The longest scenario's bound (the real node's: M1 up to 80 s away, four slots, settling).
SECONDS = 600
# The default deadline of a scenario's polls, above support.DEADLINE: the timeline's start
# is the suite's heaviest moment (every scenario's objects reach the operators within a
# second, while eight operators and workers start beside the servers on two cores), and
# the first write of an object took over a minute there once in CI where it takes 2-9 s
# on this machine. A poll that is a promise's bound says its own timeout.
POLL_SECONDS = 150.0
FIXTURE = "scenario"

Makers = dict[str, Callable[[str], None]]


@dataclass(frozen=True)
class Servers:
    """The session's servers and clients, as every scenario's maker gets them."""

    stack: LocalStack
    kubectl: Kubectl
    operator: OperatorProcess
    temporal: TemporalSide


class OnTheTimeline(Protocol):
    def __call__(self, servers: Servers) -> contextlib.AbstractContextManager[Makers]: ...


def named(test: str) -> str:
    """A scenario's namespace: t- and its test's name, or a parametrized test's case
    (`test_x[case]`: t-case)."""
    return namespace_name(test.partition("[")[2].rstrip("]") or test)


def operator_lines(log_dir: Path, namespace: str, limit: int = 30) -> list[str]:
    """What the operators logged about a scenario's namespace, last `limit` lines, without
    each request and handler call: a failed scenario's report carries them, so a run whose
    logs stay on another machine (CI) still says what the operator was doing."""
    noise = (" urllib3.", " kopf.objects: Handler ")
    lines: list[str] = []
    for log in sorted(log_dir.glob("operator*.log")):
        with log.open(errors="replace") as text:
            lines += [f"{log.stem}: {line.rstrip()[:300]}" for line in text
                      if namespace in line and not any(n in line for n in noise)]  # fmt: skip
    # Each line begins with its time: across files, in the order they were written.
    lines.sort(key=lambda line: line.partition(": ")[2][:23])
    return lines[-limit:]


def joined(running: Iterable[Background]) -> None:
    for background in running:
        background.thread.join(SECONDS)


def timeline_tests(items: Iterable[Any]) -> list[Any]:
    """The tests (pytest items) whose scenario runs on the shared timeline."""
    return [item for item in items if FIXTURE in getattr(item, "fixturenames", ())]


class SharedTimeline:
    """Starts every selected scenario at the first test's request; when the last of their
    tests is done, joins them, deletes their namespaces and stops what their modules made,
    so that none of their objects outlives them into the next tests."""

    def __init__(self, servers: Servers, items: Iterable[Any]) -> None:
        self.servers = servers
        tests = timeline_tests(items)
        self.selected = [item.name for item in tests]
        self.modules: list[ModuleType] = list(dict.fromkeys(item.module for item in tests))
        self.pending = set(self.selected)
        self.running: dict[str, Background] | None = None
        self.failed: BaseException | None = None
        self._resources = contextlib.ExitStack()

    def scenario(self, test: str) -> Background:
        if self.running is None:
            # Started once: a start that failed fails every test on the timeline, rather
            # than starting a second operator or worker beside what the first one left.
            if self.failed is not None:
                raise AssertionError(f"the shared timeline did not start: {self.failed!r}")
            try:
                self.running = self._start()
            except BaseException as error:
                self.failed = error
                self.close()
                raise
        assert test in self.running, (
            f"{test} asks for a scenario, but its module's on_the_timeline makes none by "
            f"that name: {sorted(self.running)}"
        )
        return self.running[test]

    def _start(self) -> dict[str, Background]:
        made: Makers = {}
        for module in self.modules:
            start: OnTheTimeline = module.on_the_timeline
            made |= self._resources.enter_context(start(self.servers))
        # Every namespace first, then every scenario at once: they start within
        # milliseconds of each other, so all pick the same first minute slot.
        where = {test: self._resources.enter_context(
                     fresh_namespace(self.servers.kubectl, named(test)))
                 for test in self.selected if test in made}  # fmt: skip
        running = {test: Background(functools.partial(made[test], namespace), POLL_SECONDS)
                   for test, namespace in where.items()}  # fmt: skip
        # On close, before their namespaces go (the stack unwinds in reverse) and before
        # what their modules made stops: each is joined.
        self._resources.callback(joined, running.values())
        return running

    def done(self, test: str) -> None:
        self.pending.discard(test)
        if not self.pending:
            self.close()

    def close(self) -> None:
        self._resources.close()


def ordered(items: list[Any]) -> None:
    """The timeline's tests moved together, in their order, to where the first of them is."""
    tests = timeline_tests(items)
    if not tests:
        return
    at = items.index(tests[0])
    moved = {id(item) for item in tests}
    others = [item for item in items if id(item) not in moved]
    items[:] = [*others[:at], *tests, *others[at:]]
