"""An existing CronJob as the ScheduledJob that renders it, and what differs between the two
CronJobs: the import behind `kubectl sundial import cronjob` (plugin_import.py). Pure.

The ScheduledJob states every field the CronJob relies on a default for, because the two
disagree (a CronJob defaults concurrencyPolicy to Allow, Sundial to Forbid; the history
limits are swapped; an unset timeZone is the controller manager's zone, Sundial's is UTC).
The job is the shorthand when rendering the shorthand gives back the CronJob's own pod
(one container named `job`, restartPolicy Never, the restricted defaults already set, no
field the shorthand lacks), the full template otherwise. Whether a rendering is faithful
is the server's word: the plugin renders both through a server-side dry run and compares
them here (`differences`), field by field; what Sundial always adds is named and
explained, anything else means the import is not faithful.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from sundial.api.models import GROUP, KIND, MAX_NAME_LENGTH, VERSION
from sundial.planning import cronjob as cj
from sundial.planning.ownership import ADOPT_ANNOTATION
from sundial.planning.schedule import ScheduleError, normalize_cron, time_zone

# A CronJob may carry its zone in the schedule (deprecated since Kubernetes 1.27 and
# refused with spec.timeZone): the ScheduledJob states it in timeZone instead.
_ZONE_PREFIX = re.compile(r"^(CRON_TZ|TZ)=(\S+)\s+(.*)$")
# What a CronJob's spec holds that its ScheduledJob states (the rest is the job).
_CRONJOB_FIELDS = frozenset({
    "schedule", "timeZone", "concurrencyPolicy", "suspend", "startingDeadlineSeconds",
    "successfulJobsHistoryLimit", "failedJobsHistoryLimit", "jobTemplate",
})  # fmt: skip
HISTORY_LIMIT_MAX = 100  # the ScheduledJob's own bound (spec_models)
# What Sundial adds to every CronJob it renders: its labels, and each run's env.
_SUNDIAL_LABELS = frozenset({cj.MANAGED_BY_LABEL, cj.SCHEDULEDJOB_LABEL})
_RUN_ENV = frozenset({cj.RUN_ENV_JOB_NAME, cj.RUN_ENV_CRONJOB})
# Labels of the CronJob not carried to its ScheduledJob: they say who manages the CronJob.
_MANAGER_LABELS = ("app.kubernetes.io/managed-by", "helm.sh/chart")

# Fields the apiserver fills in on every pod template, with their values: the shorthand
# leaves them to it, so an original that has them at these values still fits.
_POD_DEFAULTS: dict[str, Any] = {
    "dnsPolicy": "ClusterFirst",
    "schedulerName": "default-scheduler",
    "terminationGracePeriodSeconds": 30,
    "securityContext": {},
}
_CONTAINER_DEFAULTS: dict[str, Any] = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
    "resources": {},
}
# Shorthand fields, by where they sit in the pod.
_SHORTHAND_CONTAINER = ("command", "args", "env", "envFrom", "resources")
_SHORTHAND_POD = ("serviceAccountName", "nodeSelector", "tolerations")
_SHORTHAND_JOB = ("parallelism", "activeDeadlineSeconds", "ttlSecondsAfterFinished")


class NotImportable(ValueError):
    """The CronJob cannot be rendered faithfully by a ScheduledJob: each reason says what
    stops it."""

    def __init__(self, name: str, reasons: list[str]) -> None:
        super().__init__(f"CronJob {name} cannot be imported faithfully: " + "; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class Imported:
    scheduledjob: dict[str, Any]
    # What the ScheduledJob states that the CronJob left unsaid, and why.
    notes: tuple[str, ...]
    shorthand: bool


def scheduledjob_from_cronjob(
    cronjob: dict[str, Any], *, zone: str | None = None, shorthand: bool = True,
    adopt: bool = False,
) -> Imported:  # fmt: skip
    """The ScheduledJob that renders `cronjob` (as the apiserver returns it). `zone` is the
    time zone for a CronJob without one (the controller manager's; default UTC).
    `shorthand=False` keeps the full template even when the shorthand fits."""
    metadata = cronjob.get("metadata") or {}
    name = str(metadata.get("name", ""))
    spec = cronjob.get("spec") or {}
    problems: list[str] = []
    notes: list[str] = []
    if len(name) > MAX_NAME_LENGTH:
        problems.append(
            f"its name has {len(name)} characters; a ScheduledJob's has at most "
            f"{MAX_NAME_LENGTH} (the CronJob keeps the ScheduledJob's name and the "
            "controller adds 11 to name each Job)"
        )
    schedule, zone_in_schedule = _split_zone(str(spec.get("schedule", "")))
    stated_zone = spec.get("timeZone") or zone_in_schedule
    if stated_zone is None:
        stated_zone = zone or "UTC"
        notes.append(
            f"spec.timeZone: {stated_zone}: the CronJob has none, so it ran in the "
            "kube-controller-manager's local zone; the ScheduledJob states it (pass "
            "--time-zone if the controller manager's zone is not "
            f"{stated_zone})"
        )
    elif zone_in_schedule is not None:
        notes.append(
            f"spec.timeZone: {zone_in_schedule}: moved from the schedule's "
            f"{schedule and 'TZ='} prefix, which Kubernetes deprecated"
        )
    try:
        time_zone(stated_zone)
        normalize_cron(schedule, "kubernetes")
    except ScheduleError as error:
        problems.append(error.message)
    for field in ("successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        if int(spec.get(field) or 0) > HISTORY_LIMIT_MAX:
            problems.append(
                f"spec.{field} is {spec[field]}; a ScheduledJob keeps at most "
                f"{HISTORY_LIMIT_MAX} (lower it on the CronJob first)"
            )
    unknown = sorted(set(spec) - _CRONJOB_FIELDS)
    if unknown:
        problems.append(f"spec has fields a ScheduledJob cannot state: {', '.join(unknown)}")
    template = spec.get("jobTemplate") or {}
    if not (template.get("spec") or {}).get("template"):
        problems.append("spec.jobTemplate has no pod template")
    if problems:
        raise NotImportable(name, problems)

    job = _shorthand(template) if shorthand else None
    sj_spec: dict[str, Any] = {
        "backend": "kubernetes",
        "schedule": " ".join(schedule.split()),
        "timeZone": stated_zone,
        # Stated, never left to the defaults: the CronJob's and Sundial's differ.
        "concurrencyPolicy": spec.get("concurrencyPolicy") or "Allow",
        "suspend": bool(spec.get("suspend", False)),
        "successfulRunsHistoryLimit": _or(spec.get("successfulJobsHistoryLimit"), 3),
        "failedRunsHistoryLimit": _or(spec.get("failedJobsHistoryLimit"), 1),
        "job": job if job is not None else {"template": _template(template)},
    }
    if spec.get("startingDeadlineSeconds") is not None:
        sj_spec["startingDeadlineSeconds"] = spec["startingDeadlineSeconds"]
    labels = {
        key: value for key, value in (metadata.get("labels") or {}).items()
        if key not in _MANAGER_LABELS and not key.startswith(f"{GROUP}/")
    }  # fmt: skip
    manifest = scheduledjob_manifest(name, metadata.get("namespace"), sj_spec, labels=labels,
                                     adopting=name if adopt else None)  # fmt: skip
    return Imported(manifest, tuple(notes), shorthand=job is not None)


def scheduledjob_manifest(
    name: str, namespace: str | None, spec: dict[str, Any], *,
    labels: dict[str, str] | None = None, adopting: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """An imported ScheduledJob; `adopting` names what it takes over (ADOPT_ANNOTATION)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    if adopting is not None:
        metadata["annotations"] = {ADOPT_ANNOTATION: adopting}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": metadata, "spec": spec}


def _or(value: Any, default: int) -> int:
    return default if value is None else int(value)


def _split_zone(schedule: str) -> tuple[str, str | None]:
    found = _ZONE_PREFIX.match(schedule.strip())
    return (found.group(3), found.group(2)) if found else (schedule, None)


def _template(template: dict[str, Any]) -> dict[str, Any]:
    """The job template as the user wrote it: without the server's bookkeeping and without
    Sundial's own labels (an earlier render's), which Sundial adds back."""
    kept = copy.deepcopy(template)
    for metadata in (kept.get("metadata"), ((kept.get("spec") or {}).get("template") or {})
                     .get("metadata")):  # fmt: skip
        if not isinstance(metadata, dict):
            continue
        metadata.pop("creationTimestamp", None)
        labels = {k: v for k, v in (metadata.get("labels") or {}).items()
                  if k not in _SUNDIAL_LABELS}  # fmt: skip
        if labels:
            metadata["labels"] = labels
        else:
            metadata.pop("labels", None)
    for holder in (kept, (kept.get("spec") or {}).get("template") or {}):
        if holder.get("metadata") == {}:
            holder.pop("metadata")
    return kept


def _shorthand(template: dict[str, Any]) -> dict[str, Any] | None:
    """The shorthand job whose rendering is this template, if there is one (the server's
    dry run confirms it); None when the template needs the full form."""
    if _has_user_metadata(template.get("metadata") or {}):
        return None
    job_spec = dict(template.get("spec") or {})
    pod_template = job_spec.pop("template", {}) or {}
    if set(job_spec) - set(_SHORTHAND_JOB):
        return None
    if _has_user_metadata(pod_template.get("metadata") or {}):
        return None
    pod = _without(pod_template.get("spec") or {}, _POD_DEFAULTS)
    containers = pod.pop("containers", [])
    if len(containers) != 1 or pod.pop("restartPolicy", None) != "Never":
        return None
    pod_security = pod.pop("securityContext", {})
    if not _covers(pod_security, cj.DEFAULT_POD_SECURITY):
        return None
    container = _without(containers[0], _CONTAINER_DEFAULTS)
    if container.pop("name", None) != cj.CONTAINER_NAME:
        return None
    image = container.pop("image", None)
    container.pop("imagePullPolicy", None)  # the server's default for the image's tag
    security = container.pop("securityContext", {})
    if not image or not _covers(security, cj.DEFAULT_CONTAINER_SECURITY):
        return None
    job: dict[str, Any] = {"image": image}
    env = [item for item in container.pop("env", []) or []
           if item.get("name") not in _RUN_ENV]  # fmt: skip
    cron_job = _cron_job(env)
    if cron_job is not None:
        job["cronJob"] = cron_job
        env = env[:-2]
    if env:
        job["env"] = env
    for field in _SHORTHAND_CONTAINER:
        if field != "env" and field in container:
            job[field] = container.pop(field)
    for field in _SHORTHAND_POD:
        if field in pod:
            job[field] = pod.pop(field)
    if container or pod:
        return None  # a field the shorthand has no place for
    for field in _SHORTHAND_JOB:
        if field in job_spec:
            job[field] = job_spec[field]
    if security != cj.DEFAULT_CONTAINER_SECURITY:
        job["securityContext"] = security
    if pod_security != cj.DEFAULT_POD_SECURITY:
        job["podSecurityContext"] = pod_security
    # The shorthand's TTL default (300 s) is not the CronJob's (none: kept until the
    # history limit removes it): stated as the original has it.
    if "ttlSecondsAfterFinished" not in job:
        return None
    return job


def _cron_job(env: list[dict[str, Any]]) -> str | None:
    """The seed convention's last two variables, MODE=cron and CRON_JOB=<name>, as the
    shorthand's cronJob renders them (in that order, at the end)."""
    if len(env) < 2:
        return None
    mode, name = env[-2], env[-1]
    if (
        mode == {"name": "MODE", "value": "cron"}
        and name.get("name") == "CRON_JOB"
        and set(name) == {"name", "value"}
    ):
        return str(name["value"])
    return None


def _covers(given: dict[str, Any], defaults: dict[str, Any]) -> bool:
    return all(given.get(key) == value for key, value in defaults.items())


def _without(fields: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in defaults or defaults[k] != v}


def _has_user_metadata(metadata: dict[str, Any]) -> bool:
    """Whether this template metadata holds anything of the user's (labels, annotations)."""
    labels = {k for k in (metadata.get("labels") or {}) if k not in _SUNDIAL_LABELS}
    return bool(labels or metadata.get("annotations"))


# ---- comparing the CronJob as it is with the one Sundial renders ------------------------


@dataclass(frozen=True)
class Difference:
    path: str
    before: Any  # None: not set
    after: Any
    why: str | None  # None: not one Sundial makes on purpose (the import is not faithful)


_WHY_LABELS = "Sundial's labels, by which it finds each run's Job and Pods"
_WHY_ENV = ("each run is told its Job and CronJob, hence its slot (docs/cron-library.md); "
            "a name the container sets itself is left alone")  # fmt: skip
_WHY_METADATA = ("the CronJob's own labels and annotations are Sundial's once it renders it "
                 "(the ScheduledJob carries the labels)")  # fmt: skip


def differences(original: dict[str, Any], rendered: dict[str, Any]) -> list[Difference]:
    """Field by field, the CronJob as it is against the one Sundial renders, both as the
    server stores them (server-side dry run). Each difference Sundial makes on purpose
    says why; the rest have `why` None."""
    found: list[Difference] = []
    _diff("metadata.labels", _metadata(original, "labels"), _metadata(rendered, "labels"),
          found)  # fmt: skip
    _diff("metadata.annotations", _metadata(original, "annotations"),
          _metadata(rendered, "annotations"), found)  # fmt: skip
    _diff("spec", original.get("spec") or {}, rendered.get("spec") or {}, found)
    return [_explained(difference) for difference in found]


_BOOKKEEPING = ("kubectl.kubernetes.io/last-applied-configuration",)


def _metadata(obj: dict[str, Any], key: str) -> dict[str, Any]:
    values = dict((obj.get("metadata") or {}).get(key) or {})
    for name in _BOOKKEEPING:
        values.pop(name, None)
    return values


def _diff(path: str, before: Any, after: Any, found: list[Difference]) -> None:
    if before == after:
        return
    # An object or a list of named items on one side only: its fields, one by one.
    if before is None and isinstance(after, dict | list):
        before = type(after)()
    if after is None and isinstance(before, dict | list):
        after = type(before)()
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after)):
            _diff(f"{path}.{key}", before.get(key), after.get(key), found)
        return
    if isinstance(before, list) and isinstance(after, list) and _named(before + after):
        by_name_before = {item["name"]: item for item in before}
        by_name_after = {item["name"]: item for item in after}
        if [n for n in by_name_before if n in by_name_after] == [
            n for n in by_name_after if n in by_name_before
        ]:
            for name in [*by_name_before, *(n for n in by_name_after if n not in by_name_before)]:
                item_before, item_after = by_name_before.get(name), by_name_after.get(name)
                if item_before is None or item_after is None:  # added or dropped whole
                    found.append(Difference(f"{path}[{name}]", item_before, item_after, None))
                else:
                    _diff(f"{path}[{name}]", item_before, item_after, found)
            return
    found.append(Difference(path, before, after, None))


def _named(items: list[Any]) -> bool:
    return all(isinstance(item, dict) and isinstance(item.get("name"), str) for item in items)


def _explained(difference: Difference) -> Difference:
    path, before, after = difference.path, difference.before, difference.after
    added = before is None
    why: str | None = None
    if path == f"metadata.annotations.{cj.SPEC_HASH_ANNOTATION}":
        why = "Sundial's record of the spec it wrote"
    elif path.startswith("metadata."):
        why = _WHY_LABELS if path.removeprefix("metadata.labels.") in _SUNDIAL_LABELS \
            else _WHY_METADATA  # fmt: skip
    elif added and (
        path.endswith(tuple(f"metadata.labels.{label}" for label in _SUNDIAL_LABELS))
        or (path.endswith("metadata.labels") and set(after) <= _SUNDIAL_LABELS)
    ):
        why = _WHY_LABELS  # fmt: skip
    elif added and (re.search(r"\.env\[(SUNDIAL_JOB_NAME|SUNDIAL_CRONJOB)\]$", path) or (
        path.endswith(".env") and {item.get("name") for item in after} <= _RUN_ENV
    )):  # fmt: skip
        why = _WHY_ENV
    elif path == "spec.timeZone" and added:
        why = ("the CronJob has none (the controller manager's local zone); the ScheduledJob "
               "states it")  # fmt: skip
    elif path == "spec.schedule" and isinstance(before, str) and _ZONE_PREFIX.match(before):
        why = "the zone moved from the schedule to spec.timeZone"
    return Difference(path, before, after, why)


def faithful(found: list[Difference]) -> bool:
    """Every difference is one Sundial makes on purpose."""
    return all(difference.why is not None for difference in found)


# ---- a Helm chart's `Crons:` values (the seed convention) --------------------------------

# Crons.<name>: the keys the seed convention's cronjob template reads, as the ScheduledJob's
# job shorthand and spec fields.
_CRON_VALUES_SPEC = {"Schedule": "schedule", "ConcurrencyPolicy": "concurrencyPolicy",
                     "Suspend": "suspend"}  # fmt: skip
_CRON_VALUES_JOB = {
    "TtlSecondsAfterFinished": "ttlSecondsAfterFinished", "Resources": "resources",
    "NodeSelector": "nodeSelector", "Tolerations": "tolerations", "Parallelism": "parallelism",
}  # fmt: skip
_CRON_VALUES_OTHER = {"Envs", "Image"}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def crons_at(values: dict[str, Any], path: str | None) -> dict[str, Any]:
    """The `Crons:` block: at the dotted `path`, else top-level Crons or cronjobs."""
    if path:
        found: Any = values
        for key in path.split("."):
            if not isinstance(found, dict) or key not in found:
                raise ValueError(f"the values have nothing at {path} (no {key!r})")
            found = found[key]
        if not isinstance(found, dict):
            raise ValueError(f"{path} is not a map of cron jobs")
        return found
    for key in ("Crons", "cronjobs"):
        if isinstance(values.get(key), dict):
            return dict(values[key])
    raise ValueError("the values have no top-level Crons or cronjobs: pass --path, e.g. "
                     "--path Projects.billing.Crons")  # fmt: skip


def scheduledjob_from_cron_values(
    key: str, entry: dict[str, Any], *, namespace: str, image: str | None,
    zone: str | None = None, name_prefix: str = "",
) -> Imported:  # fmt: skip
    """One `Crons.<key>` entry of the seed convention as a ScheduledJob with the `job`
    shorthand (MODE=cron and CRON_JOB become `cronJob`). What the values leave unsaid is
    stated and noted; what the shorthand cannot say is refused."""
    name = f"{name_prefix}{key}"
    problems: list[str] = []
    notes: list[str] = []
    if not isinstance(entry, dict):
        raise NotImportable(name, [f"Crons.{key} is not a map"])
    unknown = sorted(set(entry) - set(_CRON_VALUES_SPEC) - set(_CRON_VALUES_JOB)
                     - _CRON_VALUES_OTHER)  # fmt: skip
    if unknown:
        problems.append(f"Crons.{key} has keys the shorthand has no place for: "
                        f"{', '.join(unknown)} (import the rendered CronJob instead: "
                        "`kubectl sundial import cronjob`)")  # fmt: skip
    if not _DNS_LABEL.match(name) or len(name) > MAX_NAME_LENGTH:
        problems.append(f"{name!r} is not a ScheduledJob name (lowercase letters, digits and "
                        f"'-', at most {MAX_NAME_LENGTH}): rename the key or pass "
                        "--name-prefix")  # fmt: skip
    schedule = entry.get("Schedule")
    if not isinstance(schedule, str) or not schedule.strip():
        problems.append(f"Crons.{key}.Schedule is missing")
        schedule = ""
    schedule, zone_in_schedule = _split_zone(schedule)
    stated_zone = zone_in_schedule or zone or "UTC"
    if zone_in_schedule is None:
        notes.append(f"spec.timeZone: {stated_zone}: the values state no zone, so the CronJob "
                     "ran in the kube-controller-manager's local zone; pass --time-zone if "
                     f"that is not {stated_zone}")  # fmt: skip
    try:
        time_zone(stated_zone)
        if schedule:
            normalize_cron(schedule, "kubernetes")
    except ScheduleError as error:
        problems.append(error.message)
    envs = entry.get("Envs") or {}
    if not isinstance(envs, dict):
        problems.append(f"Crons.{key}.Envs is not a map of names to values")
        envs = {}
    chosen_image = entry.get("Image") or image
    if not chosen_image:
        problems.append("no image: pass --image (the service's image) or set Crons."
                        f"{key}.Image")  # fmt: skip
    if problems:
        raise NotImportable(name, problems)
    job: dict[str, Any] = {"image": chosen_image}
    env = dict(envs)
    if env.get("MODE") == "cron" and "CRON_JOB" in env:
        env.pop("MODE")
        job["cronJob"] = str(env.pop("CRON_JOB"))
    if env:
        # By name, as Helm ranges over a map (the sundial-crons library chart renders the same).
        job["env"] = [{"name": str(n), "value": str(v)} for n, v in sorted(env.items())]
    for source, field in _CRON_VALUES_JOB.items():
        if entry.get(source) is not None:
            job[field] = entry[source]
    if "ttlSecondsAfterFinished" not in job:
        notes.append("job.ttlSecondsAfterFinished: unset, so Sundial's 300 s applies (a "
                     "CronJob's Jobs are kept until the history limit removes them)")  # fmt: skip
    spec: dict[str, Any] = {
        "backend": "kubernetes",
        "schedule": " ".join(schedule.split()),
        "timeZone": stated_zone,
        "concurrencyPolicy": entry.get("ConcurrencyPolicy") or "Allow",
        "suspend": bool(entry.get("Suspend", False)),
        "job": job,
    }
    if not entry.get("ConcurrencyPolicy"):
        notes.append("spec.concurrencyPolicy: Allow, the CronJob's default, as the values "
                     "set none (check the chart's template for a default of its own)")  # fmt: skip
    notes.append("the job shorthand adds the restricted security defaults "
                 "(allowPrivilegeEscalation: false, capabilities: drop ALL, seccomp "
                 "RuntimeDefault) the chart's CronJob may not have")  # fmt: skip
    return Imported(scheduledjob_manifest(name, namespace, spec), tuple(notes), shorthand=True)
