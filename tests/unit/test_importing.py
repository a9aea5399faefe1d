"""A CronJob as the ScheduledJob that renders it (planning/importing.py): what is stated,
what is refused, when the shorthand fits, and which differences are Sundial's on purpose.
The server's side (dry runs, the round trip) is tests/integration/test_import_cronjobs.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sundial.planning import importing
from sundial.planning.importing import NotImportable, scheduledjob_from_cronjob


def cronjob(**spec: Any) -> dict[str, Any]:
    """A CronJob as the apiserver returns it (its defaults filled in)."""
    body: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "report", "namespace": "team-a", "uid": "u-1",
                     "labels": {"team": "a", "app.kubernetes.io/managed-by": "Helm"}},
        "spec": {
            "schedule": "*/15 * * * *", "concurrencyPolicy": "Allow", "suspend": False,
            "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure", "dnsPolicy": "ClusterFirst",
                "schedulerName": "default-scheduler", "securityContext": {},
                "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "report", "image": "reports:1.2",
                                "imagePullPolicy": "IfNotPresent",
                                "terminationMessagePath": "/dev/termination-log",
                                "terminationMessagePolicy": "File", "resources": {}}],
            }}}},
        },
    }  # fmt: skip
    body["spec"].update(spec)
    return body


def hardened(env: list[dict[str, Any]], **job: Any) -> dict[str, Any]:
    """A jobTemplate the shorthand renders: one container named job, Never, the restricted
    defaults, a TTL."""
    return {"spec": {"ttlSecondsAfterFinished": 600, **job, "template": {"spec": {
        "restartPolicy": "Never", "dnsPolicy": "ClusterFirst",
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "job", "image": "svc:7", "imagePullPolicy": "IfNotPresent", "env": env,
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}},
        }],
    }}}}  # fmt: skip


def test_every_field_a_default_would_change_is_stated() -> None:
    imported = scheduledjob_from_cronjob(cronjob())
    spec = imported.scheduledjob["spec"]
    # The CronJob's defaults, not Sundial's (Forbid, 1 and 3).
    assert spec["concurrencyPolicy"] == "Allow"
    assert (spec["successfulRunsHistoryLimit"], spec["failedRunsHistoryLimit"]) == (3, 1)
    assert spec["suspend"] is False
    assert spec["timeZone"] == "UTC"
    assert "startingDeadlineSeconds" not in spec
    assert any("controller-manager" in note for note in imported.notes), imported.notes
    metadata = imported.scheduledjob["metadata"]
    assert metadata == {"name": "report", "namespace": "team-a", "labels": {"team": "a"}}


def test_the_zone_given_or_found_is_used() -> None:
    assert scheduledjob_from_cronjob(cronjob(), zone="Europe/Berlin").scheduledjob["spec"][
        "timeZone"] == "Europe/Berlin"  # fmt: skip
    stated = scheduledjob_from_cronjob(cronjob(timeZone="Asia/Tokyo"))
    assert stated.scheduledjob["spec"]["timeZone"] == "Asia/Tokyo"
    assert not stated.notes
    prefixed = scheduledjob_from_cronjob(cronjob(schedule="CRON_TZ=America/New_York 0 9 * * 1-5"))
    assert prefixed.scheduledjob["spec"]["schedule"] == "0 9 * * 1-5"
    assert prefixed.scheduledjob["spec"]["timeZone"] == "America/New_York"


def test_a_template_that_is_not_the_shorthand_is_kept_whole() -> None:
    original = cronjob()
    imported = scheduledjob_from_cronjob(original)
    assert not imported.shorthand
    assert imported.scheduledjob["spec"]["job"] == {
        "template": original["spec"]["jobTemplate"]}  # fmt: skip


def test_the_seed_convention_hardened_is_the_shorthand_with_cron_job() -> None:
    env = [{"name": "LOG", "value": "json"}, {"name": "MODE", "value": "cron"},
           {"name": "CRON_JOB", "value": "nightly-report"}]  # fmt: skip
    imported = scheduledjob_from_cronjob(cronjob(jobTemplate=hardened(env, parallelism=2)))
    assert imported.shorthand
    assert imported.scheduledjob["spec"]["job"] == {
        "image": "svc:7", "cronJob": "nightly-report", "env": [{"name": "LOG", "value": "json"}],
        "parallelism": 2, "ttlSecondsAfterFinished": 600,
    }  # fmt: skip
    # Not asked for: the template, as it is.
    whole = scheduledjob_from_cronjob(cronjob(jobTemplate=hardened(env)), shorthand=False)
    assert not whole.shorthand
    assert "template" in whole.scheduledjob["spec"]["job"]


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t["spec"]["template"]["spec"]["containers"][0].update(name="worker"),
        lambda t: t["spec"]["template"]["spec"].update(restartPolicy="OnFailure"),
        lambda t: t["spec"]["template"]["spec"]["containers"][0].pop("securityContext"),
        lambda t: t["spec"]["template"]["spec"].update(volumes=[{"name": "x", "emptyDir": {}}]),
        lambda t: t["spec"].update(backoffLimit=0),
        lambda t: t["spec"].pop("ttlSecondsAfterFinished"),
        lambda t: t.update(metadata={"annotations": {"owner": "x"}}),
        lambda t: t["spec"]["template"]["spec"]["containers"].append({"name": "b", "image": "b"}),
    ],
    ids=[
        "container-name",
        "on-failure",
        "no-hardening",
        "volumes",
        "backoff-limit",
        "no-ttl",
        "template-annotations",
        "two-containers",
    ],
)
def test_what_the_shorthand_cannot_render_keeps_the_template(change: Any) -> None:
    template = hardened([])
    change(template)
    imported = scheduledjob_from_cronjob(cronjob(jobTemplate=copy.deepcopy(template)))
    assert not imported.shorthand
    assert imported.scheduledjob["spec"]["job"] == {"template": template}


def test_what_a_scheduledjob_cannot_state_is_refused_with_each_reason() -> None:
    with pytest.raises(NotImportable) as refused:
        scheduledjob_from_cronjob(cronjob(schedule="@every 1h", failedJobsHistoryLimit=500))
    reasons = refused.value.reasons
    assert any("unknown macro" in reason for reason in reasons), reasons
    assert any("failedJobsHistoryLimit is 500" in reason for reason in reasons), reasons
    with pytest.raises(NotImportable, match="not an IANA time zone"):
        scheduledjob_from_cronjob(cronjob(timeZone="Mars/Olympus"))


def test_adoption_names_the_cronjob() -> None:
    imported = scheduledjob_from_cronjob(cronjob(), adopt=True)
    assert imported.scheduledjob["metadata"]["annotations"] == {"sundial.dev/adopt": "report"}


def rendered_from(original: dict[str, Any]) -> dict[str, Any]:
    """What a faithful rendering stores: the original plus what Sundial adds on purpose."""
    rendered = copy.deepcopy(original)
    ours = {"app.kubernetes.io/managed-by": "sundial", "sundial.dev/scheduledjob": "report"}
    rendered["metadata"]["labels"] = dict(ours)
    rendered["metadata"]["annotations"] = {"sundial.dev/spec-hash": "abc"}
    rendered["spec"]["timeZone"] = "UTC"
    template = rendered["spec"]["jobTemplate"]
    template["metadata"] = {"labels": dict(ours)}
    template["spec"]["template"]["metadata"] = {"labels": dict(ours)}
    for container in template["spec"]["template"]["spec"]["containers"]:
        container["env"] = [{"name": "SUNDIAL_JOB_NAME", "valueFrom": {}},
                            {"name": "SUNDIAL_CRONJOB", "value": "report"}]  # fmt: skip
    return rendered


def test_what_sundial_adds_is_explained_and_nothing_else_is() -> None:
    original = cronjob()
    rendered = rendered_from(original)
    found = importing.differences(original, rendered)
    assert importing.faithful(found), [d for d in found if d.why is None]
    paths = {d.path for d in found}
    assert "spec.timeZone" in paths
    assert "metadata.labels.app.kubernetes.io/managed-by" in paths  # Helm's, replaced
    assert "metadata.labels.team" in paths  # carried by the ScheduledJob, not the CronJob

    rendered["spec"]["concurrencyPolicy"] = "Forbid"
    rendered["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0][
        "image"] = "reports:1.3"  # fmt: skip
    unexplained = [d for d in importing.differences(original, rendered) if d.why is None]
    assert {d.path for d in unexplained} == {
        "spec.concurrencyPolicy",
        "spec.jobTemplate.spec.template.spec.containers[report].image",
    }


def test_a_name_the_container_sets_itself_is_not_explained_away() -> None:
    original = cronjob()
    original["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "SUNDIAL_CRONJOB", "value": "mine"}]  # fmt: skip
    rendered = copy.deepcopy(original)
    rendered["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "SUNDIAL_CRONJOB", "value": "report"}]  # fmt: skip
    unexplained = [d for d in importing.differences(original, rendered) if d.why is None]
    env = "spec.jobTemplate.spec.template.spec.containers[report].env"
    assert [d.path for d in unexplained] == [f"{env}[SUNDIAL_CRONJOB].value"]


# ---- Crons: values (the seed convention) --------------------------------------------------


def test_a_crons_entry_is_the_shorthand_with_cron_job_and_stated_defaults() -> None:
    entry = {
        "Schedule": "0 2 * * *", "ConcurrencyPolicy": "Forbid", "Suspend": True,
        "Envs": {"MODE": "cron", "CRON_JOB": "invoices", "LOG_LEVEL": "info"},
        "TtlSecondsAfterFinished": 3600, "Resources": {"requests": {"cpu": "100m"}},
        "NodeSelector": {"pool": "batch"}, "Parallelism": 2,
        "Tolerations": [{"key": "batch", "operator": "Exists"}],
    }  # fmt: skip
    imported = importing.scheduledjob_from_cron_values(
        "nightly", entry, namespace="billing", image="billing:4.2", name_prefix="billing-"
    )
    sj = imported.scheduledjob
    assert sj["metadata"] == {"name": "billing-nightly", "namespace": "billing"}
    assert sj["spec"] == {
        "backend": "kubernetes", "schedule": "0 2 * * *", "timeZone": "UTC",
        "concurrencyPolicy": "Forbid", "suspend": True,
        "job": {"image": "billing:4.2", "cronJob": "invoices",
                "env": [{"name": "LOG_LEVEL", "value": "info"}], "ttlSecondsAfterFinished": 3600,
                "resources": {"requests": {"cpu": "100m"}}, "nodeSelector": {"pool": "batch"},
                "tolerations": [{"key": "batch", "operator": "Exists"}], "parallelism": 2},
    }  # fmt: skip
    assert any(note.startswith("spec.timeZone: UTC") for note in imported.notes)
    bare = importing.scheduledjob_from_cron_values(
        "sync", {"Schedule": "*/5 * * * *", "Image": "own:1"}, namespace="n", image="svc:1",
        zone="Europe/Berlin",
    )  # fmt: skip
    assert bare.scheduledjob["spec"]["job"] == {"image": "own:1"}
    assert bare.scheduledjob["spec"]["concurrencyPolicy"] == "Allow"
    assert bare.scheduledjob["spec"]["timeZone"] == "Europe/Berlin"
    assert any("ttlSecondsAfterFinished" in note for note in bare.notes)


def test_a_crons_entry_the_shorthand_cannot_say_is_refused() -> None:
    with pytest.raises(NotImportable) as refused:
        importing.scheduledjob_from_cron_values(
            "Hourly_Sync", {"Schedule": "@every 1h", "Affinity": {}}, namespace="n", image=None
        )
    reasons = " | ".join(refused.value.reasons)
    for part in ("Affinity", "not a ScheduledJob name", "unknown macro", "no image"):
        assert part in reasons, reasons


def test_the_crons_block_is_found_where_the_values_keep_it() -> None:
    values = {"Projects": {"billing": {"Crons": {"a": {}}}}, "cronjobs": {"b": {}}}
    assert importing.crons_at(values, "Projects.billing.Crons") == {"a": {}}
    assert importing.crons_at(values, None) == {"b": {}}
    with pytest.raises(ValueError, match="no 'shop'"):
        importing.crons_at(values, "Projects.shop.Crons")
