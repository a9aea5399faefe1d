"""The install manifests (manifests/, kustomize bases and overlays) against the real
apiserver: every overlay and the connection kustomizations pass `kubectl apply
--dry-run=server -k`; their RBAC has no wildcard and no Secret right outside a namespace;
the namespaced overlay's Roles are in its watched namespaces and nowhere else; the
operator's Pod is admitted under the restricted Pod Security Standard; and the
ValidatingAdmissionPolicy really refuses the operator's ServiceAccount a change of a
ScheduledJob's spec while letting it set its finalizer."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from support import (
    OPERATOR_NAMESPACE,
    OPERATOR_USER,
    REPO,
    SHARD_LABEL,
    Kubectl,
    eventually,
    rendered,
)

pytestmark = pytest.mark.cluster

MANIFESTS = REPO / "manifests"
OVERLAYS = ("cluster-wide", "namespaced", "ha", "local", "sharded")
# Replicas, and anti-affinity, where an overlay runs more than one.
REPLICAS = {"ha": 2, "sharded": 3}
KUSTOMIZATIONS = (
    "base",
    *(f"overlays/{overlay}" for overlay in OVERLAYS),
    "connection",
    "connection/local",
)
# The namespaced overlay's example namespaces (manifests/overlays/namespaced/watched/).
WATCHED = ("team-a", "team-b")
POLICY = "sundial-never-writes-spec"
POLICY_MESSAGE = "Sundial never writes a ScheduledJob's spec"
FINALIZER = "sundial.dev/temporal-schedule"
RBAC_KINDS = ("Role", "ClusterRole")
# What the policy test installs for real: the operator's identity and rights, the policy.
LIVE_KINDS = (
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)

Triple = tuple[str, str, str]


# Sundial's worker's objects (manifests/base/worker.yaml, its RBAC in the overlays).
WORKER = "sundial-worker"


def is_worker(document: dict[str, Any]) -> bool:
    return str(document["metadata"]["name"]).startswith(WORKER)


def overlay(name: str, kubectl: Kubectl) -> list[dict[str, Any]]:
    """The operator's part of an overlay (the worker's: `worker_part`)."""
    return [d for d in rendered(kubectl, MANIFESTS / "overlays" / name) if not is_worker(d)]


def worker_part(name: str, kubectl: Kubectl) -> list[dict[str, Any]]:
    return [d for d in rendered(kubectl, MANIFESTS / "overlays" / name) if is_worker(d)]


def of_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def the(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (document,) = of_kind(documents, kind)
    return document


def triples(role: dict[str, Any]) -> set[Triple]:
    """A Role's or ClusterRole's rules as (apiGroup, resource, verb)."""
    return {
        (group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    }


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def exists(kubectl: Kubectl, document: dict[str, Any]) -> bool:
    meta = document["metadata"]
    args = ["get", document["kind"], meta["name"], "--ignore-not-found", "-o", "name"]
    if meta.get("namespace"):
        args += ["-n", meta["namespace"]]
    return bool(kubectl.run(*args).stdout.strip())


def delete(kubectl: Kubectl, document: dict[str, Any]) -> None:
    meta = document["metadata"]
    args = ["delete", document["kind"], meta["name"], "--ignore-not-found", "--wait=true"]
    if meta.get("namespace"):
        args += ["-n", meta["namespace"]]
    kubectl.run(*args, check=False)


@pytest.fixture(scope="module")
def watched_namespaces(kubectl: Kubectl) -> Iterator[tuple[str, ...]]:
    """The namespaced overlay's namespaces (an install expects them to exist already)."""
    created = [ns for ns in WATCHED if kubectl.get("namespace", ns, "") is None]
    for ns in created:
        kubectl.run("create", "namespace", ns)
    yield WATCHED
    for ns in created:
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)


# ---- every kustomization, as the apiserver judges it -----------------------------------


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_the_apiserver_accepts_every_kustomization_in_a_server_dry_run(
    kubectl: Kubectl, crd_installed: None, watched_namespaces: tuple[str, ...], directory: str
) -> None:
    # The CRDs exist already (crd_installed): a dry run of them is a dry-run patch, and the
    # ClusterTemporalConnection's kind is served.
    result = kubectl.run("apply", "--dry-run=server", "-k", str(MANIFESTS / directory),
                         check=False, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines, "nothing was applied"
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout
    expected = len(rendered(kubectl, MANIFESTS / directory))
    assert len(lines) == expected, result.stdout


# ---- RBAC -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OVERLAYS)
def test_no_rbac_rule_has_a_wildcard_or_a_cluster_wide_secret(kubectl: Kubectl, name: str) -> None:
    documents = overlay(name, kubectl)
    for role in (d for d in documents if d["kind"] in RBAC_KINDS):
        where = f"{role['kind']} {role['metadata']['name']}"
        for rule in role.get("rules") or []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert not any("*" in value for value in rule.get(field) or []), (where, rule)
        secrets = {t for t in triples(role) if t[1] == "secrets"}
        if role["kind"] == "ClusterRole":
            assert not secrets, f"{where} grants Secrets"
        else:
            assert secrets <= {("", "secrets", "get")}, (where, secrets)
    # Secrets in sundial-system (ClusterTemporalConnections'), and the leader's Lease.
    base_role = next(d for d in of_kind(documents, "Role")
                     if d["metadata"]["namespace"] == OPERATOR_NAMESPACE)  # fmt: skip
    # Sharded mode lists its shard Leases and deletes gone replicas' (sharding.py).
    sharded = {("coordination.k8s.io", "leases", verb) for verb in ("list", "delete")}
    assert triples(base_role) == {
        ("", "secrets", "get"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        *(sharded if name == "sharded" else ()),
    }
    # Every binding is to the operator's ServiceAccount and to a role of this install.
    roles = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
             for d in documents if d["kind"] in RBAC_KINDS}  # fmt: skip
    for binding in (d for d in documents if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "sundial", "namespace": OPERATOR_NAMESPACE}
        ]
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        assert (ref["kind"], ref["name"], scope) in roles, binding["metadata"]


def test_the_namespaced_overlay_grants_only_in_the_watched_namespaces(kubectl: Kubectl) -> None:
    documents = overlay("namespaced", kubectl)
    roles = of_kind(documents, "Role")
    watched = [r for r in roles if r["metadata"]["namespace"] != OPERATOR_NAMESPACE]
    assert {r["metadata"]["namespace"] for r in watched} == set(WATCHED)

    # Each watched namespace gets the same Roles and RoleBindings.
    def per_namespace(kind: str, ns: str) -> list[dict[str, Any]]:
        found = [copy.deepcopy(d) for d in of_kind(documents, kind)
                 if d["metadata"]["namespace"] == ns]  # fmt: skip
        for document in found:
            del document["metadata"]["namespace"]
        return sorted(found, key=lambda d: str(d["metadata"]["name"]))

    for kind in ("Role", "RoleBinding"):
        first, *others = (per_namespace(kind, ns) for ns in WATCHED)
        assert first, f"no {kind} in {WATCHED[0]}"
        assert all(other == first for other in others), kind
    # Cluster-wide: reads, of nothing namespaced. The ClusterTemporalConnections and the
    # namespaces' labels (get); kopf lists nothing of its own (scanning is off). And one
    # write: the finalizer must come off a ScheduledJob after its namespace's deletion took
    # the Role there (patch; the admission policy allows the operator nothing else).
    cluster_roles = {r["metadata"]["name"]: triples(r) for r in of_kind(documents, "ClusterRole")}
    assert cluster_roles == {
        "sundial-cluster-reads": {
            ("sundial.dev", "clustertemporalconnections", "get"),
            ("", "namespaces", "get"),
        },
        "sundial-finalizers": {("sundial.dev", "scheduledjobs", "patch")},
    }
    bound = sorted(b["roleRef"]["name"] for b in of_kind(documents, "ClusterRoleBinding"))
    assert bound == sorted(cluster_roles)
    assert env_of(the(documents, "Deployment"))["SUNDIAL_NAMESPACES"] == ",".join(WATCHED)


def test_the_namespaced_rights_are_the_cluster_wide_ones_split_by_scope(kubectl: Kubectl) -> None:
    """The two overlays say the same rights twice: what a watched namespace's Roles and the
    namespaced overlay's ClusterRole grant is what the cluster-wide ClusterRole grants."""
    cluster_wide = triples(the(overlay("cluster-wide", kubectl), "ClusterRole"))
    documents = overlay("namespaced", kubectl)
    in_team_a = set().union(*(triples(r) for r in of_kind(documents, "Role")
                              if r["metadata"]["namespace"] == WATCHED[0]))  # fmt: skip
    split = in_team_a.union(*(triples(r) for r in of_kind(documents, "ClusterRole")))
    # A TemporalConnection's Secrets: granted in the watched namespaces, never cluster-wide.
    assert split - cluster_wide == {("", "secrets", "get")}
    assert cluster_wide - split == set()


# ---- the Deployment ---------------------------------------------------------------------


@pytest.mark.parametrize("name", OVERLAYS)
def test_the_deployment_is_as_the_overlay_says(kubectl: Kubectl, name: str) -> None:
    documents = overlay(name, kubectl)
    namespace = the(documents, "Namespace")
    assert namespace["metadata"]["name"] == OPERATOR_NAMESPACE
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    deployment = the(documents, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == REPLICAS.get(name, 1)
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "sundial"
    assert pod["automountServiceAccountToken"] is True
    assert not pod.get("hostNetwork")
    assert pod["terminationGracePeriodSeconds"] == 30
    (container,) = pod["containers"]
    expected_image = {"local": "localhost/sundial/operator:dev"}
    assert container["image"] == expected_image.get(name, "ghcr.io/sundial-dev/sundial:0.1.0")
    if name == "local":
        assert container["imagePullPolicy"] == "IfNotPresent"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "metrics": 9090, "health": 8080}  # fmt: skip
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = env_of(deployment)
    assert env["SUNDIAL_LEADER_ELECTION"] == ("false" if name == "sharded" else "true")
    assert env.get("SUNDIAL_SHARDS") == ("6" if name == "sharded" else None)
    assert env["SUNDIAL_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SUNDIAL_CLUSTER_RESOURCE_NAMESPACE"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}}  # fmt: skip
    assert env["SUNDIAL_DEFAULT_CONNECTION"] == "default"
    assert ("SUNDIAL_NAMESPACES" in env) == (name == "namespaced")
    anti = (pod.get("affinity") or {}).get("podAntiAffinity")
    if name in REPLICAS:
        assert anti is not None
        (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    else:
        assert anti is None
    service = the(documents, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]  # fmt: skip
    assert the(documents, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "sundial"}},
    }


def test_the_operator_pod_passes_the_restricted_pod_security_standard(
    kubectl: Kubectl, namespace: str
) -> None:
    """Pod Security admission enforces on Pods, and only warns on a Deployment: each
    overlay's Deployment is dry-run into a restricted namespace (no warning), and a Pod of
    its template too (admitted); a Pod that breaks the standard is refused there, so the
    check is live."""
    kubectl.run("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/warn=restricted")  # fmt: skip
    # A Pod's ServiceAccount must exist, even in a dry run.
    kubectl.run("create", "serviceaccount", "sundial", "-n", namespace)
    kubectl.run("create", "serviceaccount", WORKER, "-n", namespace)

    def dry_run(document: dict[str, Any]) -> tuple[int, str]:
        result = kubectl.run("create", "--dry-run=server", "-f", "-",
                             stdin=json.dumps(document), check=False)  # fmt: skip
        return result.returncode, result.stderr

    deployments = [(name, the(part, "Deployment")) for name in OVERLAYS
                   for part in (overlay(name, kubectl), worker_part(name, kubectl))]  # fmt: skip
    for name, deployment in deployments:
        deployment["metadata"]["namespace"] = namespace
        code, stderr = dry_run(deployment)
        assert code == 0, (name, stderr)
        assert "PodSecurity" not in stderr, (name, stderr)
        template = deployment["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {**template["metadata"], "name": "sundial", "namespace": namespace},
               "spec": template["spec"]}  # fmt: skip
        code, stderr = dry_run(pod)
        assert code == 0, (name, stderr)

    del pod["spec"]["securityContext"]["seccompProfile"]
    code, stderr = dry_run(pod)
    assert code != 0
    assert 'violates PodSecurity "restricted' in stderr, stderr


# ---- the admission policy, live -----------------------------------------------------------


@pytest.fixture
def operator_rights(kubectl: Kubectl, crd_installed: None) -> Iterator[None]:
    """The cluster-wide overlay's ServiceAccount, RBAC and admission policy, applied for
    real; what this created is deleted after."""
    documents = [d for d in overlay("cluster-wide", kubectl) if d["kind"] in LIVE_KINDS]
    created = [d for d in documents if not exists(kubectl, d)]
    kubectl.run("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in documents))
    try:
        yield
    finally:
        for document in reversed(created):
            delete(kubectl, document)


def test_the_admission_policy_refuses_the_operator_a_change_of_spec(
    kubectl: Kubectl, namespace: str, operator_rights: None
) -> None:
    sample = yaml.safe_load((MANIFESTS / "samples" / "kubernetes-shorthand.yaml").read_text())
    name = sample["metadata"]["name"]
    sample["metadata"]["namespace"] = namespace
    # A shard no operator serves: nothing else writes this object meanwhile.
    sample["metadata"]["labels"] = {SHARD_LABEL: "install-manifests"}
    kubectl.apply(sample)
    attempts = iter(range(60))

    def as_operator(patch: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        args = ["patch", "scheduledjob", name, "-n", namespace, "--type=merge"]
        return kubectl.run(f"--as={OPERATOR_USER}", *args, "-p", json.dumps(patch), check=False)

    def spec() -> dict[str, Any]:
        spec: dict[str, Any] = (kubectl.get("scheduledjob", name, namespace) or {})["spec"]
        return spec

    def refused() -> str:
        # A new minute each try: a patch that changed nothing would not be a change of spec.
        before = spec()
        result = as_operator({"spec": {"schedule": f"{next(attempts)} 4 * * *"}})
        # The RBAC and the policy reach the apiserver's caches within a moment: until the
        # policy's, the patch may be allowed (or refused by RBAC).
        if POLICY_MESSAGE not in result.stderr:
            return ""
        assert result.returncode != 0
        assert spec() == before
        return str(result.stderr)

    stderr = eventually(refused, what=f"{POLICY} refuses the operator's change of spec")
    assert "Forbidden" in stderr, stderr
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in stderr, stderr

    # The finalizer is the operator's to set and remove (RBAC's patch, the policy allows it).
    result = as_operator({"metadata": {"finalizers": [FINALIZER]}})
    assert result.returncode == 0, result.stderr
    meta = (kubectl.get("scheduledjob", name, namespace) or {})["metadata"]
    assert meta["finalizers"] == [FINALIZER]
    result = as_operator({"metadata": {"finalizers": None}})
    assert result.returncode == 0, result.stderr
    meta = (kubectl.get("scheduledjob", name, namespace) or {})["metadata"]
    assert not meta.get("finalizers")

    # And nothing else of the object (the namespaced overlay grants the patch in every
    # namespace): an annotation is a request (run-now, backfill, adopt, abandon-schedule),
    # a label another operator's share, a finalizer someone else's.
    for patch in (
        {"metadata": {"annotations": {"sundial.dev/run-now": "not-the-operators"}}},
        {"metadata": {"labels": {SHARD_LABEL: "elsewhere"}}},
        {"metadata": {"finalizers": ["example.com/theirs"]}},
        {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                           "name": "x", "uid": "u"}]}},
    ):  # fmt: skip
        result = as_operator(patch)
        assert result.returncode != 0, patch
        assert f"ValidatingAdmissionPolicy '{POLICY}'" in result.stderr, result.stderr
    meta = (kubectl.get("scheduledjob", name, namespace) or {})["metadata"]
    assert "sundial.dev/run-now" not in (meta.get("annotations") or {})
    assert meta["labels"] == {SHARD_LABEL: "install-manifests"}
    assert not meta.get("finalizers")
    assert not meta.get("ownerReferences")
    # Its own finalizer beside someone else's is still the operator's to set and remove.
    kubectl.run("patch", "scheduledjob", name, "-n", namespace, "--type=merge",
                "-p", json.dumps({"metadata": {"finalizers": ["example.com/theirs"]}}))  # fmt: skip
    for finalizers in (["example.com/theirs", FINALIZER], ["example.com/theirs"]):
        result = as_operator({"metadata": {"finalizers": finalizers}})
        assert result.returncode == 0, result.stderr
    kubectl.run("patch", "scheduledjob", name, "-n", namespace, "--type=merge",
                "-p", json.dumps({"metadata": {"finalizers": None}}))  # fmt: skip

    # Its users still change the spec as they like.
    kubectl.run("patch", "scheduledjob", name, "-n", namespace, "--type=merge",
                "-p", json.dumps({"spec": {"suspend": True}}))  # fmt: skip
    assert spec()["suspend"] is True
    kubectl.run("delete", "scheduledjob", name, "-n", namespace, "--wait=true")


# ---- Sundial's worker ---------------------------------------------------------------------

# What the worker's activities call (sundial/worker/activities.py), in a watched namespace
# and cluster-wide.
WORKER_NAMESPACED_RIGHTS = {
    ("sundial.dev", "scheduledjobs", "get"),
    ("sundial.dev", "temporalconnections", "get"),
    ("batch", "jobs", "get"), ("batch", "jobs", "create"), ("batch", "jobs", "delete"),
    ("", "pods", "list"),
}  # fmt: skip
WORKER_CLUSTER_RIGHTS = {
    ("sundial.dev", "clustertemporalconnections", "get"),
    ("", "namespaces", "get"),
}


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_overlay_runs_the_worker_with_rights_as_narrow_as_its_calls(
    kubectl: Kubectl, name: str
) -> None:
    documents = worker_part(name, kubectl)
    deployment = the(documents, "Deployment")
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == WORKER
    (container,) = pod["containers"]
    assert container["args"] == ["worker"]
    assert env_of(deployment)["SUNDIAL_DEFAULT_CONNECTION"] == "default"
    # Its own identity, bound to nothing but its own roles.
    for binding in (d for d in documents if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": WORKER, "namespace": OPERATOR_NAMESPACE}
        ]
        # Its own roles, or a watched namespace's connection Secrets (get, by name).
        assert binding["roleRef"]["name"] in (
            {r["metadata"]["name"] for r in documents if r["kind"] in RBAC_KINDS}
            | {"sundial-connection-secrets"}
        ), binding["metadata"]
    own = next(r for r in of_kind(documents, "Role")
               if r["metadata"]["namespace"] == OPERATOR_NAMESPACE)  # fmt: skip
    assert triples(own) == {("", "secrets", "get")}
    granted = set().union(*(triples(r) for r in of_kind(documents, "ClusterRole")))
    if name == "namespaced":
        for ns in WATCHED:
            (role,) = [r for r in of_kind(documents, "Role") if r["metadata"]["namespace"] == ns]
            assert triples(role) == WORKER_NAMESPACED_RIGHTS, ns
        assert granted == WORKER_CLUSTER_RIGHTS
    else:
        assert granted == WORKER_NAMESPACED_RIGHTS | WORKER_CLUSTER_RIGHTS
