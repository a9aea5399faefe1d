"""Which passes share a Temporal lane in the work queue (temporal_backend.temporal_lane)."""

from __future__ import annotations

from typing import Any

from sundial.temporal_backend import TEMPORAL_FINALIZER, temporal_lane


def body(spec: dict[str, Any], finalizers: list[str] | None = None) -> dict[str, Any]:
    metadata = {"name": "nightly", "namespace": "shop", "finalizers": finalizers or []}
    return {"metadata": metadata, "spec": spec}


def test_an_object_on_temporal_or_leaving_it_is_in_its_connections_lane() -> None:
    default = temporal_lane(body({"backend": "temporal"}), "default")
    named = temporal_lane(
        body({"backend": "temporal", "temporalConnectionRef": {
            "kind": "ClusterTemporalConnection", "name": "default"}}), "default",
    )  # fmt: skip
    assert default == named == ("ClusterTemporalConnection", "", "default")
    own = temporal_lane(
        body({"backend": "temporal", "temporalConnectionRef": {"name": "team"}}), "default"
    )
    assert own == ("TemporalConnection", "shop", "team")
    leaving = temporal_lane(body({"backend": "kubernetes"}, [TEMPORAL_FINALIZER]), "default")
    assert leaving == default


def test_an_object_whose_passes_make_no_temporal_call_is_in_no_lane() -> None:
    assert temporal_lane(body({"backend": "kubernetes"}), "default") is None
    assert temporal_lane(None, "default") is None
