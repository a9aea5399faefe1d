"""The connection API (sundial.dev/v1alpha1): how the operator reaches Temporal, decided by
whoever administers Temporal rather than by each ScheduledJob.

Shaped like cert-manager's Issuer/ClusterIssuer and External Secrets' SecretStore/
ClusterSecretStore: a namespaced TemporalConnection serves the ScheduledJobs of its own
namespace, and its Secrets live there too; a cluster-scoped ClusterTemporalConnection says
by a namespace selector which namespaces may use it, and its Secrets live in the
operator's cluster resource namespace (SUNDIAL_CLUSTER_RESOURCE_NAMESPACE). A ScheduledJob
only names one (spec.temporalConnectionRef): it can no longer choose an address, a Temporal
namespace or credentials, so it cannot borrow the operator's, or another team's, rights.

`make crds` generates both CRDs from these models (crdgen.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sundial.api.models import ApiModel, ConnectionRef

__all__ = ["ConnectionRef"]

CONNECTION_KIND = "TemporalConnection"
CONNECTION_PLURAL = "temporalconnections"
CLUSTER_CONNECTION_KIND = "ClusterTemporalConnection"
CLUSTER_CONNECTION_PLURAL = "clustertemporalconnections"

# host:port, a DNS name or an IPv4/IPv6 literal; no scheme (the SDK takes none).
ADDRESS_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$"


class ConnectionSecretRef(ApiModel):
    name: str = Field(
        description="The Secret's name. A TemporalConnection's Secrets are in its own "
        "namespace; a ClusterTemporalConnection's in the operator's cluster resource "
        "namespace.",
        min_length=1,
        max_length=253,
    )
    key: str | None = Field(
        default=None, description="Key within the Secret (apiKeySecretRef: default apiKey)."
    )


class ConnectionTLS(ApiModel):
    """TLS to the Temporal frontend. Present (even empty: system roots, no client
    certificate) turns TLS on; an API key turns it on too."""

    secret_ref: ConnectionSecretRef | None = Field(
        default=None,
        description="Secret with ca.crt (the server's CA, else the system roots) and, for "
        "mutual TLS, tls.crt and tls.key (a kubernetes.io/tls Secret, as cert-manager "
        "writes them).",
    )
    server_name: str | None = Field(
        default=None,
        description="Name the server certificate is checked against (default: the host).",
        max_length=253,
    )


class TemporalConnectionSpec(ApiModel):
    address: str = Field(
        description="host:port of the Temporal frontend.",
        pattern=ADDRESS_PATTERN,
        max_length=300,
    )
    namespace: str = Field(
        default="default",
        description="The Temporal namespace every schedule made over this connection is in.",
        min_length=1,
        max_length=1000,
    )
    tls: ConnectionTLS | None = Field(default=None, description="TLS or mutual TLS.")
    api_key_secret_ref: ConnectionSecretRef | None = Field(
        default=None,
        description="Secret holding an API key, sent as `authorization: Bearer` (implies TLS).",
    )
    allowed_task_queues: list[str] | None = Field(
        default=None,
        description="If set, the only task queues ScheduledJobs may start workflows on over "
        "this connection.",
    )


class LabelSelectorRequirement(ApiModel):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None


class LabelSelector(ApiModel):
    """A Kubernetes label selector (metav1.LabelSelector): {} selects everything."""

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class ClusterTemporalConnectionSpec(TemporalConnectionSpec):
    namespace_selector: LabelSelector = Field(
        description="Which Kubernetes namespaces' ScheduledJobs may use this connection, "
        "by their labels: {} is every namespace; one namespace is "
        "`matchLabels: {kubernetes.io/metadata.name: <name>}`. Required, so that sharing "
        "credentials cluster-wide is a decision, never a default.",
    )
