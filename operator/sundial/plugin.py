"""kubectl-sundial: the same day-2 operations on every ScheduledJob, whatever its backend.

`kubectl sundial status|run|backfill|suspend|resume|list`. A request (run, backfill) is an
annotation with a fresh id on the ScheduledJob (requests.py); the plugin then waits for the
operator to acknowledge it in status.requests and prints the outcome. suspend and resume
write spec.suspend (and spec.suspendNote), as `kubectl patch` would.

Exit codes: 0 done (or accepted and waiting), 1 bad input or refused, 2 usage, 3 the
operator did not answer in time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any, NoReturn, cast

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sundial.api import reasons
from sundial.api.models import GROUP, PLURAL, VERSION, ScheduledJobSpec
from sundial.planning import requests as rq
from sundial.planning.schedule import ScheduleError, iso, parse_time, time_zone, timetable

FIELD_MANAGER = "kubectl-sundial"
ARGOCD_MARKS = ("argocd.argoproj.io/tracking-id", "argocd.argoproj.io/instance")


class Failure(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        session = Session(args)
        return int(args.verb(session, args) or 0)
    except Failure as failure:
        print(f"error: {failure}", file=sys.stderr)
        return failure.code
    except ApiException as error:
        print(f"error: the API server said {error.status} {error.reason}: "
              f"{_api_message(error)}", file=sys.stderr)  # fmt: skip
        return 1


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
            field_manager=FIELD_MANAGER, _content_type="application/merge-patch+json",
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
        table = timetable(ScheduledJobSpec.model_validate(obj.get("spec", {})))
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


def suspend(session: Session, args: argparse.Namespace) -> int:
    obj = session.get(args.name)
    _warn_if_argocd(obj, "suspend")
    session.patch(args.name, {"spec": {"suspend": True, "suspendNote": args.note}})
    print(f"scheduledjob {args.name} suspended" + (f" ({args.note})" if args.note else ""))
    return 0


def resume(session: Session, args: argparse.Namespace) -> int:
    obj = session.get(args.name)
    _warn_if_argocd(obj, "resume")
    session.patch(args.name, {"spec": {"suspend": False, "suspendNote": None}})
    print(f"scheduledjob {args.name} resumed")
    return 0


def status(session: Session, args: argparse.Namespace) -> int:
    obj = session.get(args.name)
    if args.output:
        _dump(obj, args.output)
        return 0
    print(describe(obj))
    return 0


def list_verb(session: Session, args: argparse.Namespace) -> int:
    items = session.list()
    if args.output:
        _dump({"apiVersion": "v1", "kind": "List", "items": items}, args.output)
        return 0
    header = ["NAMESPACE", "NAME", "BACKEND", "SCHEDULE", "TIMEZONE", "SUSPENDED",
              "LAST RESULT", "LAST RUN", "NEXT RUN", "MISSED", "FAILURES", "READY"]  # fmt: skip
    rows = [header]
    for obj in sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        spec, st = obj.get("spec", {}), obj.get("status", {})
        ready = _conditions(st).get(reasons.READY, {})
        every = (spec.get("interval") or {}).get("every")
        rows.append([
            obj["metadata"]["namespace"], obj["metadata"]["name"],
            spec.get("backend", "kubernetes"), spec.get("schedule") or f"every {every}",
            spec.get("timeZone", "UTC"), str(bool(spec.get("suspend", False))).lower(),
            st.get("lastResult", "-"), st.get("lastScheduleTime", "-"),
            (st.get("nextRunTimes") or ["-"])[0], str(st.get("missedRuns", 0)),
            str(st.get("consecutiveFailures", 0)),
            f"{ready.get('status', 'Unknown')}/{ready.get('reason', '-')}",
        ])  # fmt: skip
    if not session.all_namespaces:
        rows = [row[1:] for row in rows]
    if len(rows) == 1:
        where = "any namespace" if session.all_namespaces else f"namespace {session.namespace}"
        print(f"No ScheduledJobs in {where}.")
        return 0
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return 0


# ---- the readable view ----------------------------------------------------------------


def describe(obj: dict[str, Any]) -> str:
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


def _warn_if_argocd(obj: dict[str, Any], verb: str) -> None:
    meta = obj["metadata"]
    marks = {**(meta.get("annotations") or {}), **(meta.get("labels") or {})}
    if any(mark in marks for mark in ARGOCD_MARKS):
        print(f"warning: {meta['name']} is managed by Argo CD: with self-heal on, Argo CD "
              f"reverts this {verb}. Change spec.suspend in git instead, or turn self-heal "
              "off for the Application while it is suspended.", file=sys.stderr)  # fmt: skip


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

    sub = verb("status", status, "Backend, next runs, recent runs, missed runs, conditions.")
    sub.add_argument("name")
    sub.add_argument("-o", "--output", choices=["json", "yaml"])
    sub = verb("run", run, "Start one run now, counted by the concurrency policy.")
    sub.add_argument("name")
    waits(sub)
    sub = verb("backfill", backfill, "Run the past slots of a range (at most 100).")
    sub.add_argument("name")
    sub.add_argument("--from", dest="start", required=True, help="RFC 3339 start")
    sub.add_argument("--to", dest="end", required=True, help="RFC 3339 end (in the past)")
    waits(sub)
    sub = verb("suspend", suspend, "Stop scheduling runs (spec.suspend), with a note.")
    sub.add_argument("name")
    sub.add_argument("--note", help="why, shown in status and Temporal's pause note")
    sub = verb("resume", resume, "Schedule runs again.")
    sub.add_argument("name")
    sub = verb("list", list_verb, "A wider table than kubectl get.")
    sub.add_argument("-A", "--all-namespaces", action="store_true")
    sub.add_argument("-o", "--output", choices=["json", "yaml"])
    return top


def console() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":  # python -m sundial.plugin, as the kubectl-sundial entry point
    console()
