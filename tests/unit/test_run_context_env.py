"""What a run's Pod is told about its run (docs/cron-library.md): the env Sundial puts on
every Job it renders or creates, and the summary the Pod leaves in its termination message,
read back into status.recentRuns[].message. Pure: nothing here talks to a cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_kubernetes_run_times import cache_with_ended_job, ended_pod, judged, judged_once, written
from test_kubernetes_stuck import NOW, job_for, running_cronjob

from sundial.api.models import ScheduledJob
from sundial.planning.cronjob import (
    RUN_ENV_CRONJOB,
    RUN_ENV_JOB_NAME,
    RUN_ENV_REQUEST,
    RUN_ENV_SLOT,
    cronjob_manifest,
    requested_job,
    slot_from_job_name,
)
from sundial.planning.summaries import pod_summary, summary_text
from sundial.watchcache import WatchCache

SLOT = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)
JOB_NAME_FIELD = {
    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels['batch.kubernetes.io/job-name']"}
}


def scheduledjob(job: dict[str, Any]) -> ScheduledJob:
    return ScheduledJob.model_validate(
        {
            "metadata": {"name": "invoices", "namespace": "billing", "uid": "u-1"},
            "spec": {"schedule": "*/5 * * * *", "job": job},
        }
    )


def containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = manifest["spec"]
    template = spec.get("jobTemplate", manifest)
    found: list[dict[str, Any]] = template["spec"]["template"]["spec"]["containers"]
    return found


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


# ---- the CronJob's own Jobs: the Job's name, through the downward API -------------------------


def test_a_shorthand_cronjobs_pods_get_their_jobs_name_and_the_cronjobs() -> None:
    manifest = cronjob_manifest(scheduledjob({"image": "app:1", "cronJob": "send"}))
    (container,) = containers(manifest)
    assert container["env"] == [
        {"name": "MODE", "value": "cron"},
        {"name": "CRON_JOB", "value": "send"},
        {"name": RUN_ENV_JOB_NAME, "valueFrom": JOB_NAME_FIELD},
        {"name": RUN_ENV_CRONJOB, "value": "invoices"},
    ]


def test_a_full_templates_containers_each_get_them_and_keep_what_the_user_set() -> None:
    template = {
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "app:1",
                         "env": [{"name": RUN_ENV_JOB_NAME, "value": "mine"}]},
                        {"name": "side", "image": "side:1"},
                    ],
                }
            }
        }
    }  # fmt: skip
    main, side = containers(cronjob_manifest(scheduledjob({"template": template})))
    assert env_of(main) == {RUN_ENV_JOB_NAME: "mine", RUN_ENV_CRONJOB: "invoices"}
    assert env_of(side) == {RUN_ENV_JOB_NAME: JOB_NAME_FIELD, RUN_ENV_CRONJOB: "invoices"}
    assert template["spec"]["template"]["spec"]["containers"][1].get("env") is None  # not mutated


def test_the_job_name_the_pod_reads_gives_the_slot_the_controller_made_it_for() -> None:
    """The controller names a Job `<cronjob>-<minutes since the epoch>`: the name and the
    CronJob's name are all a Pod needs, whatever the schedule's time zone."""
    minutes = int(SLOT.timestamp()) // 60
    assert slot_from_job_name("invoices", f"invoices-{minutes}") == SLOT


# ---- the Jobs Sundial makes itself: the slot and the request, as values -----------------------


def live_cronjob(job: dict[str, Any]) -> dict[str, Any]:
    manifest = cronjob_manifest(scheduledjob(job))
    manifest["metadata"]["uid"] = "cj-uid"
    return manifest


def test_a_run_now_or_backfill_job_says_its_slot_and_its_request() -> None:
    cronjob = live_cronjob({"image": "app:1", "cronJob": "send"})
    job = requested_job(cronjob, "invoices-r123456789", SLOT, "Backfill/june")
    (container,) = containers(job)
    env = env_of(container)
    assert env[RUN_ENV_SLOT] == "2026-12-01T10:05:00Z"
    assert env[RUN_ENV_REQUEST] == "Backfill/june"
    assert env[RUN_ENV_JOB_NAME] == JOB_NAME_FIELD  # still there; the slot wins over it
    # The CronJob's template is not touched: its own Jobs carry no fixed slot.
    (template_container,) = containers(cronjob)
    assert RUN_ENV_SLOT not in env_of(template_container)


def test_a_requested_job_keeps_a_slot_the_user_set_in_the_template() -> None:
    cronjob = live_cronjob(
        {"image": "app:1", "env": [{"name": RUN_ENV_SLOT, "value": "2020-01-01T00:00:00Z"}]}
    )
    (container,) = containers(requested_job(cronjob, "invoices-r1", SLOT, "RunNow/x"))
    env = env_of(container)
    assert env[RUN_ENV_SLOT] == "2020-01-01T00:00:00Z"
    assert env[RUN_ENV_REQUEST] == "RunNow/x"
    assert [item["name"] for item in container["env"]].count(RUN_ENV_SLOT) == 1


# ---- the summary a Pod leaves in its termination message --------------------------------------


def terminated_pod(*messages: str | None) -> dict[str, Any]:
    ended = {"exitCode": 0, "finishedAt": "2026-12-01T10:05:09Z"}
    statuses = [
        {
            "name": f"c{i}",
            "state": {"terminated": ended | ({"message": m} if m is not None else {})},
        }
        for i, m in enumerate(messages)
    ]
    return {"status": {"phase": "Succeeded", "startTime": "2026-12-01T10:05:01Z",
                       "containerStatuses": statuses}}  # fmt: skip


def test_the_librarys_json_summary_reads_as_its_message_and_counts() -> None:
    message = (
        '{"sundial": 1, "result": "succeeded", "message": "sent 1204 invoices", '
        '"counts": {"sent": 1204, "skipped": 3}, "slot": "2026-12-01T10:05:00Z"}'
    )
    assert summary_text(message) == "sent 1204 invoices (sent=1204, skipped=3)"
    assert pod_summary(terminated_pod(None, message)) == summary_text(message)


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("plain words\n", "plain words"),  # any other termination message, as written
        ("", None),
        ("   \n", None),
        ('{"message": ""}', None),
        ('{"counts": {"n": 1}}', "(n=1)"),
        ("[1, 2]", "[1, 2]"),  # JSON, but not the library's: as written
    ],
)
def test_other_termination_messages(raw: str, text: str | None) -> None:
    assert summary_text(raw) == text


def test_a_pod_without_a_termination_message_has_no_summary() -> None:
    assert pod_summary(terminated_pod(None)) is None
    assert pod_summary({"status": {}}) is None


def summarised_pod(
    job: dict[str, Any], name: str, finished: datetime, message: str
) -> dict[str, Any]:
    pod = ended_pod(job, name, finished - timedelta(seconds=1), finished)
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
    return pod


def test_an_ended_runs_message_is_its_pods_summary_from_the_pod_watch() -> None:
    slot = NOW.replace(second=0)
    cache, job = cache_with_ended_job(slot, succeeded=1)
    summary = '{"sundial": 1, "message": "sent 3", "counts": {"sent": 3}}'
    cache.put_pod(summarised_pod(job, "p1", slot + timedelta(seconds=4), summary))
    status, listed = judged_once(cache)
    assert listed == []
    assert status.recent_runs[0].message == "sent 3 (sent=3)"


def test_a_retried_runs_message_is_its_last_pods_summary() -> None:
    slot = NOW.replace(second=0)
    cache, job = cache_with_ended_job(slot, succeeded=1, failed=1)
    cache.put_pod(summarised_pod(job, "p2", slot + timedelta(seconds=9), "second try"))
    cache.put_pod(summarised_pod(job, "p1", slot + timedelta(seconds=4), "first try"))
    assert judged_once(cache)[0].recent_runs[0].message == "second try"


def test_the_summary_comes_from_the_listing_when_the_watch_has_not_shown_the_pods() -> None:
    slot = NOW.replace(second=0)
    cache, job = cache_with_ended_job(slot, succeeded=1)
    name = job["metadata"]["name"]
    pods = [summarised_pod(job, "p1", slot + timedelta(seconds=4), "listed")]
    status, listed = judged_once(cache, {name: pods})
    assert status.recent_runs[0].message == "listed"
    assert listed == [name]


def test_a_summary_is_kept_with_its_pods_times_and_goes_with_its_job() -> None:
    slot = NOW.replace(second=0)
    cache = WatchCache()
    job = job_for(slot)
    job["status"]["succeeded"] = 1
    cache.put_job(job)
    pod = summarised_pod(job, "p1", slot + timedelta(seconds=4), "done")
    cache.put_pod(pod)
    cache.remove_pod(pod)
    name = job["metadata"]["name"]
    ended = cache.pods_ended("shop", name)
    assert ended is not None
    assert ended.summary == "done"
    cache.remove_job(job)
    assert cache.pods_ended("shop", name) is None


def test_a_failed_runs_summary_replaces_the_job_controllers_words_but_not_its_reason() -> None:
    slot = NOW.replace(second=0)
    cache = WatchCache()
    cache.watching_since = NOW - timedelta(days=1)
    cache.put_cronjob(running_cronjob("* * * * *", slot))
    job = job_for(slot)
    ended = job["status"].pop("completionTime")
    said = "Job has reached the specified backoff limit"
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
              "message": said, "lastTransitionTime": ended}  # fmt: skip
    job["status"] |= {"failed": 1, "conditions": [failed]}
    cache.put_job(job)
    summary = '{"sundial": 1, "message": "failed: ValueError: no rows"}'
    cache.put_pod(summarised_pod(job, "p1", slot + timedelta(seconds=4), summary))
    run = judged_once(cache)[0].recent_runs[0]
    assert (run.result, run.reason, run.message) == (
        "Failed", "BackoffLimitExceeded", "failed: ValueError: no rows")  # fmt: skip


def test_judging_again_keeps_the_first_message() -> None:
    """An ended run's record is final: the summary is read on the pass that counts it."""
    slot = NOW.replace(second=0)
    cache, job = cache_with_ended_job(slot, succeeded=1)
    pod = summarised_pod(job, "p1", slot + timedelta(seconds=4), "once")
    cache.put_pod(pod)
    status, _ = judged_once(cache)
    cache.remove_job(job)
    history, listed = judged(cache, status)
    assert listed == []
    assert written(status, history).recent_runs[0].message == "once"
