"""`kubectl sundial import cronjob | helm-values | schedule`: existing CronJobs, a chart's
`Crons:` values and Temporal schedules as the ScheduledJobs that render them
(planning/importing.py, backends/temporal/importing.py), checked by the server (a dry run
of the CronJob; the schedule's own next action times), printed, written to files, or
applied for adoption. Nothing is written to the cluster unless --adopt is given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio.client import ScheduleDescription

from sundial.api.connection_models import CLUSTER_CONNECTION_KIND
from sundial.api.models import GROUP, PLURAL, VERSION, ConnectionRef, ScheduledJob
from sundial.backends.temporal import importing as temporal_importing
from sundial.backends.temporal.client import Temporal
from sundial.backends.temporal.connections import ConnectionResolver
from sundial.backends.temporal.limits import RequestBudget
from sundial.errors import Retry, SpecProblem, TemporalRejected, TemporalUnavailable
from sundial.kube import PLUGIN_FIELD_MANAGER, KubeClient, api_error_message
from sundial.planning import cronjob as cj
from sundial.planning import importing
from sundial.planning.importing import Difference, Imported, NotImportable
from sundial.planning.temporal_schedule import schedule_id

# The uid of the ScheduledJob not yet made, in the dry run of the CronJob it renders.
_NO_UID = "00000000-0000-0000-0000-000000000000"
# Marks of a tool that renders the CronJob and would write it back over Sundial's.
_RENDERED_BY = {
    "meta.helm.sh/release-name": "Helm release {value}: remove the CronJob from the chart "
    "(with helm.sh/resource-policy: keep) before or as you adopt it, or the next upgrade "
    "fights Sundial for it (docs/migration.md)",
    "argocd.argoproj.io/tracking-id": "Argo CD ({value}): move the CronJob out of the "
    "Application's source as you add the ScheduledJob, or the next sync restores it",
}


class ImportFailure(Exception):
    pass


def add_verb(verbs: Any, common: argparse.ArgumentParser) -> None:
    text = "Print the ScheduledJob that renders an existing CronJob, with what differs."
    sub = verbs.add_parser("import", parents=[common], help=text, description=text)
    kinds = sub.add_subparsers(required=True, metavar="KIND")
    cronjob = kinds.add_parser(
        "cronjob", parents=[common],
        help="CronJobs by name, by label selector (-l) or all (--all); -A for every namespace",
        description="Each CronJob as the ScheduledJob that renders it exactly: the schedule, "
        "time zone, concurrency policy, deadline, history limits, suspend and the job (the "
        "shorthand when it renders the same pod, the full template otherwise), checked by a "
        "server-side dry run; with the differences between the CronJob as it is and the one "
        "Sundial would render, each explained. Refuses what it cannot render faithfully.",
    )  # fmt: skip
    cronjob.set_defaults(verb=import_cronjobs)
    cronjob.add_argument("name", nargs="?", help="the CronJob's name")
    cronjob.add_argument("-l", "--selector", help="label selector")
    cronjob.add_argument("--all", action="store_true", help="every CronJob of the namespace")
    cronjob.add_argument("-A", "--all-namespaces", action="store_true")
    cronjob.add_argument("--time-zone", dest="zone", help="the zone of CronJobs that state "
                         "none: the kube-controller-manager's (default UTC)")  # fmt: skip
    cronjob.add_argument("--template", action="store_true",
                         help="always the full job template, never the shorthand")  # fmt: skip
    cronjob.add_argument("--adopt", action="store_true",
                         help="apply each ScheduledJob with sundial.dev/adopt: the same CronJob "
                         "(uid, Jobs, history) comes under Sundial")  # fmt: skip
    outputs(cronjob)

    values = kinds.add_parser(
        "helm-values", parents=[common],
        help="a chart's Crons: values (the seed convention) as ScheduledJobs",
        description="Each Crons.<name> entry ({Schedule, Envs: {MODE, CRON_JOB, ...}, "
        "ConcurrencyPolicy, Suspend, TtlSecondsAfterFinished, Resources, NodeSelector, "
        "Tolerations, Parallelism}) as a ScheduledJob with the job shorthand (MODE=cron and "
        "CRON_JOB become cronJob). The values state no time zone: the ScheduledJob states "
        "--time-zone (default UTC) and says so. Writes nothing to the cluster; to adopt the "
        "CronJobs the chart made, import those (import cronjob --adopt).",
    )  # fmt: skip
    values.set_defaults(verb=import_helm_values, offline=True)  # reads a file, no cluster
    values.add_argument("file", type=Path, help="the values file")
    values.add_argument("--path", help="where the Crons map is, dotted (default: top-level "
                        "Crons or cronjobs), e.g. Projects.billing.Crons")  # fmt: skip
    values.add_argument("--image", help="the service's image (else each entry's Image)")
    values.add_argument("--name-prefix", default="", help="prefix for each ScheduledJob's "
                        "name, e.g. the service's name and a dash")  # fmt: skip
    values.add_argument("--time-zone", dest="zone", help="the kube-controller-manager's zone, "
                        "which the chart's CronJobs ran in (default UTC)")  # fmt: skip
    outputs(values)

    schedule = kinds.add_parser(
        "schedule", parents=[common],
        help="a Temporal schedule, read over a TemporalConnection, as a ScheduledJob",
        description="The schedule (one cron or interval, zone, jitter, start and end, overlap, "
        "catch-up window, pause and note, the workflow action) as a ScheduledJob on backend "
        "temporal, checked: its next action times must be the schedule's own. Refuses what a "
        "ScheduledJob cannot express (several specs, exclusions, seconds or years in a "
        "calendar, a limited number of actions, pause on failure, search attributes, an "
        "action that is not a workflow), saying what would be lost.",
    )  # fmt: skip
    schedule.set_defaults(verb=import_schedule)
    schedule.add_argument("schedule_id", metavar="ID", help="the schedule id")
    schedule.add_argument("--connection", required=True, help="the connection to read it over: "
                          "NAME (a TemporalConnection in -n) or cluster/NAME (a "
                          "ClusterTemporalConnection)")  # fmt: skip
    schedule.add_argument("--name", help="the ScheduledJob's name (default: the id's last "
                          "part, as a DNS label)")  # fmt: skip
    schedule.add_argument("--schedule-id-prefix", default="sundial/",
                          help="the operator's SUNDIAL_SCHEDULE_ID_PREFIX (default "
                          "sundial/)")  # fmt: skip
    schedule.add_argument("--secrets-namespace", default="sundial-system",
                          help="where a ClusterTemporalConnection's Secrets are (the "
                          "operator's namespace; default sundial-system)")  # fmt: skip
    schedule.add_argument("--adopt", action="store_true",
                          help="apply the ScheduledJob with sundial.dev/adopt naming the "
                          "schedule: Sundial recreates it from the ScheduledJob")  # fmt: skip
    outputs(schedule)


def outputs(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml",
                     help="yaml (default): the ScheduledJobs, each headed by comments "
                     "saying what differs; json: one record per source")  # fmt: skip
    sub.add_argument("--dir", type=Path, help="write <namespace>/<name>.yaml files here "
                     "(a Git repository's folder) instead of printing them")  # fmt: skip


def import_cronjobs(session: Any, args: argparse.Namespace) -> int:
    # Which: a name, a selector, or all; where: -n, or -A (every namespace: all by default).
    chosen = [args.name is not None, bool(args.selector), bool(args.all)]
    if sum(chosen) > 1 or (sum(chosen) == 0 and not args.all_namespaces):
        print("error: name one CronJob, or pass -l SELECTOR, or --all (each with -n or -A)",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.name is not None and args.all_namespaces:
        print("error: a CronJob named is in one namespace: -n, not -A", file=sys.stderr)
        return 2
    batch = client.BatchV1Api()
    cronjobs = _cronjobs(batch, session.namespace, args)
    records = [_import_one(batch, session.api, cronjob, args) for cronjob in cronjobs]
    return _emit(records, args, "CronJobs")


def import_helm_values(session: Any, args: argparse.Namespace) -> int:
    try:
        values = yaml.safe_load(args.file.read_text())
        crons = importing.crons_at(values if isinstance(values, dict) else {}, args.path)
    except (OSError, yaml.YAMLError, ValueError) as error:
        raise ImportFailure(f"{args.file}: {error}") from None
    records = []
    for key, entry in crons.items():
        record = _record(session.namespace, f"{args.name_prefix}{key}")
        record["source"] = f"{args.path or 'Crons'}.{key}"
        try:
            imported = importing.scheduledjob_from_cron_values(
                str(key), entry, namespace=session.namespace, zone=args.zone,
                image=args.image or _image_beside(values, args.path),
                name_prefix=args.name_prefix,
            )  # fmt: skip
        except NotImportable as refusal:
            record["refused"] = refusal.reasons
        else:
            record.update(scheduledJob=imported.scheduledjob, shorthand=True,
                          notes=list(imported.notes))  # fmt: skip
        records.append(record)
    return _emit(records, args, "entries")


def import_schedule(session: Any, args: argparse.Namespace) -> int:
    kind, _, name = args.connection.rpartition("/")
    if kind not in ("", "cluster") or not name:
        raise ImportFailure("--connection is NAME or cluster/NAME")
    ref = ConnectionRef(kind=CLUSTER_CONNECTION_KIND if kind else "TemporalConnection",
                        name=name)  # fmt: skip
    own_prefix = f"{args.schedule_id_prefix}{session.namespace}/"
    sj_name = args.name or _dns_label(args.schedule_id.removeprefix(own_prefix).rsplit("/")[-1])
    own_id = schedule_id(args.schedule_id_prefix, session.namespace, sj_name)
    if args.adopt and args.schedule_id != own_id:
        # Sundial adopts a schedule only under the id it gives the object.
        raise ImportFailure(
            f"--adopt: Sundial can take over only the schedule under the id it gives "
            f"ScheduledJob {session.namespace}/{sj_name}, {own_id}, not {args.schedule_id}. "
            "Apply the ScheduledJob with suspend: true (Sundial creates its own schedule, "
            f"paused), pause {args.schedule_id}, then set suspend: false (docs/migration.md)"
        )
    record = _record(session.namespace, sj_name)
    record["source"] = f"Temporal schedule {args.schedule_id}"
    description = asyncio.run(_describe(args, ref, session.namespace))
    if description is None:
        raise ImportFailure(f"no schedule {args.schedule_id!r} over {ref.kind} {ref.name}")
    try:
        imported = temporal_importing.scheduledjob_from_schedule(
            description, args.schedule_id, name=sj_name, namespace=session.namespace,
            connection={"kind": ref.kind, "name": ref.name}, adopt=args.adopt, own_id=own_id,
        )  # fmt: skip
    except NotImportable as refusal:
        record["refused"] = refusal.reasons
        return _emit([record], args, "schedules")
    record.update(scheduledJob=imported.scheduledjob, notes=list(imported.notes))
    if args.adopt:
        session.api.patch_namespaced_custom_object(
            GROUP, VERSION, session.namespace, PLURAL, sj_name, imported.scheduledjob,
            field_manager=PLUGIN_FIELD_MANAGER, _content_type="application/apply-patch+yaml",
        )  # fmt: skip
        record["applied"] = f"adopting schedule {args.schedule_id}"
    return _emit([record], args, "schedules")


async def _describe(
    args: argparse.Namespace, ref: ConnectionRef, namespace: str
) -> ScheduleDescription | None:
    # The kubeconfig and context the Session loaded (--kubeconfig, --context), as kubectl.
    kube = KubeClient(client.ApiClient())
    resolver = ConnectionResolver(
        kube, default_connection=ref.name, cluster_resource_namespace=args.secrets_namespace,
        refresh_seconds=60,
    )  # fmt: skip
    try:
        connection = await resolver.read(ref, namespace)
    except (SpecProblem, Retry) as problem:
        raise ImportFailure(str(problem)) from None
    temporal = Temporal(RequestBudget(per_second=10))
    try:
        return await temporal.describe(connection, args.schedule_id)
    except (TemporalUnavailable, TemporalRejected) as error:
        raise ImportFailure(f"Temporal at {connection.describe()}: {error}") from None


def _dns_label(text: str) -> str:
    label = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    return label[:52].rstrip("-") or "imported"


def _image_beside(values: Any, path: str | None) -> str | None:
    """The `Image` the values give beside the Crons map (the service's own), if any."""
    parent: Any = values
    for key in (path or "Crons").split(".")[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    image = parent.get("Image") if isinstance(parent, dict) else None
    return image if isinstance(image, str) else None


def _record(namespace: str, name: str) -> dict[str, Any]:
    return {
        "namespace": namespace, "name": name, "scheduledJob": None, "shorthand": False,
        "notes": [], "differences": [], "refused": [], "warnings": [],
    }  # fmt: skip


def _emit(records: list[dict[str, Any]], args: argparse.Namespace, what: str) -> int:
    if not records:
        print(f"no {what} matched", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(records, indent=2))
    elif args.dir is not None:
        for record in records:
            if record["scheduledJob"] is not None:
                path = args.dir / record["namespace"] / f"{record['name']}.yaml"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(_document(record))
                print(f"wrote {path}", file=sys.stderr)
            else:
                print(_comments(record), end="", file=sys.stderr)
    else:
        print("---\n".join(_document(record) for record in records), end="")
    for record in records:
        if record.get("applied"):
            adopting = record["applied"] if isinstance(record["applied"], str) else (
                f"adopting CronJob {record['name']}")  # fmt: skip
            print(f"scheduledjob.{GROUP}/{record['name']} applied in {record['namespace']}, "
                  f"{adopting}", file=sys.stderr)  # fmt: skip
    refused = [r for r in records if r["scheduledJob"] is None]
    if refused:
        print(f"error: {len(refused)} of {len(records)} {what} were not imported: "
              + ", ".join(f"{r['namespace']}/{r['name']}" for r in refused),
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _cronjobs(batch: client.BatchV1Api, namespace: str, args: argparse.Namespace) -> list[Any]:
    if args.name is not None:
        try:
            found = batch.read_namespaced_cron_job(args.name, namespace, _preload_content=False)
        except ApiException as error:
            if error.status == 404:
                raise ImportFailure(f"no CronJob {args.name!r} in namespace {namespace}") from None
            raise
        return [_json(found)]
    selector = args.selector or None
    if args.all_namespaces:
        listed = batch.list_cron_job_for_all_namespaces(label_selector=selector,
                                                        _preload_content=False)  # fmt: skip
    else:
        listed = batch.list_namespaced_cron_job(namespace, label_selector=selector,
                                                _preload_content=False)  # fmt: skip
    return cast(list[Any], _json(listed).get("items", []))


def _import_one(
    batch: client.BatchV1Api, custom: client.CustomObjectsApi, cronjob: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    metadata = cronjob["metadata"]
    record = _record(metadata["namespace"], metadata["name"])
    owner = next((ref for ref in metadata.get("ownerReferences") or [] if ref.get("controller")),
                 None)  # fmt: skip
    if owner is not None:
        whose = "Sundial's already" if owner.get("kind") == "ScheduledJob" else "owned"
        record["refused"] = [f"it is {whose}: controlled by {owner.get('kind')} "
                             f"{owner.get('name')}, which writes it"]  # fmt: skip
        return record
    try:
        imported, found = _faithful_import(batch, custom, cronjob, args)
    except NotImportable as refusal:
        record["refused"] = refusal.reasons
        return record
    except ApiException as error:
        record["refused"] = [
            f"the server refused the dry run: {error.status} {api_error_message(error)}"
        ]
        return record
    annotations = metadata.get("annotations") or {}
    record["warnings"] = [
        text.format(value=annotations[mark]) for mark, text in _RENDERED_BY.items()
        if mark in annotations
    ]  # fmt: skip
    record.update(
        scheduledJob=imported.scheduledjob,
        shorthand=imported.shorthand,
        notes=list(imported.notes),
        differences=[
            {"path": d.path, "before": d.before, "after": d.after, "why": d.why} for d in found
        ],
    )
    record["compared"] = True
    if args.adopt:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, record["namespace"], PLURAL, record["name"], imported.scheduledjob,
            field_manager=PLUGIN_FIELD_MANAGER, _content_type="application/apply-patch+yaml",
        )  # fmt: skip
        record["applied"] = True
    return record


def _faithful_import(
    batch: client.BatchV1Api, custom: client.CustomObjectsApi, cronjob: dict[str, Any],
    args: argparse.Namespace,
) -> tuple[Imported, list[Difference]]:  # fmt: skip
    """The import whose rendering the server stores as the CronJob is, up to what Sundial
    adds on purpose: the shorthand if it is that, else the full template, else refused."""
    name = cronjob["metadata"]["name"]
    tries = [False] if args.template else [True, False]
    found: list[Difference] = []
    for shorthand in tries:
        imported = importing.scheduledjob_from_cronjob(
            cronjob, zone=args.zone, shorthand=shorthand, adopt=args.adopt)  # fmt: skip
        if shorthand and not imported.shorthand:
            continue
        found = importing.differences(cronjob, _rendered(batch, custom, imported))
        if importing.faithful(found):
            return imported, found
    unexplained = [d for d in found if d.why is None]
    raise NotImportable(name, [
        f"{d.path}: {_shown(d.before)} would become {_shown(d.after)}" for d in unexplained
    ])  # fmt: skip


def _rendered(
    batch: client.BatchV1Api, custom: client.CustomObjectsApi, imported: Imported
) -> dict[str, Any]:
    """The CronJob Sundial renders from the imported ScheduledJob, as the server would
    store it (a dry run: defaults filled in, nothing written). The ScheduledJob itself is
    dry-run too, so the CRD's own checks (CEL) speak first."""
    manifest = imported.scheduledjob
    namespace = manifest["metadata"]["namespace"]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, manifest["metadata"]["name"], manifest,
        field_manager=PLUGIN_FIELD_MANAGER, dry_run="All", force=True,
        _content_type="application/apply-patch+yaml",
    )  # fmt: skip
    try:
        sj = ScheduledJob.model_validate(
            {**manifest, "metadata": {**manifest["metadata"], "uid": _NO_UID}})  # fmt: skip
    except ValidationError as error:
        raise NotImportable(manifest["metadata"]["name"], [str(error)]) from None
    desired = cj.cronjob_manifest(sj)
    meta = desired["metadata"]
    # Named by the server: the CronJob's own name is taken (by the CronJob imported).
    desired["metadata"] = {
        key: value for key, value in meta.items() if key not in ("name", "ownerReferences")
    } | {"generateName": "sundial-import-"}  # fmt: skip
    stored = batch.create_namespaced_cron_job(
        namespace, cast(Any, desired), dry_run="All", _preload_content=False)  # fmt: skip
    return cast(dict[str, Any], _json(stored))


def _json(response: Any) -> Any:
    """The body of a call made with _preload_content=False: the server's JSON as is."""
    return json.loads(response.data)


def _comments(record: dict[str, Any]) -> str:
    head = record.get("source") or f"CronJob {record['namespace']}/{record['name']}"
    lines: list[str] = []
    if record["scheduledJob"] is None:
        lines.append(f"{head}: NOT IMPORTED, nothing was applied")
        lines += [f"  - {reason}" for reason in record["refused"]]
    else:
        form = "the job shorthand" if record["shorthand"] else "the full job template"
        lines.append(f"{head} as a ScheduledJob ({form})")
        lines += [f"  note: {note}" for note in record["notes"]]
        lines += [f"  warning: {warning}" for warning in record["warnings"]]
        if record["differences"]:
            lines.append("  the CronJob Sundial renders differs from it, on purpose, in:")
            lines += [
                f"    {d['path']}: {_shown(d['before'])} -> {_shown(d['after'])} ({d['why']})"
                for d in record["differences"]
            ]  # fmt: skip
        elif record.get("compared"):
            lines.append("  the CronJob Sundial renders is the CronJob as it is")
    return "".join(f"# {line}\n" for line in lines)


def _document(record: dict[str, Any]) -> str:
    body = record["scheduledJob"]
    return _comments(record) + (yaml.safe_dump(body, sort_keys=False) if body else "")


def _shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    return json.dumps(value, separators=(",", ":"))
