"""The operator's Kubernetes client against the real apiserver: its connections are reused,
its own Pod watch sees what the node ran."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from localstack import LocalStack
from sundial.kube import KubeClient, load_api_client
from sundial.planning.cronjob import SCHEDULEDJOB_LABEL
from sundial.podwatch import PodWatch
from sundial.watchcache import WatchCache
from support import Kubectl, eventually, parse_time

pytestmark = pytest.mark.cluster


def test_writes_whose_answer_is_not_needed_reuse_their_connections(
    stack: LocalStack, namespace: str
) -> None:
    """urllib3 returns a connection to its pool only once the answer is read: Event writes,
    whose answers Sundial does not need, each closed theirs and opened a new TLS
    connection (a handshake per Event, 4 % of the operator's CPU at 5,000 objects)."""
    api_client = load_api_client(str(stack.kubeconfig))
    kube = KubeClient(api_client)

    async def write_events() -> None:
        for index in range(20):
            await kube.create_event(namespace, {
                "metadata": {"name": f"reuse-{index}", "namespace": namespace},
                "involvedObject": {"kind": "ConfigMap", "name": "reuse", "namespace": namespace},
                "reason": "Test", "message": "connection reuse", "type": "Normal",
            })  # fmt: skip
            await kube.patch_event(namespace, f"reuse-{index}", 2, datetime.now(UTC))

    asyncio.run(write_events())
    manager = api_client.rest_client.pool_manager
    pools = [manager.pools[key] for key in manager.pools.keys()]  # noqa: SIM118 - no __iter__
    opened = sum(pool.num_connections for pool in pools)
    api_client.close()
    # Calls run one at a time here: one connection serves them all (a second, should the
    # server close one).
    assert opened <= 2, opened


def test_the_pod_watch_shows_when_the_pods_of_sundials_jobs_ran(
    stack: LocalStack, kubectl: Kubectl, namespace: str
) -> None:
    """podwatch.PodWatch against the real apiserver and node: the ended Pod of a Job that
    carries Sundial's label reaches the cache with the times the Pod itself shows; a Pod
    of another Job (no label) and a Pod still running (the field selector) do not."""
    if not stack.with_node:
        pytest.skip("needs the node (SUNDIAL_NODE=0)")
    busybox = stack.images["busybox"]

    def job(name: str, labels: dict[str, str], script: str) -> dict[str, Any]:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": name, "namespace": namespace, "labels": labels,
            # As the CronJob controller marks its Jobs: the slot it was for.
            "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp":
                            "2026-12-05T10:00:00Z"}},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "job", "image": busybox,
                                "command": ["sh", "-c", script]}]}}},
        }  # fmt: skip

    def succeeded(name: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            found = kubectl.get("job", name, namespace)
            return found if found and found.get("status", {}).get("succeeded") else None

        return eventually(probe, 120, 0.5, f"Job {name} succeeded")

    ours = {SCHEDULEDJOB_LABEL: "watched"}
    cache = WatchCache()
    stopped_in: list[float] = []

    async def watch_while_jobs_run() -> dict[str, Any]:
        kube = KubeClient(load_api_client(str(stack.kubeconfig)))
        watching = asyncio.create_task(PodWatch(kube, cache, [namespace]).run())
        try:
            await asyncio.sleep(1)  # listed (nothing yet): what follows comes by the watch
            jobs = [job("ended", ours, "sleep 1"), job("others", {}, "sleep 1"),
                    job("running", ours, "sleep 600")]  # fmt: skip
            listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs})
            await asyncio.to_thread(kubectl.run, "apply", "-f", "-", stdin=listing)
            ended = await asyncio.to_thread(succeeded, "ended")
            await asyncio.to_thread(succeeded, "others")
            await asyncio.sleep(3)  # the watch's event for "others", were it let through
            return ended
        finally:
            # The operator's stop cancels it: at once, not at the apiserver's next bookmark
            # (a close of the stream waited for the blocked read: about a minute).
            cancelled_at = asyncio.get_running_loop().time()
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            stopped_in.append(asyncio.get_running_loop().time() - cancelled_at)

    ended = asyncio.run(watch_while_jobs_run())
    cache.put_job(ended)
    listed = kubectl.run("get", "pods", "-n", namespace, "-l", "job-name=ended", "-o", "json")
    (pod,) = json.loads(listed.stdout)["items"]
    finished = pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    assert cache.pod_span(namespace, "ended") == (
        parse_time(pod["status"]["startTime"]), parse_time(finished))  # fmt: skip
    assert cache.pod_count() == 1, "only the ended Pod of Sundial's Job"
    assert stopped_in[0] < 5, stopped_in
