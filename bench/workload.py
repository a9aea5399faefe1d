"""The bench's ScheduledJobs: a realistic mix of schedules on both backends, and the same
schedules as plain CronJobs and Temporal schedules for the floor."""

from __future__ import annotations

from dataclasses import dataclass

# (kind, share): 20 % every minute, 20 % every 5 minutes, 40 % hourly, 20 % daily.
DEFAULT_MIX = (("minute", 0.2), ("five", 0.2), ("hourly", 0.4), ("daily", 0.2))
ZONES = ("America/New_York", "Europe/Berlin", "Asia/Tokyo")
# Without a node no Pod runs, so any image name will do. With the node (bench/run.py
# --node), each Job is a short busybox run: the image is the node's own busybox.
NO_NODE_CONTAINER: dict[str, object] = {"image": "bench:1"}
NODE_COMMAND = ["sh", "-c", "sleep 1"]


@dataclass(frozen=True)
class Item:
    name: str
    kind: str
    backend: str
    schedule: str
    time_zone: str


def cron_of(kind: str, i: int) -> str:
    return {
        "minute": "* * * * *",
        "five": "*/5 * * * *",
        "hourly": f"{i % 60} * * * *",
        "daily": f"{i % 60} {i % 24} * * *",
    }[kind]


def workload(
    count: int,
    *,
    mix: tuple[tuple[str, float], ...] = DEFAULT_MIX,
    temporal_share: float = 0.2,
    non_utc_share: float = 0.1,
    prefix: str = "sj",
) -> list[Item]:
    """`count` items, the shares spread evenly over the index (no clumps of one kind)."""
    items = []
    bounds = []
    total = 0.0
    for kind, share in mix:
        total += share
        bounds.append((total, kind))
    for i in range(count):
        # Low-discrepancy positions: every prefix of the list has close to the mix.
        position = (i * 0.6180339887) % 1.0
        kind = next((k for bound, k in bounds if position < bound * (1 / total)), mix[-1][0])
        backend = "temporal" if ((i * 0.7548776662) % 1.0) < temporal_share else "kubernetes"
        zone = ZONES[i % len(ZONES)] if ((i * 0.5698402910) % 1.0) < non_utc_share else "UTC"
        items.append(Item(f"{prefix}-{i:05d}", kind, backend, cron_of(kind, i), zone))
    return items


def node_container(busybox: str) -> dict[str, object]:
    return {"image": busybox, "command": NODE_COMMAND}


def scheduledjob(
    item: Item, namespace: str, container: dict[str, object] = NO_NODE_CONTAINER
) -> dict[str, object]:
    spec: dict[str, object] = {"schedule": item.schedule, "timeZone": item.time_zone}
    if item.backend == "temporal":
        spec |= {"backend": "temporal", "workflow": {"type": "BenchNoop", "taskQueue": "bench"}}
    else:
        spec |= {"job": dict(container)}
    return {
        "apiVersion": "sundial.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": item.name, "namespace": namespace},
        "spec": spec,
    }


def cronjob(
    item: Item, namespace: str, container: dict[str, object] = NO_NODE_CONTAINER
) -> dict[str, object]:
    """The floor: the CronJob a user would write by hand for the same schedule."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": item.name, "namespace": namespace},
        "spec": {
            "schedule": item.schedule,
            "timeZone": item.time_zone,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "job", **container}],
            }}}},
        },
    }  # fmt: skip


def as_list(docs: list[dict[str, object]]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "List", "items": docs}
