"""Which passes share a Temporal lane in the work queue (temporal.backend.temporal_lane)."""

from __future__ import annotations

from typing import Any

from sundial.backends.temporal.backend import TEMPORAL_FINALIZER, temporal_lane


def body(
    spec: dict[str, Any], finalizers: list[str] | None = None, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    metadata = {"name": "nightly", "namespace": "shop", "finalizers": finalizers or []}
    return {"metadata": metadata, "spec": spec, "status": status or {}}


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
    # Leaving a named connection (off temporal the spec cannot name it): the one status
    # says the schedule was made over, whose Temporal the passes still call.
    made = {"backendRef": {"kind": "TemporalSchedule", "connection": {"name": "team"}}}
    leaving_own = temporal_lane(body({"backend": "kubernetes"}, [TEMPORAL_FINALIZER], made),
                                "default")  # fmt: skip
    assert leaving_own == own


def test_an_object_whose_passes_make_no_temporal_call_is_in_no_lane() -> None:
    assert temporal_lane(body({"backend": "kubernetes"}), "default") is None
    assert temporal_lane(None, "default") is None
