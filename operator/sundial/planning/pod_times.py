"""A run's times and summary from its Pods (the kubernetes backend's `_with_pod_times`):
which ended runs take them, whether the Pod watch has shown enough of them or one LIST of
the Job's Pods is needed, and the runs with them. Pure: the cache is asked through the
function passed in, the listing is the caller's.

The Job's own times are the Job controller's, seconds off on a busy node; its Pods' are
the kubelet's. They are read on the one pass that counts each run ended (run_history's
newly_finished), never again: an ended run's record is final.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sundial.planning.runs import ObservedRun
from sundial.planning.summaries import PodsEnded, pod_ended, pods_ended


@dataclass(frozen=True)
class PodTimes:
    """The ended runs' Pods as the watch shows them (`watched`), and the Jobs whose Pods
    it has not all shown yet: one LIST each (`to_list`)."""

    watched: dict[str, PodsEnded]
    to_list: list[str]


def pod_times_needed(
    observed: Iterable[ObservedRun],
    ended: set[str],
    watched: Callable[[str], PodsEnded | None],
) -> PodTimes:
    """For the observed runs of the Jobs in `ended` (first seen ended in this pass): their
    Pods from the watch (`watched(job_name)`: None while it has not shown all of the
    Job's ended Pods), else the Job to list. Each Job once, in the order observed."""
    found: dict[str, PodsEnded] = {}
    to_list: list[str] = []
    for run in observed:
        name = run.job_name
        if name is None or name not in ended or name in found or name in to_list:
            continue
        pods = watched(name)
        if pods is None:
            to_list.append(name)
        else:
            found[name] = pods
    return PodTimes(found, to_list)


def listed_pods_ended(listed: list[dict[str, Any]]) -> PodsEnded | None:
    """A Job's Pods as a LIST returned them, together: those that ended (pods_ended)."""
    return pods_ended([pod for pod in map(pod_ended, listed) if pod is not None])


def with_pod_times(
    observed: list[ObservedRun], pods: Mapping[str, PodsEnded | None]
) -> list[ObservedRun]:
    """The runs, those of the Jobs in `pods` with their Pods' start and finish, and the
    summary the last Pod left as the run's message (the Job controller's reason stays;
    its message stays when no Pod left a summary). A Job with no ended Pod (None) keeps
    its own times."""
    timed: list[ObservedRun] = []
    for run in observed:
        ended = pods.get(run.job_name) if run.job_name is not None else None
        if ended is not None:
            run = replace(run, start_time=ended.start, completion_time=ended.end,
                          message=ended.summary or run.message)  # fmt: skip
        timed.append(run)
    return timed
