"""The registry: a service's named one-shot jobs, sync or async, each with a description and
an optional schedule that is documentation, checked against the manifests (check.py)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])

NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
MACROS = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
# One cron field: numbers, names (JAN, MON), ranges, steps, lists, and * or ?.
FIELD = re.compile(r"[0-9A-Za-z*?/,\-]+")


def schedule_problem(schedule: str) -> str | None:
    """Why `schedule` is no standard cron schedule (5 fields or a macro), or None. Only the
    form: which slots it means is the manifest's business (the manifest's schedule runs)."""
    fields = schedule.split()
    if len(fields) == 1 and fields[0] in MACROS:
        return None
    if len(fields) != 5:
        return f"{schedule!r} has {len(fields)} fields: a cron schedule has 5 (or is a macro)"
    bad = [field for field in fields if not FIELD.fullmatch(field)]
    if bad:
        return f"{schedule!r}: {bad[0]!r} is no cron field"
    return None


def normal_schedule(schedule: str) -> str:
    """A schedule with its whitespace folded: how two schedules are compared."""
    return " ".join(schedule.split())


@dataclass(frozen=True)
class Job:
    """One named job: `function` takes no argument or the run's context (RunContext)."""

    name: str
    function: Callable[..., Any]
    description: str = ""
    schedule: str | None = None

    @property
    def takes_context(self) -> bool:
        try:
            parameters = inspect.signature(self.function).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature
            return False
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return any(parameter.kind in positional for parameter in parameters)


def job_name(function: Callable[..., Any]) -> str:
    """A function's job name: its name, dashes for underscores (send_invoices: send-invoices)."""
    return str(getattr(function, "__name__", "")).replace("_", "-").strip("-")


class Registry(Mapping[str, Job]):
    """A service's jobs by name. Fill it with the `job` decorator, `add`, or from the seed
    convention's dict, `Registry.from_tasks(CRON_TASKS)`."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}

    def add(
        self,
        name: str,
        function: Callable[..., Any],
        *,
        description: str | None = None,
        schedule: str | None = None,
    ) -> Job:
        """Registers `function` as job `name`; a bad name, a name taken or a schedule that is
        no cron schedule raise ValueError at import time, not at 2 a.m."""
        if not NAME.fullmatch(name):
            raise ValueError(
                f"job name {name!r}: letters, digits, '.', '_' and '-', starting and ending "
                "with a letter or digit"
            )
        if name in self._jobs:
            raise ValueError(f"job {name!r} is registered twice")
        if not callable(function):
            raise TypeError(f"job {name!r}: {function!r} is not callable")
        if schedule is not None:
            problem = schedule_problem(schedule)
            if problem is not None:
                raise ValueError(f"job {name!r}: {problem}")
            schedule = normal_schedule(schedule)
        if description is None:
            description = (inspect.getdoc(function) or "").split("\n", 1)[0]
        job = Job(name, function, description, schedule)
        self._jobs[name] = job
        return job

    @overload
    def job(self, function: F, /) -> F: ...

    @overload
    def job(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        schedule: str | None = None,
    ) -> Callable[[F], F]: ...

    def job(
        self,
        function: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        schedule: str | None = None,
    ) -> Any:
        """A decorator: `@jobs.job` or `@jobs.job(name=..., description=..., schedule=...)`.
        The name defaults to the function's (dashes for underscores), the description to
        its docstring's first line. The function is returned unchanged."""

        def register(target: Callable[..., Any]) -> Callable[..., Any]:
            self.add(name or job_name(target), target, description=description, schedule=schedule)
            return target

        return register(function) if function is not None else register

    @classmethod
    def from_tasks(cls, tasks: Mapping[str, Any]) -> Registry:
        """The seed convention's dict: `{name: {"task": f, "description": ..., "schedule":
        ...}}`, or `{name: f}`."""
        registry = cls()
        for name, entry in tasks.items():
            if isinstance(entry, Mapping):
                unknown = set(entry) - {"task", "description", "schedule"}
                if "task" not in entry or unknown:
                    raise ValueError(
                        f"job {name!r}: an entry has 'task' and optionally 'description' and "
                        f"'schedule' (got {', '.join(sorted(entry)) or 'nothing'})"
                    )
                registry.add(
                    name,
                    entry["task"],
                    description=entry.get("description"),
                    schedule=entry.get("schedule"),
                )
            else:
                registry.add(name, entry)
        return registry

    def __getitem__(self, name: str) -> Job:
        return self._jobs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def known(self) -> str:
        """The names, sorted, for a message."""
        return ", ".join(sorted(self._jobs)) or "none"
