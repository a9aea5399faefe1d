"""Which watch events are news, and the parts of an object no pass needs. Pure."""

from __future__ import annotations

from typing import Any

# kubectl's client-side apply keeps the whole applied object in this annotation.
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


def without_bookkeeping(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what no pass reads and that is often most of it: managedFields
    and kubectl's last-applied copy (client-go's informers drop managedFields with a
    transform for the same reason). A shallow copy; the object given is left as it is."""
    meta = obj.get("metadata")
    if not meta:
        return obj
    annotations = meta.get("annotations") or {}
    if "managedFields" not in meta and LAST_APPLIED_ANNOTATION not in annotations:
        return obj
    meta = {k: v for k, v in meta.items() if k != "managedFields"}
    if LAST_APPLIED_ANNOTATION in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION}
    return {**obj, "metadata": meta}


def status_of(obj: dict[str, Any] | None) -> Any:
    return (obj or {}).get("status")


def changed_by_someone(previous: dict[str, Any] | None, current: dict[str, Any] | None) -> bool:
    """Whether a ScheduledJob event is news from outside: a new object, a spec change
    (generation), or new annotations (requests, adoption) or deletion, or a finalizer
    taken away (Sundial's, by someone: the pass puts it back); not one of Sundial's own
    status writes coming back, nor the finalizer it added."""
    if previous is None or current is None:
        return previous is not current
    before, after = previous.get("metadata", {}), current.get("metadata", {})
    if set(before.get("finalizers") or ()) - set(after.get("finalizers") or ()):
        return True
    return any(
        before.get(field) != after.get(field)
        for field in ("generation", "annotations", "deletionTimestamp", "labels")
    )
