"""kubectl sundial suspend | resume: one ScheduledJob by name, or many (-l SELECTOR, -A),
indefinitely or for a maintenance window (--until TIME, --for DURATION).

suspend writes spec.suspend, or spec.suspendUntil for a window, with spec.suspendNote, as
`kubectl patch` would; the operator does the rest on either backend (planning/pausing.py).
resume clears them, and lifts a failure policy's pause by naming it (pausing's
RESUME_ANNOTATION holds its status.pause.since). Each object gets a line saying what was
done; an object already as asked is left alone (no write), so a bulk operation is safe to
repeat. A refusal for one object is reported and the others go on (exit code 1).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sundial.api.models import GROUP, PLURAL, VERSION
from sundial.kube import PLUGIN_FIELD_MANAGER
from sundial.planning.pausing import RESUME_ANNOTATION
from sundial.planning.schedule import ScheduleError, iso, parse_duration, parse_time

ARGOCD_MARKS = ("argocd.argoproj.io/tracking-id", "argocd.argoproj.io/instance")


class PauseFailure(Exception):
    """Bad input: nothing was written."""


class Session(Protocol):
    namespace: str
    all_namespaces: bool
    api: client.CustomObjectsApi


def add_verbs(verb: Any) -> None:
    """suspend and resume, added through plugin.parser's `verb` (name, call, help)."""
    sub = verb("suspend", suspend, "Stop scheduling runs: indefinitely (spec.suspend) or "
               "for a maintenance window (--until, --for: spec.suspendUntil), with a "
               "note.")  # fmt: skip
    _which(sub)
    sub.add_argument("--note", help="why, shown in status and Temporal's pause note")
    until = sub.add_mutually_exclusive_group()
    until.add_argument("--until", help="resume by itself at this RFC 3339 time (with a zone)")
    until.add_argument("--for", dest="duration", help="resume by itself after this duration, "
                       "such as 2h or 90m")  # fmt: skip
    sub = verb("resume", resume, "Schedule runs again: lifts spec.suspend, a maintenance "
               "window and a failure policy's pause.")  # fmt: skip
    _which(sub)


def _which(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("name", nargs="?", help="one ScheduledJob (or -l)")
    sub.add_argument("-l", "--selector", help="every ScheduledJob with these labels")
    sub.add_argument("-A", "--all-namespaces", action="store_true",
                     help="with -l: in every namespace")  # fmt: skip


def suspend(session: Session, args: argparse.Namespace) -> int:
    until = _until(args)
    wanted: dict[str, Any] = (
        {"suspend": False, "suspendUntil": iso(until), "suspendNote": args.note}
        if until is not None
        else {"suspend": True, "suspendUntil": None, "suspendNote": args.note}
    )
    what = f"suspended until {iso(until)}" if until else "suspended"
    what += f" ({args.note})" if args.note else ""

    def act(obj: dict[str, Any]) -> str:
        spec = obj.get("spec") or {}
        if all(spec.get(field) == value for field, value in wanted.items()):
            return f"already {what}"
        _warn_if_argocd(obj, "suspend")
        _patch(session, obj, {"spec": wanted})
        return what

    return _each(session, args, act)


def resume(session: Session, args: argparse.Namespace) -> int:
    def act(obj: dict[str, Any]) -> str:
        spec = obj.get("spec") or {}
        pause = (obj.get("status") or {}).get("pause") or {}
        done = []
        body: dict[str, Any] = {}
        if spec.get("suspend") or spec.get("suspendUntil") or spec.get("suspendNote"):
            body["spec"] = {"suspend": False, "suspendUntil": None, "suspendNote": None}
            done.append("resumed" if spec.get("suspend") or spec.get("suspendUntil")
                        else "note cleared")  # fmt: skip
        annotations = obj["metadata"].get("annotations") or {}
        if pause.get("reason") == "FailurePolicy" and pause.get("since"):
            if annotations.get(RESUME_ANNOTATION) != pause["since"]:
                body["metadata"] = {"annotations": {RESUME_ANNOTATION: pause["since"]}}
            tripped = pause.get("trippedBy")
            done.append("failure policy's pause lifted"
                        + (f" (tripped by the run for {tripped})" if tripped else ""))  # fmt: skip
        if not body:
            return "not paused: nothing to do" if not done else "already " + "; ".join(done)
        _warn_if_argocd(obj, "resume")
        _patch(session, obj, body)
        return "; ".join(done)

    return _each(session, args, act)


def _until(args: argparse.Namespace) -> datetime | None:
    now = datetime.now(UTC)
    if args.duration:
        try:
            return now + parse_duration(args.duration)
        except ScheduleError as error:
            raise PauseFailure(f"--for {args.duration!r}: {error}") from None
    if not args.until:
        return None
    try:
        until = parse_time(args.until)
    except ValueError:
        until = None
    if until is None:
        raise PauseFailure(f"--until {args.until!r} is not an RFC 3339 time with a zone, "
                           "such as 2026-12-24T06:00:00Z (without one it is "
                           "ambiguous)")  # fmt: skip
    if until <= now:
        raise PauseFailure(f"--until {args.until} is in the past: the window would be over "
                           "before it began")  # fmt: skip
    return until


def _each(session: Session, args: argparse.Namespace, act: Any) -> int:
    """`act` on each chosen object, a line per object; 1 if any was refused."""
    if (args.name is None) == (args.selector is None):
        raise PauseFailure("name one ScheduledJob, or choose several with -l SELECTOR")
    if args.name is not None and args.all_namespaces:
        raise PauseFailure("-A goes with -l SELECTOR, not with a name")
    objects = _chosen(session, args)
    if not objects:
        where = "any namespace" if args.all_namespaces else f"namespace {session.namespace}"
        raise PauseFailure(f"no ScheduledJob matches {args.selector!r} in {where}")
    failed = 0
    for obj in objects:
        meta = obj["metadata"]
        label = f"scheduledjob {meta['namespace']}/{meta['name']}"
        try:
            print(f"{label}: {act(obj)}")
        except ApiException as error:
            failed += 1
            print(f"{label}: refused: {error.status} {error.reason}", file=sys.stderr)
    return 1 if failed else 0


def _chosen(session: Session, args: argparse.Namespace) -> list[dict[str, Any]]:
    api = session.api
    if args.name is not None:
        try:
            return [cast(dict[str, Any], api.get_namespaced_custom_object(
                GROUP, VERSION, session.namespace, PLURAL, args.name))]  # fmt: skip
        except ApiException as error:
            if error.status == 404:
                raise PauseFailure(
                    f"no ScheduledJob {args.name!r} in namespace {session.namespace}: "
                    f"`kubectl get scheduledjobs -n {session.namespace}` lists them"
                ) from None
            raise
    if args.all_namespaces:
        listed = api.list_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                label_selector=args.selector)  # fmt: skip
    else:
        listed = api.list_namespaced_custom_object(GROUP, VERSION, session.namespace, PLURAL,
                                                   label_selector=args.selector)  # fmt: skip
    items = cast(dict[str, Any], listed).get("items", [])
    return sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))


def _patch(session: Session, obj: dict[str, Any], body: dict[str, Any]) -> None:
    """A merge patch guarded by the object's resourceVersion: written only over what was
    read (a conflict is reported, never written blind)."""
    meta = obj["metadata"]
    body = {**body, "metadata": {**body.get("metadata", {}),
                                 "resourceVersion": meta["resourceVersion"]}}  # fmt: skip
    session.api.patch_namespaced_custom_object(
        GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], body,
        field_manager=PLUGIN_FIELD_MANAGER, _content_type="application/merge-patch+json",
    )  # fmt: skip


def _warn_if_argocd(obj: dict[str, Any], verb: str) -> None:
    meta = obj["metadata"]
    marks = {**(meta.get("annotations") or {}), **(meta.get("labels") or {})}
    if any(mark in marks for mark in ARGOCD_MARKS):
        print(f"warning: {meta['name']} is managed by Argo CD: with self-heal on, Argo CD "
              f"reverts this {verb}. Change spec.suspend or spec.suspendUntil in git "
              "instead, or turn self-heal off for the Application meanwhile.",
              file=sys.stderr)  # fmt: skip
