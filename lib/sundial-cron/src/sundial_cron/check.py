"""`check`: the ScheduledJobs that will run this image, against its registry. Every
`job.cronJob` must name a registered job, and a registry schedule that differs from the
manifest's is reported: the manifest's is the one that runs, the registry's is
documentation that drifted. A CI step, so a typo fails the build, not the night."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sundial_cron.registry import Registry, normal_schedule
from sundial_cron.yamlish import YamlError, load_all

SUFFIXES = (".yaml", ".yml", ".json")
GROUP = "sundial.dev"


class ManifestError(ValueError):
    """Manifests that cannot be read: the message names the file."""


@dataclass(frozen=True)
class Manifest:
    """One ScheduledJob as far as `check` reads it."""

    source: str  # the file (or <stdin>) and the document's number in it
    namespace: str
    name: str
    cron_job: str | None
    schedule: str | None
    interval: str | None

    @property
    def title(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.source}: ScheduledJob {where}{self.name}"


def _documents(text: str, source: str) -> list[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except ValueError:
            pass  # YAML's flow style, then
    try:
        return load_all(text)
    except YamlError as error:
        raise ManifestError(f"{source}: {error}") from None


def _items(document: Any) -> Iterator[Mapping[str, Any]]:
    """The objects of a document: itself, or a List's items (`kubectl get -o yaml`)."""
    if not isinstance(document, Mapping):
        return
    if document.get("kind") == "List" or str(document.get("kind", "")).endswith("List"):
        for item in document.get("items") or []:
            yield from _items(item)
        return
    yield document


def scheduledjobs(text: str, source: str) -> list[Manifest]:
    """The ScheduledJobs in one file's text (any number of documents, other kinds skipped)."""
    found: list[Manifest] = []
    for number, document in enumerate(_documents(text, source), start=1):
        for item in _items(document):
            api_version = str(item.get("apiVersion") or "")
            if item.get("kind") != "ScheduledJob" or not api_version.startswith(f"{GROUP}/"):
                continue
            meta = item.get("metadata") or {}
            spec = item.get("spec") or {}
            job = spec.get("job") or {}
            found.append(
                Manifest(
                    source=f"{source}#{number}",
                    namespace=str(meta.get("namespace") or ""),
                    name=str(meta.get("name") or "?"),
                    cron_job=_text(job.get("cronJob")),
                    schedule=_text(spec.get("schedule")),
                    interval=_text(spec.get("interval")),
                )
            )
    return found


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def read(paths: Iterable[str], stdin: TextIO | None = None) -> list[Manifest]:
    """The ScheduledJobs of files, folders (their .yaml, .yml and .json files, recursively)
    and `-` (standard input: `kubectl kustomize`, `helm template`)."""
    found: list[Manifest] = []
    for path in paths:
        if path == "-":
            found += scheduledjobs((stdin or sys.stdin).read(), "<stdin>")
            continue
        root = Path(path)
        if root.is_dir():
            files = sorted(
                Path(directory) / name
                for directory, _, names in os.walk(root)
                for name in names
                if name.endswith(SUFFIXES)
            )
        elif root.is_file():
            files = [root]
        else:
            raise ManifestError(f"{path}: no such file or folder")
        for file in files:
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                raise ManifestError(f"{file}: {error}") from None
            found += scheduledjobs(text, str(file))
    return found


def problems(registry: Registry, manifests: Iterable[Manifest]) -> list[str]:
    """What is wrong, one line each: a `cronJob` the registry lacks; a registry schedule
    that is not the manifest's."""
    found: list[str] = []
    for manifest in manifests:
        if manifest.cron_job is None:
            continue  # a full template or a command: the image's entrypoint is not ours to read
        job = registry.get(manifest.cron_job)
        if job is None:
            found.append(
                f"{manifest.title}: job.cronJob {manifest.cron_job!r} is not in the image's "
                f"registry (known jobs: {registry.known()})"
            )
            continue
        if job.schedule is None:
            continue
        if manifest.schedule is not None:
            if normal_schedule(manifest.schedule) != job.schedule:
                found.append(
                    f"{manifest.title}: the registry's schedule for {job.name!r} is "
                    f"{job.schedule!r}, the manifest's {normal_schedule(manifest.schedule)!r} "
                    "(the manifest's runs: correct the registry)"
                )
        elif manifest.interval is not None:
            found.append(
                f"{manifest.title}: the registry's schedule for {job.name!r} is "
                f"{job.schedule!r}, the manifest runs it every {manifest.interval} "
                "(interval; the manifest's runs: correct the registry)"
            )
    return found


def check(
    registry: Registry, paths: Iterable[str], out: TextIO, err: TextIO, stdin: TextIO | None = None
) -> int:
    """0: every ScheduledJob's cronJob is known and every schedule agrees; 1: problems,
    listed; 2: nothing to check, or manifests that cannot be read."""
    try:
        manifests = read(paths, stdin)
    except ManifestError as error:
        print(f"error: {error}", file=err)
        return 2
    if not manifests:
        print("error: no ScheduledJob (sundial.dev) in the manifests given", file=err)
        return 2
    found = problems(registry, manifests)
    for problem in found:
        print(problem, file=out)
    named = sum(1 for manifest in manifests if manifest.cron_job is not None)
    if found:
        print(f"check: {len(found)} problem(s) in {len(manifests)} ScheduledJob(s)", file=out)
        return 1
    print(
        f"check: {len(manifests)} ScheduledJob(s), {named} naming a job: every job known, "
        "every registry schedule the manifest's",
        file=out,
    )
    return 0
