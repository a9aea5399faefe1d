"""The entrypoint: `MODE=cron CRON_JOB=<name>` runs one job (a service's `main()`), and the
command line: `run NAME`, `list`, `check PATH...` (`python -m sundial_cron` or the
`sundial-cron` script, with `--registry MODULE[:ATTRIBUTE]`)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from sundial_cron.check import check as check_manifests
from sundial_cron.registry import Registry
from sundial_cron.runner import EXIT_USAGE, run

ENV_REGISTRY = "SUNDIAL_CRON_REGISTRY"
USAGE = (
    "run one job with MODE=cron CRON_JOB=<name>, or: run NAME | list | check PATH... "
    "(a file, a folder, or - for standard input)"
)


def main(
    registry: Registry | Mapping[str, Any],
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """A service's cron entrypoint; returns the exit code (`sys.exit(main(jobs))`). Without
    arguments it reads MODE and CRON_JOB; `registry` may be the seed convention's dict."""
    env = os.environ if environ is None else environ
    out, err = out or sys.stdout, err or sys.stderr
    jobs = registry if isinstance(registry, Registry) else Registry.from_tasks(registry)
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        mode = env.get("MODE", "")
        if mode != "cron":
            shown = f"MODE={mode!r}" if mode else "no MODE"
            print(f"error: {shown}: {USAGE}", file=err)
            return EXIT_USAGE
        name = env.get("CRON_JOB", "").strip()
        if not name:
            print(
                f"error: MODE=cron needs CRON_JOB=<job name>; known jobs: {jobs.known()}", file=err
            )
            return EXIT_USAGE
        return run(jobs, name, env, out=out, err=err)
    return command(jobs, arguments, env, out, err)


def command(
    jobs: Registry, arguments: list[str], env: Mapping[str, str], out: TextIO, err: TextIO
) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(arguments)
    except SystemExit as stopped:  # argparse printed why
        return EXIT_USAGE if stopped.code else 0
    if args.command == "run":
        return run(jobs, args.name, env, out=out, err=err)
    if args.command == "list":
        for job in jobs.values():
            print(f"{job.name}\t{job.schedule or '-'}\t{job.description}", file=out)
        return 0
    if args.command == "check":
        return check_manifests(jobs, args.paths, out, err)
    print(f"error: {USAGE}", file=err)
    return EXIT_USAGE


def _parser(registry_option: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sundial-cron", description=__doc__.split("\n")[0])
    if registry_option:
        parser.add_argument(
            "--registry",
            default=os.environ.get(ENV_REGISTRY),
            help=f"MODULE[:ATTRIBUTE]: the image's registry (default ${ENV_REGISTRY})",
        )
    commands = parser.add_subparsers(dest="command")
    run_parser = commands.add_parser("run", help="run one job once (exit 0, 1, 2 or 143)")
    run_parser.add_argument("name")
    commands.add_parser("list", help="the jobs: name, schedule, description")
    check_parser = commands.add_parser(
        "check", help="every ScheduledJob's cronJob known, every registry schedule the manifest's"
    )
    check_parser.add_argument("paths", nargs="+", metavar="PATH")
    return parser


def load_registry(spec: str) -> Registry:
    """`module[:attribute]`: a Registry, or a dict in the seed convention's form; without an
    attribute the module's one Registry, or its CRON_TASKS."""
    module_name, _, attribute = spec.partition(":")
    module = importlib.import_module(module_name)
    if attribute:
        found = getattr(module, attribute, None)
        if found is None:
            raise LookupError(f"{module_name} has no {attribute}")
    else:
        registries = [v for v in vars(module).values() if isinstance(v, Registry)]
        if len(registries) == 1:
            return registries[0]
        found = getattr(module, "CRON_TASKS", None)
        if found is None:
            raise LookupError(
                f"{module_name} has {len(registries)} registries and no CRON_TASKS: name one, "
                f"{module_name}:ATTRIBUTE"
            )
    if isinstance(found, Registry):
        return found
    if isinstance(found, Mapping):
        return Registry.from_tasks(found)
    raise LookupError(f"{spec} is {type(found).__name__}, not a Registry or a dict")


def console(argv: Sequence[str] | None = None) -> int:
    """`python -m sundial_cron` and the `sundial-cron` script."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(registry_option=True)
    try:
        args, _ = parser.parse_known_args(arguments)
    except SystemExit as stopped:
        return EXIT_USAGE if stopped.code else 0
    if not args.registry:
        print(
            f"error: which registry? --registry MODULE[:ATTRIBUTE] or {ENV_REGISTRY}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    sys.path.insert(0, os.getcwd())
    try:
        jobs = load_registry(args.registry)
    except (ImportError, LookupError, ValueError, TypeError) as error:
        print(f"error: registry {args.registry}: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_USAGE
    rest = [
        a
        for a in arguments
        if a != "--registry" and a != args.registry and not a.startswith("--registry=")
    ]
    if not rest:
        parser.print_usage(sys.stderr)
        return EXIT_USAGE
    return command(jobs, rest, os.environ, sys.stdout, sys.stderr)
