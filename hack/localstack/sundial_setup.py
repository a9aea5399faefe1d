"""What Sundial needs in a fresh local cluster besides its CRDs: the operator's default
ClusterTemporalConnection, pointing at the stack's Temporal (used by `make run` and tests)."""

from __future__ import annotations

import json

# The operator's cluster resource namespace: where a ClusterTemporalConnection's Secrets are.
CLUSTER_RESOURCE_NAMESPACE = "sundial-system"
DEFAULT_CONNECTION = "default"


def default_connection_manifest(address: str, name: str = DEFAULT_CONNECTION) -> str:
    """The namespace for cluster connections' Secrets, and a ClusterTemporalConnection
    every namespace may use (namespaceSelector {}), without TLS, to `address`."""
    documents = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CLUSTER_RESOURCE_NAMESPACE}},
        {
            "apiVersion": "sundial.dev/v1alpha1",
            "kind": "ClusterTemporalConnection",
            "metadata": {"name": name},
            "spec": {"address": address, "namespace": "default", "namespaceSelector": {}},
        },
    ]
    return "\n---\n".join(json.dumps(document) for document in documents)
