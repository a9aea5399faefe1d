"""The dashboard's ScheduledJobs: listed and watched with the user's own kubeconfig, so the
page shows exactly what `kubectl get scheduledjobs` would show that user.

One watch of every namespace when the user may list ScheduledJobs cluster-wide; otherwise
one per namespace the user may list (the namespaces come from a namespace listing, if that
is allowed, else the kubeconfig context's namespace): a namespace the API server refuses is
left out, not reported as an error. A cluster without the CRD, a user with no rights
anywhere, an API server that does not answer: each is a problem the page shows.

The kubernetes client is synchronous: each watch runs in a thread and hands its changes to
the Store on the event loop (`post`); the rows are computed in the thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from sundial.api.models import GROUP, PLURAL, VERSION
from sundial.dashboard import model
from sundial.dashboard.store import Row, Store

log = logging.getLogger(__name__)
Post = Callable[..., None]  # runs a Store method on the event loop: post(store.put, row, obj)
PAGE = 500
WATCH_SECONDS = 300
RETRY_SECONDS = 5.0
REDISCOVER_SECONDS = 60.0
CRD = f"{PLURAL}.{GROUP}"


class Source:
    """Finds what the user may read and keeps the Store in step with it."""

    def __init__(
        self,
        store: Store,
        post: Post,
        *,
        namespace: str | None,
        context_namespace: str,
        api_client: Callable[[], client.ApiClient] = client.ApiClient,
    ) -> None:
        self.store = store
        self.post = post
        self.namespace = namespace  # -n: that namespace only
        self.context_namespace = context_namespace
        self.api_client = api_client
        self.stopped = threading.Event()
        self._watching: set[str | None] = set()

    def start(self) -> None:
        threading.Thread(target=self._discover, name="dashboard-discover", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    # ---- which namespaces -------------------------------------------------------------

    def _discover(self) -> None:
        api = client.CustomObjectsApi(self.api_client())
        while not self.stopped.is_set():
            try:
                scopes, note = self._scopes(api)
            except ApiException as error:
                self._refused(error)
                self.stopped.wait(RETRY_SECONDS)
                continue
            except Exception as error:  # urllib3: refused, reset, TLS, DNS
                self.post(self.store.problem, "unreachable", _unreachable(error))
                self.stopped.wait(RETRY_SECONDS)
                continue
            for gone in ("crd", "forbidden", "unreachable"):
                self.post(self.store.problem, gone, None)
            if not scopes:
                self.post(self.store.problem, "forbidden", _forbidden(note))
                self.stopped.wait(REDISCOVER_SECONDS)
                continue
            self.post(self.store.scope, [s for s in scopes if s is not None], scopes == [None],
                      note)  # fmt: skip
            for scope in scopes:
                if scope not in self._watching:
                    self._watching.add(scope)
                    threading.Thread(target=self._watch, args=(scope,), daemon=True,
                                     name=f"dashboard-watch-{scope or 'all'}").start()  # fmt: skip
            if self.namespace is not None or scopes == [None]:
                return
            self.stopped.wait(REDISCOVER_SECONDS)  # namespaces made since

    def _scopes(self, api: client.CustomObjectsApi) -> tuple[list[str | None], str]:
        """[None] (every namespace, one watch), or the namespaces the user may list."""
        if self.namespace is not None:
            self._probe(api, self.namespace)
            return [self.namespace], f"namespace {self.namespace} (-n)"
        try:
            api.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)
            return [None], "every namespace"
        except ApiException as error:
            if error.status != 403:
                raise
        try:
            listed = client.CoreV1Api(api.api_client).list_namespace()
            candidates = sorted(str(ns.metadata.name) for ns in listed.items if ns.metadata)
            asked = "the namespaces you may list"
        except ApiException as error:
            if error.status != 403:
                raise
            candidates = [self.context_namespace]
            asked = f"the kubeconfig context's namespace ({self.context_namespace})"
        readable: list[str | None] = []
        for name in candidates:
            try:
                self._probe(api, name)
            except ApiException as error:
                if error.status != 403:
                    raise
                continue
            readable.append(name)
        return readable, (
            f"listing ScheduledJobs in every namespace was refused; showing those of {asked} "
            f"that you may read: {len(readable)} of {len(candidates)}"
        )

    def _probe(self, api: client.CustomObjectsApi, namespace: str) -> None:
        api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, limit=1)

    def _refused(self, error: ApiException) -> None:
        self.post(self.store.problem, *refusal_problem(error))

    # ---- one watch per scope ----------------------------------------------------------

    def _watch(self, namespace: str | None) -> None:
        api = client.CustomObjectsApi(self.api_client())
        where = f"namespace {namespace}" if namespace else "every namespace"
        problem = f"watch {namespace or '*'}"
        version: str | None = None
        while not self.stopped.is_set():
            try:
                if version is None:
                    version = self._list(api, namespace)
                    self.post(self.store.problem, problem, None)
                for event in self._events(api, namespace, version):
                    kind, obj = event["type"], cast(dict[str, Any], event["object"])
                    if kind == "ERROR":
                        if obj.get("code") == 410:  # expired: list again
                            version = None
                            break
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    version = obj["metadata"]["resourceVersion"]
                    if kind == "DELETED":
                        meta = obj["metadata"]
                        self.post(self.store.remove, f"{meta['namespace']}/{meta['name']}")
                    elif kind in ("ADDED", "MODIFIED"):
                        self.post(self.store.put, *made(obj))
            except ApiException as error:
                if error.status == 410:
                    version = None
                    continue
                if error.status == 404:
                    self._refused(error)
                else:
                    self.post(self.store.problem, problem, f"watching ScheduledJobs in {where} "
                              f"failed: {error.status} {_reason(error)}; retrying")  # fmt: skip
                version = None
                self.stopped.wait(RETRY_SECONDS)
            except Exception as error:
                log.debug("the watch of %s ended: %s", where, error)
                self.post(self.store.problem, problem, f"watching ScheduledJobs in {where}: "
                          f"{_unreachable(error)}")  # fmt: skip
                self.stopped.wait(RETRY_SECONDS)

    def _list(self, api: client.CustomObjectsApi, namespace: str | None) -> str:
        """Every ScheduledJob of the scope, page by page, into the Store at once (what
        went since the last listing goes); the listing's resourceVersion."""
        rows: list[tuple[Row, dict[str, Any]]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": PAGE}
            if token:
                kwargs["_continue"] = token
            if namespace is None:
                page = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)
            else:
                page = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                         **kwargs)  # fmt: skip
            listing = cast(dict[str, Any], page)
            rows.extend(made(obj) for obj in listing.get("items", []))
            token = listing.get("metadata", {}).get("continue")
            if not token:
                self.post(self.store.replace, namespace, rows)
                return str(listing["metadata"]["resourceVersion"])

    def _events(self, api: client.CustomObjectsApi, namespace: str | None, version: str) -> Any:
        call: Callable[..., Any]
        args: tuple[str, ...]
        if namespace is None:
            call, args = api.list_cluster_custom_object, (GROUP, VERSION, PLURAL)
        else:
            call, args = api.list_namespaced_custom_object, (GROUP, VERSION, namespace, PLURAL)
        return watch.Watch().stream(  # type: ignore[no-untyped-call]
            call, *args, resource_version=version, allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS, _request_timeout=WATCH_SECONDS + 30,
        )  # fmt: skip


def made(obj: dict[str, Any]) -> tuple[Row, dict[str, Any]]:
    """The row and what the detail view needs of the object (no managedFields)."""
    meta = obj.get("metadata") or {}
    kept = {
        "metadata": {key: meta[key] for key in ("name", "namespace", "labels",
                                                "resourceVersion", "uid") if key in meta},
        "spec": obj.get("spec") or {},
        "status": obj.get("status") or {},
    }  # fmt: skip
    return model.row(kept), kept


def refusal_problem(error: ApiException) -> tuple[str, str]:
    """What the page says of a refused listing or watch, as (problem, message): no CRD
    (404), no rights (401, 403), or the API server's own words."""
    if error.status == 404:
        return "crd", (
            f"This cluster has no ScheduledJob API: the API server answered 404 for "
            f"{GROUP}/{VERSION} {PLURAL}. Is Sundial installed? The CRD is {CRD} "
            "(kubectl apply --server-side -f crds/). Checking again every few seconds."
        )
    if error.status in (401, 403):
        return "forbidden", _forbidden(_reason(error))
    return "unreachable", f"the API server said {error.status} {error.reason}: {_reason(error)}"


def _forbidden(why: str) -> str:
    return (
        "You may not read ScheduledJobs here: " + why + ". The dashboard uses your own "
        "kubeconfig and rights; ask for get, list and watch on scheduledjobs.sundial.dev "
        "(cluster-wide, or in your namespaces)."
    )


def _unreachable(error: Exception) -> str:
    return f"cannot reach the API server: {type(error).__name__}: {error}"


def _reason(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except ValueError:
        return str(error.reason or error.body)
