"""Issue 25.5 against the real apiserver: deleting a watched namespace takes the operator's
Role there along, and its listings are refused (403) from then on; that failed the whole
re-list, and the start-up listing for good. Here the operator's identity has a Role in one
watched namespace and none in the other, as after such a deletion: the one it may list is
listed still, what the cache holds of the refused one is left as it was, and only all of
them refused is a failed listing. (That a refused namespace is asked once per re-list, not
once per kind: relist.scopes, tests/unit/test_handlers.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from localstack import LocalStack
from localstack.pki import write_kubeconfig
from sundial.kube import ApiException, KubeClient, load_api_client
from sundial.planning.selector import parse_selector
from sundial.relist import relist
from sundial.watchcache import WatchCache
from support import Kubectl, fresh_namespace

pytestmark = pytest.mark.cluster

USER = "sundial-relist-refused"


def role_in(namespace: str) -> list[dict[str, Any]]:
    """What the operator's namespaced Role grants for its listings, bound to USER."""
    rules = [
        {"apiGroups": ["sundial.dev"], "resources": ["scheduledjobs"], "verbs": ["list"]},
        {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": ["list"]},
    ]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "relist", "namespace": namespace}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "relist", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "relist"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]},
    ]  # fmt: skip


def scheduledjob(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "sundial.dev/v1alpha1", "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedule": "0 3 * * *", "job": {"image": "app:1"}}}  # fmt: skip


@pytest.fixture
def refused(kubectl: Kubectl, namespace: str) -> Iterator[str]:
    """A second watched namespace, in which USER has no Role."""
    with fresh_namespace(kubectl, f"{namespace[:50]}-gone") as name:
        yield name


def test_a_namespace_the_apiserver_refuses_does_not_stop_the_listing_of_the_others(
    stack: LocalStack, kubectl: Kubectl, crd_installed: None, namespace: str, refused: str
) -> None:
    kept = namespace
    for document in role_in(kept):
        kubectl.apply(document)
    for where in (kept, refused):
        kubectl.apply(scheduledjob("fresh", where))
    path = stack.state_dir / "faults" / f"{USER}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_kubeconfig(path, stack.pki, stack.apiserver_url, stack.pki.client(USER, USER))
    api_client = load_api_client(str(path))
    kube = KubeClient(api_client)
    cache = WatchCache()
    for name, where, version in (("old", refused, "1"), ("stale", kept, "2")):
        cache.put_scheduledjob(
            {"metadata": {"name": name, "namespace": where, "resourceVersion": version}}
        )
    share = parse_selector("")
    try:
        touched = asyncio.run(relist(kube, cache, [refused, kept], share))
        assert sorted(cache.scheduledjob_keys()) == sorted([(refused, "old"), (kept, "fresh")])
        assert touched == [(kept, "stale")]
        with pytest.raises(ApiException) as refusal:
            asyncio.run(relist(kube, cache, [refused], share))
        assert refusal.value.status == 403
    finally:
        api_client.close()
