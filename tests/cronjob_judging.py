"""The kubernetes backend's judging of a CronJob's slots, driven by its pure steps
(planning/cronjob_evidence.py, missed.judge_kubernetes) as KubernetesBackend._judge drives
them: from the watch cache, then, when a slot looks missed, once more with what a look
beyond the cache found (`listed_jobs`, the controller's `messages`). For unit tests that
give that look's answer as data."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sundial.api.models import ScheduledJob
from sundial.planning.cronjob_evidence import accounting, beyond_cache, cache_evidence, running
from sundial.planning.missed import Judgement, judge_kubernetes
from sundial.watchcache import WatchCache


def judged(
    cache: WatchCache,
    sj: ScheduledJob,
    live: dict[str, Any] | None,
    now: datetime,
    listed_jobs: list[dict[str, Any]],
    messages: list[str],
) -> Judgement | None:
    """None when no CronJob of this object is in place to judge."""
    found = running(sj, live)
    if live is None or found is None:
        return None
    as_running, table = found
    key = (sj.metadata.namespace, sj.metadata.name)
    accounted = accounting(as_running, live, now)
    evidence = cache_evidence(
        as_running, live, cache.jobs(key), cache.seen_slots(key), cache.watching_since
    )
    judgement = judge_kubernetes(table, as_running.spec, accounted, evidence, now)
    if judgement.needs_confirmation:
        assert judgement.new_runs == [], "a miss by the cache alone"
        evidence = beyond_cache(evidence, live["metadata"]["name"], listed_jobs, messages)
        judgement = judge_kubernetes(table, as_running.spec, accounted, evidence, now)
    return judgement
