"""kubectl-sundial: the same day-2 operations on every ScheduledJob, whatever its backend.

`kubectl sundial status|run|backfill|suspend|resume|list|dashboard`. A request (run, backfill) is an
annotation with a fresh id on the ScheduledJob (requests.py); the plugin then waits for the
operator to acknowledge it in status.requests and prints the outcome. suspend and resume
(plugin_pause.py, one object or many by label) write spec.suspend or spec.suspendUntil (and
spec.suspendNote), as `kubectl patch` would, and resume lifts a failure policy's pause.
status and list draw each object's run timeline (timeline.py), in colour on a terminal that
takes it.
dashboard serves a read-only web page on localhost (dashboard/), with the same kubeconfig.

Exit codes: 0 done (or accepted and waiting), 1 bad input or refused, 2 usage, 3 the
operator did not answer in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, NoReturn, TextIO, cast

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from sundial import timeline
from sundial.api import reasons
from sundial.api.models import GROUP, PLURAL, VERSION, ScheduledJob
from sundial.api.status_models import ScheduledJobStatus
from sundial.kube import PLUGIN_FIELD_MANAGER
from sundial.planning import catchup, spread
from sundial.planning import requests as rq
from sundial.planning.schedule import (
    ScheduleError,
    iso,
    parse_duration,
    parse_time,
    time_zone,
    timetable,
)
from sundial.plugin_import import ImportFailure
from sundial.plugin_import import add_verb as add_import_verb
from sundial.plugin_pause import PauseFailure
from sundial.plugin_pause import add_verbs as add_pause_verbs


class Failure(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        session = Offline(args) if getattr(args, "offline", False) else Session(args)
        return int(args.verb(session, args) or 0)
    except Failure as failure:
        print(f"error: {failure}", file=sys.stderr)
        return failure.code
    except (ImportFailure, PauseFailure) as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    except ApiException as error:
        print(f"error: the API server said {error.status} {error.reason}: "
              f"{_api_message(error)}", file=sys.stderr)  # fmt: skip
        return 1


class Offline:
    """For a verb that reads only files: the namespace given (default `default`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.namespace: str = getattr(args, "namespace", None) or "default"


class Session:
    """The kubeconfig, context and namespace, as kubectl resolves them."""

    def __init__(self, args: argparse.Namespace) -> None:
        kubeconfig, context = getattr(args, "kubeconfig", None), getattr(args, "context", None)
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context
            )
            contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=kubeconfig
            )
        except (config.ConfigException, OSError) as error:
            raise Failure(f"cannot load the kubeconfig: {error}") from None
        chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        self.namespace: str = getattr(args, "namespace", None) or (
            (chosen or {}).get("context", {}).get("namespace") or "default"
        )
        self.all_namespaces: bool = bool(getattr(args, "all_namespaces", False))
        self.api = client.CustomObjectsApi()

    def get(self, name: str) -> dict[str, Any]:
        try:
            found = cast(dict[str, Any], self.api.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name
            ))  # fmt: skip
        except ApiException as error:
            if error.status == 404:
                raise Failure(
                    f"no ScheduledJob {name!r} in namespace {self.namespace}: "
                    f"`kubectl get scheduledjobs -n {self.namespace}` lists them"
                ) from None
            raise
        return found

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self.api.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, body,
            field_manager=PLUGIN_FIELD_MANAGER, _content_type="application/merge-patch+json",
        )  # fmt: skip

    def list(self) -> list[dict[str, Any]]:
        if self.all_namespaces:
            listed = self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        else:
            listed = self.api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)
        listed = cast(dict[str, Any], listed)
        items: list[dict[str, Any]] = listed.get("items", [])
        return items


# ---- verbs ----------------------------------------------------------------------------


def run(session: Session, args: argparse.Namespace) -> int:
    session.get(args.name)
    request_id = args.id or new_id()
    _checked_id(request_id)
    session.patch(args.name, {"metadata": {"annotations": {rq.RUN_NOW_ANNOTATION: request_id}}})
    return _await(session, args, "RunNow", request_id)


def backfill(session: Session, args: argparse.Namespace) -> int:
    obj = session.get(args.name)
    start, end = _time(args.start, "--from"), _time(args.end, "--to")
    if end <= start:
        raise Failure(f"--to ({args.end}) must be after --from ({args.start})")
    if end > datetime.now(UTC):
        raise Failure("--to is in the future: backfill runs past slots; the schedule itself "
                      "runs the ones still to come")  # fmt: skip
    try:
        as_run = spread.resolved(ScheduledJob.model_validate(obj))
        table = timetable(as_run.spec)
    except (ScheduleError, ValueError) as error:
        raise Failure(f"the ScheduledJob's schedule cannot be read: {error}") from None
    slots = rq.backfill_slots(table, start, end)
    if len(slots) > rq.MAX_BACKFILL_SLOTS:
        raise Failure(rq.over_cap_message(len(slots)))
    if not slots:
        raise Failure(f"no slot of {args.name}'s schedule falls between {args.start} and "
                      f"{args.end}: nothing to backfill")  # fmt: skip
    request_id = args.id or new_id()
    _checked_id(request_id)
    value = f"{request_id};{iso(start)};{iso(end)}"
    session.patch(args.name, {"metadata": {"annotations": {rq.BACKFILL_ANNOTATION: value}}})
    print(f"backfill {request_id}: {len(slots)} slot(s), {iso(slots[0])} .. {iso(slots[-1])}")
    return _await(session, args, "Backfill", request_id)


def status(session: Session, args: argparse.Namespace) -> int:
    obj = session.get(args.name)
    if args.output:
        _dump(obj, args.output)
        return 0
    print(describe(obj, now=datetime.now(UTC), palette=palette(args.color)))
    return 0


def list_verb(session: Session, args: argparse.Namespace) -> int:
    items = session.list()
    if args.output:
        _dump({"apiVersion": "v1", "kind": "List", "items": items}, args.output)
        return 0
    if not items:
        where = "any namespace" if session.all_namespaces else f"namespace {session.namespace}"
        print(f"No ScheduledJobs in {where}.")
        return 0
    print("\n".join(table(items, datetime.now(UTC), palette(args.color),
                          namespaces=session.all_namespaces)))  # fmt: skip
    return 0


def dashboard(session: Session, args: argparse.Namespace) -> int:
    """The web dashboard on localhost (dashboard/server.py), until Ctrl-C."""
    from sundial.dashboard import server  # aiohttp, only for this verb

    def ready(url: str) -> None:
        print(f"Sundial dashboard: {url}  (read-only, with your kubeconfig's rights; "
              "Ctrl-C stops it)", flush=True)  # fmt: skip

    try:
        asyncio.run(server.serve(
            namespace=getattr(args, "namespace", None), context_namespace=session.namespace,
            port=args.port, open_browser=args.open, ready=ready,
        ))  # fmt: skip
    except KeyboardInterrupt:
        pass
    except OSError as error:
        raise Failure(f"cannot serve the dashboard on port {args.port}: {error}") from None
    return 0


# ---- the readable view ----------------------------------------------------------------

LIST_SLOTS = 20  # cells per row in `list`; `status` draws up to 30


def table(
    items: list[dict[str, Any]],
    now: datetime,
    paint: timeline.Palette = timeline.PLAIN,
    *,
    namespaces: bool = True,
) -> list[str]:
    """`kubectl sundial list`: a row per object with its recent slots (RECENT, oldest to
    newest), its next run and last duration, then the legend of the cells drawn, once."""
    header = ["NAMESPACE", "NAME", "BACKEND", "SCHEDULE", "TIMEZONE", "LAST RESULT",
              "RECENT", "NEXT RUN", "DURATION", "MISSED", "FAILURES", "READY"]  # fmt: skip
    recent = header.index("RECENT")
    rows, painted, drawn = [header], [header[recent]], list[timeline.Cell]()
    for obj in sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        spec, st = obj.get("spec", {}), obj.get("status", {})
        ready = _conditions(st).get(reasons.READY, {})
        every = (spec.get("interval") or {}).get("every")
        line = object_timeline(obj, now, paint, limit=LIST_SLOTS)
        if isinstance(line, str):  # unreadable: said in the cell, as kubectl says <invalid>
            cells, coloured, next_run, took = line, line, "-", "-"
        else:
            cells, coloured = line.plain, line.painted
            next_run, took = _next_in(line.next_runs), line.duration_short
            drawn.extend(line.cells)
        rows.append([
            obj["metadata"]["namespace"], obj["metadata"]["name"],
            spec.get("backend", "kubernetes"), spec.get("schedule") or f"every {every}",
            spec.get("timeZone", "UTC"), st.get("lastResult", "-"), cells, next_run, took,
            str(st.get("missedRuns", 0)), str(st.get("consecutiveFailures", 0)),
            f"{ready.get('status', 'Unknown')}/{ready.get('reason', '-')}",
        ])  # fmt: skip
        painted.append(coloured)
    if not namespaces:
        rows, recent = [row[1:] for row in rows], recent - 1
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for row, coloured in zip(rows, painted, strict=True):
        shown = [coloured + " " * (widths[i] - len(cell)) if i == recent else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]  # fmt: skip
        out.append("   ".join(shown).rstrip())
    if drawn:
        out += ["", "RECENT: oldest to newest. " + timeline.legend(drawn, paint)]
    return out


def object_timeline(
    obj: dict[str, Any], now: datetime, paint: timeline.Palette, *, limit: int,
    zone: tzinfo = UTC,
) -> timeline.Timeline | str:  # fmt: skip
    """The object's timeline, or why its status or spec cannot be drawn."""
    spec = obj.get("spec", {})
    try:
        st = ScheduledJobStatus.model_validate(obj.get("status") or {})
    except ValidationError as error:
        return f"<status unreadable: {error.errors()[0]['msg']}>"
    monitoring = spec.get("monitoring") or {}
    max_run: timedelta | None = None
    if monitoring.get("maxRunDuration"):
        try:
            max_run = parse_duration(str(monitoring["maxRunDuration"]))
        except ScheduleError:
            max_run = None
    return timeline.build(
        st, now, suspended=bool(spec.get("suspend")), suspend_note=spec.get("suspendNote"),
        max_run_duration=max_run, zone=zone, palette=paint, limit=limit,
    )  # fmt: skip


def palette(
    choice: str = "auto", stream: TextIO | None = None, environ: Mapping[str, str] | None = None
) -> timeline.Palette:
    """Colour or not: `--color always|never`, else (auto) only on a terminal that takes it:
    standard output is a tty, TERM is set and not `dumb`, and NO_COLOR is unset or empty
    (no-color.org)."""
    if choice != "auto":
        return timeline.COLOUR if choice == "always" else timeline.PLAIN
    stream = sys.stdout if stream is None else stream
    environ = os.environ if environ is None else environ
    if environ.get("NO_COLOR") or environ.get("TERM", "dumb") == "dumb":
        return timeline.PLAIN
    return timeline.COLOUR if stream.isatty() else timeline.PLAIN


def _next_in(next_runs: str) -> str:
    """The table's NEXT RUN: `in 2h13m`, `due 5m ago`, `none`."""
    if next_runs.startswith("next: none"):
        return "none"
    return next_runs.removeprefix("next ").split(" (", 1)[0]


def describe(
    obj: dict[str, Any], now: datetime | None = None, palette: timeline.Palette = timeline.PLAIN
) -> str:
    """`kubectl sundial status`: the object as a person reads it, its timeline first."""
    spec, st, meta = obj.get("spec", {}), obj.get("status", {}), obj["metadata"]
    zone = spec.get("timeZone", "UTC")
    try:
        local_zone = time_zone(zone)
    except ScheduleError as error:
        raise Failure(f"{meta['namespace']}/{meta['name']}: {error.message}") from None
    lines = [f"ScheduledJob {meta['namespace']}/{meta['name']}"]
    every = (spec.get("interval") or {}).get("every")
    lines.append(f"  Backend:   {spec.get('backend', 'kubernetes')}"
                 f"{_backend_ref(st.get('backendRef') or {})}")  # fmt: skip
    lines.append(f"  Schedule:  {spec.get('schedule') or 'every ' + str(every)} ({zone})")
    if spec.get("suspend"):
        note = spec.get("suspendNote")
        lines.append("  Suspended: yes" + (f" — {note}" if note else ""))
    catch_up = spec.get("catchUp") or {}
    if catch_up:
        lines.append(f"  Catch-up:  {_catch_up(catch_up)}")
    pause = st.get("pause") or {}
    if pause and pause.get("reason") != "Suspended":
        # A maintenance window or the failure policy (planning/pausing.py says which).
        lines.append(f"  Paused:    {pause.get('reason')}: {pause.get('message', '')}")
    drawn = object_timeline(obj, now or datetime.now(UTC), palette, limit=30, zone=local_zone)
    if isinstance(drawn, str):
        lines.append(f"  Timeline:  {drawn}")
    else:
        lines += drawn.block()
    lines.append("  Next runs:")
    for moment in st.get("nextRunTimes", []) or []:
        utc = parse_time(moment)
        if utc is None:
            continue
        local = utc.astimezone(local_zone)
        lines.append(f"    {local.isoformat()}  ({iso(utc)})")
    if not st.get("nextRunTimes"):
        lines.append("    none")
    lines.append("  Recent runs:")
    runs = st.get("recentRuns", [])
    if runs:
        lines.append("    SCHEDULED              RESULT      DURATION  DELAY   REASON")
    for r in runs:
        duration = f"{r['durationSeconds']:g}s" if "durationSeconds" in r else "-"
        delay = f"{r['startDelaySeconds']:g}s" if "startDelaySeconds" in r else "-"
        extra = " ".join(x for x in (r.get("reason", ""), f"[{r['requested']}]"
                                     if r.get("requested") else "") if x)  # fmt: skip
        lines.append(f"    {r['scheduledTime']:<22} {r['result']:<11} {duration:<9} "
                     f"{delay:<7} {extra}")  # fmt: skip
        if r.get("message"):
            # What the run said it did (its termination message: sundial-cron's summary).
            lines.append(f"      {r['message']}")
    if not runs:
        lines.append("    none yet")
    lines.append(f"  Missed: {st.get('missedRuns', 0)}   Skipped: {st.get('skippedRuns', 0)}")
    for miss in st.get("recentMissedRuns", []):
        approx = " (approximate)" if miss.get("approximate") else ""
        lines.append(f"    {miss['scheduledTime']}  {miss['reason']}{approx}")
    lines.append("  Conditions:")
    for c in st.get("conditions", []):
        lines.append(f"    {c['type']:<12} {c['status']:<8} {c['reason']}: {c.get('message', '')}")
    if st.get("requests"):
        lines.append("  Requests:")
        for entry in st["requests"]:
            lines.append(f"    {entry['kind']} {entry['id']}: {entry['outcome']} "
                         f"— {entry.get('message', '')}")  # fmt: skip
    return "\n".join(lines)


def _catch_up(catch_up: dict[str, Any]) -> str:
    """spec.catchUp in words (planning/catchup.py)."""
    policy = catch_up.get("policy")
    if policy == "None":
        return f"None (a slot later than {catchup.GRACE.total_seconds():g}s never runs)"
    window = catch_up.get("window") or catchup.DEFAULT_WINDOW_TEXT
    return f"{policy} within {window} (after an outage or a maintenance window)"


def _backend_ref(ref: dict[str, Any]) -> str:
    if ref.get("kind") == "CronJob":
        return f" (CronJob {ref.get('namespace')}/{ref.get('name')})"
    if ref.get("kind") == "TemporalSchedule":
        return f" (schedule {ref.get('scheduleId')} in {ref.get('namespace')})"
    return ""


# ---- helpers --------------------------------------------------------------------------


def _await(session: Session, args: argparse.Namespace, kind: str, request_id: str) -> int:
    """Wait for status.requests to name the request; print the outcome."""
    if args.no_wait:
        print(f"{kind} {request_id} requested")
        return 0
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        entries = session.get(args.name).get("status", {}).get("requests", [])
        entry = next((e for e in entries if e["kind"] == kind and e["id"] == request_id), None)
        if entry is not None:
            print(f"{kind} {request_id}: {entry['outcome']} — {entry.get('message', '')}")
            return 1 if entry["outcome"] == "Refused" else 0
        time.sleep(1)
    raise Failure(
        f"the operator did not acknowledge {kind} {request_id} within {args.timeout:g}s; the "
        "request stays on the object and is handled when it runs: check the operator "
        "(`kubectl -n sundial-system get pods`) and `kubectl sundial status " + args.name + "`",
        code=3,
    )


def new_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dt%H%M%S") + "-" + uuid.uuid4().hex[:6]


def _checked_id(request_id: str) -> None:
    if not rq.ID_PATTERN.match(request_id):
        raise Failure(f"--id {request_id!r}: use 1-63 letters, digits, '.', '_' or '-'")


def _time(text: str, flag: str) -> datetime:
    try:
        return rq.parse_time(text)
    except ValueError:
        raise Failure(f"{flag} {text!r} is not an RFC 3339 time with a zone, such as "
                      "2026-12-01T00:00:00Z") from None  # fmt: skip


def _conditions(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st.get("conditions", [])}


def _dump(obj: Any, output: str) -> None:
    print(json.dumps(obj, indent=2) if output == "json" else yaml.safe_dump(obj), end="\n")


def _api_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.body)
    except ValueError:
        return str(error.body)


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a flag given before the verb is not reset by the verb's own default.
    common.add_argument("-n", "--namespace", default=argparse.SUPPRESS, help="namespace")
    common.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="kubeconfig file")
    common.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context")
    top = argparse.ArgumentParser(
        prog="kubectl sundial", parents=[common],
        description="Day-2 operations on ScheduledJobs, on either backend.",
    )  # fmt: skip
    verbs = top.add_subparsers(required=True, metavar="VERB")

    def verb(name: str, call: Any, text: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, parents=[common], help=text, description=text)
        sub.set_defaults(verb=call)
        return sub

    def waits(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--id", help="request id (default: a fresh one); the same id is "
                         "never acted on twice")  # fmt: skip
        sub.add_argument("--timeout", type=float, default=60.0,
                         help="seconds to wait for the operator (default 60)")  # fmt: skip
        sub.add_argument("--no-wait", action="store_true", help="do not wait")

    def coloured(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                         help="colour the timeline: auto (default) on a terminal that takes "
                         "it, unless NO_COLOR is set")  # fmt: skip

    # A new verb is one more verb(...) here and a function above.
    sub = verb("status", status, "Timeline, backend, next runs, recent and missed runs, "
               "conditions.")  # fmt: skip
    sub.add_argument("name")
    sub.add_argument("-o", "--output", choices=["json", "yaml"])
    coloured(sub)
    sub = verb("run", run, "Start one run now, counted by the concurrency policy.")
    sub.add_argument("name")
    waits(sub)
    sub = verb("backfill", backfill, "Run the past slots of a range (at most 100).")
    sub.add_argument("name")
    sub.add_argument("--from", dest="start", required=True, help="RFC 3339 start")
    sub.add_argument("--to", dest="end", required=True, help="RFC 3339 end (in the past)")
    waits(sub)
    add_pause_verbs(verb)
    sub = verb("list", list_verb, "A wider table than kubectl get, with each object's "
               "recent slots.")  # fmt: skip
    sub.add_argument("-A", "--all-namespaces", action="store_true")
    sub.add_argument("-o", "--output", choices=["json", "yaml"])
    coloured(sub)
    sub = verb("dashboard", dashboard, "A read-only web page on localhost: every ScheduledJob "
               "you may read, live.")  # fmt: skip
    sub.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    sub.add_argument("--open", action="store_true", help="open it in the web browser")
    add_import_verb(verbs, common)
    return top


def console() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":  # python -m sundial.plugin, as the kubectl-sundial entry point
    console()
