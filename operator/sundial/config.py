"""Operator-wide configuration, read once at start-up from SUNDIAL_* environment variables."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field, field_validator, model_validator

from sundial.planning.selector import parse_selector

ENV_PREFIX = "SUNDIAL_"


class OperatorConfig(BaseModel):
    kubeconfig: str | None = Field(
        default=None, description="Path of a kubeconfig; default: in-cluster, then KUBECONFIG."
    )
    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch (comma-separated); empty: all."
    )
    workers: int = Field(
        default=8, ge=1, le=64,
        description="Concurrent reconciles; those waiting on one Temporal connection are "
        "capped at temporal_connections_per_address.",
    )  # fmt: skip
    log_level: str = "INFO"
    health_port: int = Field(
        default=8080, description="/healthz (liveness) and /readyz (readiness); 0: off."
    )
    metrics_port: int = Field(default=9090, ge=0, description="/metrics; 0 turns it off.")
    default_connection: str = Field(
        default="default",
        description="The ClusterTemporalConnection a ScheduledJob without "
        "spec.temporalConnectionRef uses.",
        min_length=1,
    )
    cluster_resource_namespace: str = Field(
        default="sundial-system",
        description="Where the Secrets of ClusterTemporalConnections live (the operator's "
        "own namespace, as cert-manager's cluster resource namespace).",
        min_length=1,
    )
    connection_refresh_seconds: float = Field(
        default=30.0,
        ge=1,
        description="How long a connection and its Secrets are used before they are read "
        "again: a rotated Secret is in use within this time, without a restart.",
    )
    temporal_connections_per_address: int = Field(
        default=2,
        ge=0,
        description="Passes, and calls, in flight over one Temporal connection at once (0: "
        "half the workers); one address takes one call more from all its connections "
        "together. The other workers go on, so one slow or unreachable Temporal never "
        "holds them all. 2: the Temporal dev server stalled (10 s timeouts) under 4 at "
        "once while a thousand schedules were created.",
    )
    schedule_id_prefix: str = Field(
        default="sundial/",
        description="Prefix of every Temporal schedule id; give each cluster its own when "
        "several share one Temporal namespace.",
    )
    temporal_resync_seconds: float = Field(
        default=300.0,
        ge=5,
        description="How often each temporal-backed job is described when nothing else "
        "wakes it: each slot wakes its own when it settles, and the listing of schedules "
        "(temporal_list_seconds) wakes one whose schedule changed.",
    )
    temporal_list_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How often the schedules of each connection in use are listed, to "
        "find those changed in Temporal (a run ended, a pause or edit by hand, a deletion): "
        "one request per thousand schedules; 0 turns the listing off.",
    )
    temporal_requests_per_second: float = Field(
        default=20.0, gt=0, description="Ceiling on the operator's request rate to Temporal."
    )
    label_selector: str = Field(
        default="",
        description="Only ScheduledJobs with these labels (k=v, k!=v, k, !k; comma: and): "
        "several operators split one cluster by it, each with its own selector.",
    )
    leader_election: bool = Field(
        default=False,
        description="Lead through a Lease before reconciling, so only one of several "
        "replicas acts at a time; the Deployment turns it on.",
    )
    leader_election_namespace: str | None = Field(
        default=None,
        description="Where the Lease lives; default: cluster_resource_namespace (the "
        "operator's own namespace).",
    )
    leader_election_lease: str = Field(default="sundial-leader", min_length=1)
    leader_election_kubeconfig: str | None = Field(
        default=None,
        description="Path of a kubeconfig for the Lease client alone; default: kubeconfig. "
        "The Lease then goes by a route of its own (controller-runtime's "
        "LeaderElectionConfig): a dedicated apiserver endpoint, or a test's faulty relay.",
    )
    lease_duration_seconds: int = Field(
        default=15,
        ge=2,
        description="How long a standby waits after the leader's last renewal before it "
        "takes over (client-go's default); the leader gives up after two thirds of it.",
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Sharded mode when above 1: the ScheduledJobs are cut into this many "
        "shards, and each replica serves the shards whose Leases it holds (its fair share "
        "of them); every replica must be given the same count. Replaces leader election.",
    )
    pod_name: str | None = Field(
        default=None,
        description="This replica's name in the Lease (the downward API's metadata.name); "
        "default: the host name and a random suffix.",
    )
    worker_connections: list[str] = Field(
        default_factory=list,
        description="`sundial worker`: the ClusterTemporalConnections whose Sundial task queue "
        "it serves (comma-separated); default: default_connection.",
    )
    shutdown_grace_seconds: float = Field(
        default=20.0,
        ge=0,
        description="On SIGTERM, how long passes already running may take to finish; keep "
        "it under the Pod's terminationGracePeriodSeconds.",
    )

    @field_validator("label_selector")
    @classmethod
    def _selector_parses(cls, value: str) -> str:
        parse_selector(value)  # a bad selector stops the operator at start, saying why
        return value

    @model_validator(mode="after")
    def _one_way_to_share(self) -> OperatorConfig:
        if self.shards > 1 and self.leader_election:
            raise ValueError(
                "SUNDIAL_SHARDS above 1 and SUNDIAL_LEADER_ELECTION=true: sharded mode "
                "replaces leader election (every shard has a Lease of its own); set one"
            )
        return self

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> OperatorConfig:
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, object] = {}
        for name in cls.model_fields:
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is None:
                continue
            if name in ("namespaces", "worker_connections"):
                values[name] = [n.strip() for n in raw.split(",") if n.strip()]
            else:
                values[name] = raw
        return cls.model_validate(values)
