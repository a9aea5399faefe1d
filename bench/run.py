"""Sundial against the platform's own floor, on the real local stack (never a timed test).

    make bench                                    # 1,000 ScheduledJobs, 3 minutes steady
    python bench/run.py --sizes 1000,5000,10000 --steady-at 5000 --steady-minutes 10
    python bench/run.py --sizes 10000 --shards 1,2     # one operator, then two sharded replicas

For each size, on a fresh stack, with a realistic mix of schedules (workload.py):
1. apply to Ready: every ScheduledJob Ready with its backend object, against the floor:
   the same N CronJobs created by the same client (kubectl), and the same Temporal
   schedules created directly with the Temporal client; and the operator's requests per
   object meanwhile (the audit log, by verb and resource);
2. one more object with N held: time to Ready, over --samples objects;
at --steady-at, also:
3. steady state: operator CPU, peak RSS, its API requests by kind (the apiserver's audit
   log, by User-Agent), Temporal requests, status writes per slot against the CronJob
   controller's own status writes, event-loop lag; a py-spy profile;
4. detection latency: the controller-manager stopped across two minute slots;
5. an operator restart: time to list and reconcile, and the writes it makes.

With --shards, each size runs once per shard count, each on a fresh stack: 1 is the default
mode (one operator process); n > 1 runs n replicas with SUNDIAL_SHARDS=n, and the figures
that belong to a process (CPU, memory, loop lag) are given per replica as well.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "hack"), str(REPO / "tests"), str(REPO / "bench")]

from observe import (  # noqa: E402
    OPERATOR_AGENTS,
    READS,
    AuditLog,
    Process,
    ScheduledJobWatch,
    controller_status_writes,
    histogram_quantile,
    job_load,
    operator_requests,
    percentile,
    reads,
    wait_for,
    writes,
)
from temporalio.client import (  # noqa: E402
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleSpec,
)
from workload import (  # noqa: E402
    DEFAULT_MIX,
    NO_NODE_CONTAINER,
    Item,
    as_list,
    cronjob,
    node_container,
    scheduledjob,
    workload,
)

from localstack import LocalStack, Ports  # noqa: E402
from localstack.sundial_setup import CLUSTER_RESOURCE_NAMESPACE  # noqa: E402
from sundial.api.models import ScheduledJobSpec  # noqa: E402
from sundial.planning.schedule import timetable  # noqa: E402
from sundial.planning.shards import fair_share  # noqa: E402
from support import (  # noqa: E402
    Kubectl,
    OperatorProcess,
    free_port,
    install_sundial,
    scrape,
    shard_holders,
)

NAMESPACE = "bench"
FLOOR_NAMESPACE = "floor"
# Slots this close to the steady window's end may not have run and ended yet: their
# outcomes are not counted.
SETTLE_MARGIN_S = 120


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


async def temporal_floor(address: str, items: list[Item], *, delete: bool = False) -> float:
    """Create (or delete) the Temporal schedules directly, 20 at a time; seconds taken."""
    temporal = await Client.connect(address)
    gate = asyncio.Semaphore(20)

    async def one(item: Item) -> None:
        async with gate:
            if delete:
                await temporal.get_schedule_handle(f"floor-{item.name}").delete()
                return
            await temporal.create_schedule(
                f"floor-{item.name}",
                Schedule(
                    action=ScheduleActionStartWorkflow(
                        "BenchNoop", id=f"floor-{item.name}", task_queue="bench"
                    ),
                    spec=ScheduleSpec(cron_expressions=[item.schedule],
                                      time_zone_name=item.time_zone),
                ),
            )  # fmt: skip

    began = time.monotonic()
    await asyncio.gather(*(one(item) for item in items))
    return time.monotonic() - began


def slots_in(items: list[Item], start: datetime, end: datetime) -> Counter[str]:
    """Slots in (start, end] by backend, by each item's own timetable."""
    counts: Counter[str] = Counter()
    for item in items:
        spec = ScheduledJobSpec.model_validate(
            scheduledjob(item, NAMESPACE)["spec"]  # type: ignore[arg-type]
        )
        counts[item.backend] += len(timetable(spec).slots_between(start, end, 100_000))
    return counts


def lag_buckets(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> dict[float, float]:
    return {
        float(dict(labels)["le"]): value
        for (name, labels), value in metrics.items()
        if name == "sundial_event_loop_lag_seconds_bucket"
    }


def lag_over(buckets: dict[float, float], bound: float) -> float:
    """Samples above `bound` (a bucket bound) in a cumulative histogram's difference."""
    return buckets.get(float("inf"), 0.0) - buckets.get(bound, 0.0)


def gc_pauses_between(
    before: dict[tuple[str, frozenset[tuple[str, str]]], float],
    after: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> dict[str, dict[str, float]]:
    """Per generation: collections, their total seconds, and how many took over 100 ms."""
    moved: dict[tuple[str, str, str], float] = {}
    for (name, labels), value in after.items():
        if name.startswith("sundial_gc_pause_seconds"):
            label = dict(labels)
            if name.endswith("_bucket") and label["le"] != "0.1":
                continue
            moved[label["generation"], name, ""] = value - before.get((name, labels), 0.0)
    pauses: dict[str, dict[str, float]] = {}
    for generation in sorted({g for g, _, _ in moved}):
        collections = moved.get((generation, "sundial_gc_pause_seconds_count", ""), 0.0)
        pauses[generation] = {
            "collections": collections,
            "seconds": round(moved.get((generation, "sundial_gc_pause_seconds_sum", ""), 0.0), 3),
            "over_100ms":
                collections - moved.get((generation, "sundial_gc_pause_seconds_bucket", ""), 0.0),
        }  # fmt: skip
    return pauses


def node_servers(stack: LocalStack) -> tuple[tuple[str, Any], ...]:
    """The node's own servers, for CPU accounting (none without the node)."""
    if not stack.with_node:
        return ()
    return (("kube-scheduler", stack.scheduler), ("kubelet", stack.node.kubelet),
            ("containerd", stack.node.containerd))  # fmt: skip


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def profile(pid: int, seconds: int, out: Path) -> list[str]:
    """py-spy's leaf frames (self time) over `seconds`: the top entries."""
    subprocess.run(
        [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--gil",
         "--duration", str(seconds), "--format", "raw", "--output", str(out), "--nonblocking"],
        check=True, capture_output=True,
    )  # fmt: skip
    own: Counter[str] = Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        total += int(count)
        own[stack.split(";")[-1]] += int(count)
    return [f"{100 * n / total:5.1f} %  {frame}" for frame, n in own.most_common(12)]


Metrics = dict[tuple[str, frozenset[tuple[str, str]]], float]


def summed(scrapes: list[Metrics]) -> Metrics:
    """The replicas' metrics added up: counters and cumulative histogram buckets add."""
    total: Metrics = {}
    for metrics in scrapes:
        for key, value in metrics.items():
            total[key] = total.get(key, 0.0) + value
    return total


def split_evenly(kubectl: Kubectl, shards: int, replicas: list[str]) -> bool:
    """Every shard held, and no replica above its fair share."""
    held = Counter(shard_holders(kubectl, CLUSTER_RESOURCE_NAMESPACE, shards).values())
    held.pop("", None)
    share = fair_share(shards, len(replicas))
    return sum(held[r] for r in replicas) == shards and all(held[r] <= share for r in replicas)


def run_size(
    args: argparse.Namespace, size: int, steady: bool, shards: int = 1
) -> dict[str, object]:
    mix = tuple((k, float(v)) for k, v in (p.split("=") for p in args.mix.split(",")))
    items = workload(size, mix=mix, temporal_share=args.temporal_share,
                     non_utc_share=args.non_utc_share)  # fmt: skip
    k_items = [i for i in items if i.backend == "kubernetes"]
    t_items = [i for i in items if i.backend == "temporal"]
    result: dict[str, object] = {"size": size, "shards": shards, "kubernetes": len(k_items),
                                 "temporal": len(t_items)}  # fmt: skip
    ports = Ports(etcd=free_port(1), apiserver=free_port(1), kcm=free_port(1),
                  temporal=free_port(4))  # fmt: skip
    state = REPO / ".stack-bench"
    audit_path = state / "audit.log"
    state.mkdir(exist_ok=True)
    audit_path.unlink(missing_ok=True)
    os.environ["SUNDIAL_APISERVER_AUDIT_LOG"] = str(audit_path)
    with LocalStack(state, ports, node=args.node) as stack:
        # With the node, every Job really runs (busybox, a second): real Job and Pod
        # events reach the operator's watches and the controllers.
        container = node_container(stack.images["busybox"]) if args.node else NO_NODE_CONTAINER
        result["node"] = args.node
        kubectl = Kubectl(stack.kubectl, stack.kubeconfig)
        audit = AuditLog(audit_path)
        install_sundial(kubectl, stack.temporal_address)
        kubectl.run("create", "namespace", NAMESPACE)
        kubectl.run("create", "namespace", FLOOR_NAMESPACE)

        # 1. the floor, then cleared away before Sundial starts
        began = time.monotonic()
        floor_docs = as_list([cronjob(i, FLOOR_NAMESPACE, container) for i in k_items])
        kubectl.run("create", "-f", "-", stdin=json.dumps(floor_docs), timeout=None)
        floor_k = time.monotonic() - began
        floor_t = asyncio.run(temporal_floor(stack.temporal_address, t_items)) if t_items else 0.0
        # What the apiserver alone takes to store the ScheduledJobs (a CRD, CEL rules).
        began = time.monotonic()
        crd_docs = as_list([scheduledjob(i, FLOOR_NAMESPACE, container) for i in items])
        kubectl.run("create", "-f", "-", stdin=json.dumps(crd_docs), timeout=None)
        floor_crd = time.monotonic() - began
        result["floor_scheduledjobs_s"] = floor_crd
        # One DELETE of each collection (kubectl delete --all sends one per object).
        for path in (f"/apis/sundial.dev/v1alpha1/namespaces/{FLOOR_NAMESPACE}/scheduledjobs",
                     f"/apis/batch/v1/namespaces/{FLOOR_NAMESPACE}/cronjobs"):  # fmt: skip
            kubectl.run("delete", "--raw", path, timeout=None)
        if t_items:
            asyncio.run(temporal_floor(stack.temporal_address, t_items, delete=True))
        log(
            f"floor: {len(k_items)} CronJobs {floor_k:.1f} s, "
            f"{len(t_items)} schedules {floor_t:.1f} s"
        )

        # One operator, or one replica per shard (SUNDIAL_SHARDS), each its own process.
        replicas = [f"bench-{i}" for i in range(shards)] if shards > 1 else ["bench"]
        operators = []
        for replica in replicas:
            env = {
                **stack.env(),
                "SUNDIAL_CLUSTER_RESOURCE_NAMESPACE": CLUSTER_RESOURCE_NAMESPACE,
                "SUNDIAL_METRICS_PORT": str(free_port()),
                "SUNDIAL_HEALTH_PORT": str(free_port()),
                "SUNDIAL_LOG_LEVEL": "WARNING",
            }
            if shards > 1:
                env |= {"SUNDIAL_SHARDS": str(shards), "SUNDIAL_POD_NAME": replica}
            operators.append(OperatorProcess(env, stack.log_dir / f"operator-{replica}.log"))
        for operator in operators:
            operator.start()
        for operator in operators:
            wait_for("operator metrics", lambda o=operator: _answers(o.metrics_url), 120)
        if shards > 1:
            waited = wait_for("the shards split between the replicas",
                              lambda: split_evenly(kubectl, shards, replicas), 120)  # fmt: skip
            log(f"{shards} shards split between {len(replicas)} replicas in {waited:.1f} s")
        watch = ScheduledJobWatch(stack.kubeconfig, NAMESPACE)

        # Who is busy during the apply: the apiserver stores the ScheduledJobs and serves
        # the operator's requests, on the same two cores as everything else.
        processes = {
            ("operator" if shards == 1 else f"operator {replica}"): Process(operator.proc.pid)
            for replica, operator in zip(replicas, operators, strict=True)
            if operator.proc is not None
        }
        busy = {name: Process(server.proc.pid) for name, server in (
            ("kube-apiserver", stack.apiserver), ("etcd", stack.etcd),
            ("temporal", stack.temporal), ("kube-controller-manager", stack.kcm),
            *node_servers(stack),
        ) if server.proc is not None} | processes  # fmt: skip
        busy_before = {name: process.cpu_seconds() for name, process in busy.items()}
        audit.mark()
        began, began_wall = time.monotonic(), time.time()
        docs = as_list([scheduledjob(i, NAMESPACE, container) for i in items])
        kubectl.run("create", "-f", "-", stdin=json.dumps(docs), timeout=None)
        created = time.monotonic() - began
        wait_for("all Ready", lambda: watch.ready() >= size, 3600, every=0.5)
        apply_to_ready = time.monotonic() - began
        # What the operator asked of the apiserver to bring them Ready, per object, by
        # verb and resource (its audit log): the requests issue 32 counts.
        apply_counts = operator_requests(audit.since_mark())
        result["apply_requests_per_object"] = {
            request: round(count / size, 2) for request, count in apply_counts.most_common()
            if not request.startswith(("watch ", "list "))
        }  # fmt: skip
        result["cpu_share_of_core_during_apply"] = {
            name: round((process.cpu_seconds() - busy_before[name]) / apply_to_ready, 3)
            for name, process in busy.items()
        }
        floor = floor_k + floor_t
        # Each backend's last Ready, against its own floor: the temporal side is paced by
        # the operator's Temporal request budget, which the floor's direct creates are not.
        for backend, own_floor in (("kubernetes", floor_k), ("temporal", floor_t)):
            last = max((watch.ready_at(i.name) or began_wall for i in items
                        if i.backend == backend), default=began_wall)  # fmt: skip
            result[f"apply_to_ready_{backend}_s"] = last - began_wall
            result[f"ratio_{backend}"] = (last - began_wall) / own_floor if own_floor else None
        result |= {"floor_s": floor, "floor_cronjobs_s": floor_k, "floor_schedules_s": floor_t,
                   "create_scheduledjobs_s": created, "apply_to_ready_s": apply_to_ready,
                   "ratio": apply_to_ready / floor}  # fmt: skip
        log(f"apply to Ready {apply_to_ready:.1f} s (create {created:.1f} s), "
            f"floor {floor:.1f} s: ratio {apply_to_ready / floor:.2f}")  # fmt: skip

        # 2. one more object, N held
        extra = workload(args.samples, mix=mix, temporal_share=args.temporal_share,
                         non_utc_share=args.non_utc_share, prefix="one")  # fmt: skip
        latencies = []
        by_backend: dict[str, list[float]] = {}
        samples: list[tuple[float, str, str, str]] = []  # seconds, name, backend, created
        for item in extra:
            began_at = time.time()
            watch.custom.create_namespaced_custom_object(
                "sundial.dev",
                "v1alpha1",
                NAMESPACE,
                "scheduledjobs",
                scheduledjob(item, NAMESPACE, container),
            )
            wait_for(f"{item.name} Ready", lambda n=item.name: watch.ready_at(n), 120, every=0.02)
            latencies.append(watch.ready_at(item.name) - began_at)  # type: ignore[operator]
            by_backend.setdefault(item.backend, []).append(latencies[-1])
            created = datetime.fromtimestamp(began_at, UTC)
            samples.append((latencies[-1], item.name, item.backend, f"{created:%H:%M:%S}"))
        result |= {"one_more_p50_s": percentile(latencies, 0.5),
                   "one_more_p99_s": percentile(latencies, 0.99),
                   # The slowest, with when each was created: to find them in the logs.
                   "one_more_slowest": sorted(samples, reverse=True)[:5]}  # fmt: skip
        for backend, times in by_backend.items():
            result[f"one_more_{backend}_p50_s"] = percentile(times, 0.5)
            result[f"one_more_{backend}_max_s"] = max(times)
        log(
            f"one more: p50 {percentile(latencies, 0.5):.2f} s, "
            f"p99 {percentile(latencies, 0.99):.2f} s"
        )
        everything = items + extra
        result["rss_converged_mib_per_replica"] = {
            name: process.memory_mib() for name, process in processes.items()
        }
        if not steady:
            for operator in operators:
                operator.stop()
            return result

        # 3. steady state, after the apply's aftermath: every minute and five-minute object
        # makes its first run (a Job created, then its status: two writes) in the first
        # minutes after the apply, which is not the steady state the targets are about.
        log(f"settling for {args.settle_minutes} minutes")
        time.sleep(args.settle_minutes * 60)
        window = args.steady_minutes * 60
        audit.mark()
        start = datetime.now(UTC)
        cpu = {name: process.cpu_seconds() for name, process in processes.items()}
        # The platform's own cost over the same window: the floor Sundial is compared with
        # (the CronJob controller runs in the controller-manager).
        servers = {name: Process(server.proc.pid) for name, server in (
            ("kube-controller-manager", stack.kcm), ("kube-apiserver", stack.apiserver),
            ("etcd", stack.etcd), ("temporal", stack.temporal), *node_servers(stack),
        ) if server.proc is not None}  # fmt: skip
        servers_cpu = {name: server.cpu_seconds() for name, server in servers.items()}
        befores = [scrape(operator.metrics_url) for operator in operators]
        before = summed(befores)
        # The first replica's profile: the replicas run the same code on like shares.
        first = operators[0].proc
        top = (
            profile(first.pid, min(args.profile_seconds, window), stack.log_dir / "profile.raw")
            if args.profile_seconds and first is not None
            else []
        )
        time.sleep(max(0.0, window - (datetime.now(UTC) - start).total_seconds()))
        end = datetime.now(UTC)
        seconds = (end - start).total_seconds()
        cpu_per_replica = {name: (process.cpu_seconds() - cpu[name]) / seconds
                           for name, process in processes.items()}  # fmt: skip
        platform_cpu = {name: (server.cpu_seconds() - servers_cpu[name]) / seconds
                        for name, server in servers.items()}  # fmt: skip
        afters = [scrape(operator.metrics_url) for operator in operators]
        after = summed(afters)
        events = audit.since_mark()
        counts = operator_requests(events)
        status_writes = counts.get("patch scheduledjobs/status", 0)
        slots = slots_in(everything, start, end)
        lag_before, lag_after = lag_buckets(before), lag_buckets(after)
        lag = {le: lag_after[le] - lag_before.get(le, 0.0) for le in lag_after}
        lag_p99_per_replica = {}
        for name, one_before, one_after in zip(processes, befores, afters, strict=True):
            own_before, own_after = lag_buckets(one_before), lag_buckets(one_after)
            lag_p99_per_replica[name] = histogram_quantile(
                {le: own_after[le] - own_before.get(le, 0.0) for le in own_after}, 0.99
            )
        gc_pauses = gc_pauses_between(before, after)
        temporal_by_operation = {
            dict(labels)["operation"]: round((value - before.get((name, labels), 0.0)) / seconds, 2)
            for (name, labels), value in after.items()
            if name == "sundial_temporal_requests_total"
        }
        temporal_rate = sum(temporal_by_operation.values())
        result |= {
            "steady_s": seconds,
            "cpu_share_of_core": sum(cpu_per_replica.values()),
            "cpu_share_of_core_per_replica": cpu_per_replica,
            "platform_cpu_share_of_core": platform_cpu,
            "rss_peak_mib": max(p.memory_mib("VmHWM") for p in processes.values()),
            "rss_peak_mib_per_replica":
                {name: p.memory_mib("VmHWM") for name, p in processes.items()},
            "rss_mib_per_replica": {name: p.memory_mib() for name, p in processes.items()},
            "reads_per_s": reads(counts) / seconds,
            "writes": dict(writes(counts)),
            "writes_per_s": sum(writes(counts).values()) / seconds,
            "temporal_requests_per_s": temporal_rate,
            "temporal_requests_per_s_by_operation": temporal_by_operation,
            "slots": dict(slots),
            "status_writes": status_writes,
            "status_writes_per_slot": status_writes / max(1, sum(slots.values())),
            "status_writes_per_replica": {
                replica: sum(1 for e in events
                             if e.get("userAgent", "").endswith(f"({replica})")
                             and e["verb"] == "patch"
                             and e["objectRef"].get("subresource") == "status")
                for replica in replicas if shards > 1
            },
            "controller_cronjob_status_writes": controller_status_writes(events),
            "controller_writes_per_kubernetes_slot":
                controller_status_writes(events) / max(1, slots["kubernetes"]),
            "job_load": dict(job_load(events)),
            "kubernetes_slot_outcomes": dict(watch.outcomes(
                [i.name for i in everything if i.backend == "kubernetes"],
                iso(start), iso(end - timedelta(seconds=SETTLE_MARGIN_S)),
            )),
            "loop_lag_p99_s": histogram_quantile(lag, 0.99),
            "loop_lag_p99_s_per_replica": lag_p99_per_replica,
            "loop_lag_samples_over_100ms": lag_over(lag, 0.1),
            "gc_pauses": gc_pauses,
            "profile_top": top,
        }  # fmt: skip
        log(json.dumps({k: v for k, v in result.items() if k != "profile_top"}, default=str))

        if args.skip_detection_and_restart:
            for operator in operators:
                operator.stop()
            return result

        # 4. detection latency: the controller down across two minute slots
        minute_objects = [
            i.name for i in everything if i.backend == "kubernetes" and i.kind == "minute"
        ]
        now = datetime.now(UTC)
        first = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        if (first - now).total_seconds() < 20:
            first += timedelta(minutes=1)
        time.sleep(max(0.0, (first - timedelta(seconds=15) - datetime.now(UTC)).total_seconds()))
        stack.stop_controller_manager()
        second = first + timedelta(minutes=1)
        time.sleep(max(0.0, (second - datetime.now(UTC)).total_seconds()) + 5)
        stack.start_controller_manager()
        slot = first.isoformat().replace("+00:00", "Z")
        wait_for(
            "every minute object showing the slot",
            lambda: watch.showing(minute_objects, slot) >= len(minute_objects),
            900,
        )
        detection = (datetime.now(UTC) - second).total_seconds()
        result["detection_latency_s"] = detection
        result["detection_objects"] = len(minute_objects)
        log(
            f"detection: the last of {len(minute_objects)} showed {slot} "
            f"{detection:.1f} s after it was certain"
        )

        # 5. restart
        audit.mark()
        for operator in operators:  # every replica down, then every one up
            operator.stop()
        for operator in operators:
            operator.start()
        began = time.monotonic()
        after_restart = Item("after-restart", "daily", "kubernetes", "0 3 * * *", "UTC")
        watch.custom.create_namespaced_custom_object(
            "sundial.dev",
            "v1alpha1",
            NAMESPACE,
            "scheduledjobs",
            scheduledjob(after_restart, NAMESPACE, container),
        )
        wait_for("restart caught up", lambda: watch.ready_at("after-restart"), 1800, every=0.2)
        restart_s = time.monotonic() - began
        restart_end = datetime.now(UTC)
        events = audit.since_mark()
        restart_writes = writes(operator_requests(events))
        restart_began = restart_end - timedelta(seconds=restart_s)
        # Writes to objects with no slot since shortly before the restart are churn: the
        # others record a run the stopped operator had not yet seen settle.
        recent = {i.name for i in everything
                  if slots_in([i], restart_began - timedelta(seconds=90), restart_end)}  # fmt: skip
        churn = sorted({
            e["objectRef"]["name"] for e in events
            if e.get("userAgent", "").startswith(OPERATOR_AGENTS)
            and e["verb"] not in READS
            and e["objectRef"].get("resource") in ("scheduledjobs", "cronjobs")
            and e["objectRef"].get("name") not in recent | {"after-restart"}
        })  # fmt: skip
        result |= {
            "restart_s": restart_s,
            "restart_writes": dict(restart_writes),
            "restart_slots": dict(slots_in(everything, restart_began, restart_end)),
            "restart_writes_without_a_slot": churn,
        }
        log(f"restart: caught up in {restart_s:.1f} s, writes {dict(restart_writes)}")
        for operator in operators:
            operator.stop()
    return result


def _answers(url: str) -> bool:
    try:
        scrape(url)
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000", help="comma-separated N, e.g. 1000,5000,10000")
    parser.add_argument(
        "--steady-at", type=int, default=None, help="N for steps 3-5 (default: the largest)"
    )
    parser.add_argument("--steady-minutes", type=float, default=10)
    parser.add_argument(
        "--settle-minutes",
        type=float,
        default=5,
        help="wait after the one-more samples before the steady window (first runs)",
    )
    parser.add_argument(
        "--shards",
        default="1",
        help="comma-separated shard counts, each size on a fresh stack per count: 1, one "
        "operator; n > 1, n replicas with SUNDIAL_SHARDS=n",
    )
    parser.add_argument(
        "--skip-detection-and-restart",
        action="store_true",
        help="end each steady size after the steady window (steps 4 and 5 not run)",
    )
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--profile-seconds", type=int, default=60)
    parser.add_argument("--temporal-share", type=float, default=0.2)
    parser.add_argument("--non-utc-share", type=float, default=0.1)
    parser.add_argument(
        "--node",
        action="store_true",
        help="run the stack's real node: each Job a one-second busybox run (docs: bench/README)",
    )
    parser.add_argument("--mix", default=",".join(f"{k}={v}" for k, v in DEFAULT_MIX))
    parser.add_argument("--out", type=Path, default=REPO / ".stack-bench" / "results.json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    steady_at = args.steady_at or max(sizes)
    results = []
    shard_counts = [int(s) for s in args.shards.split(",")]
    for size in sizes:
        for shards in shard_counts:
            log(f"--- N = {size}, {shards} shard(s)")
            results.append(run_size(args, size, steady=size == steady_at, shards=shards))
            args.out.parent.mkdir(exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
