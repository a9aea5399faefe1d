"""Every Kubernetes API call the operator makes (besides kopf's own watches).

The official client is synchronous; each call runs in a worker thread so the event loop
(kopf's watches, the Temporal client) never blocks. Responses are read as raw JSON, the
same shape kopf and the CRD use, rather than the client's generated classes (every call
reads the raw answer in full, `KubeClient._request`: building those classes costs more
than the request).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from importlib import metadata
from typing import Any, cast

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from sundial.api.models import GROUP, PLURAL, VERSION

FIELD_MANAGER = "sundial"
# What `kubectl sundial` writes as, a person's act: never the operator's field manager.
PLUGIN_FIELD_MANAGER = "kubectl-sundial"
USER_AGENT = f"sundial/{metadata.version('sundial')}"
LIST_PAGE = 500
# A watch's length before the server ends it (and the caller resumes it), as kopf's.
WATCH_SECONDS = 300
# A watch that says nothing for this long is dead (the apiserver sends a bookmark a minute).
WATCH_SILENCE_SECONDS = 90
# (connect, read) seconds for every other call: a LIST page of LIST_PAGE objects takes well
# under a second on a loaded apiserver; a connection that says nothing for 30 s is dead.
REQUEST_TIMEOUT = (10.0, 30.0)
# ApiException.status of a call that got no answer (timed out, connection refused or reset).
NO_ANSWER = 0

__all__ = ["ApiException", "KubeClient", "LeaseClient", "is_invalid", "is_not_found"]


def load_api_client(kubeconfig: str | None = None, replica: str | None = None) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig. Its requests
    say they are Sundial's (User-Agent), and which replica's, so the apiserver's audit
    log and its flow control can tell them from everyone else's."""
    api_client: client.ApiClient | None = None
    if kubeconfig is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            api_client = client.ApiClient()
        except config.ConfigException:
            pass
    if api_client is None:
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
        api_client = client.ApiClient(configuration)
    api_client.user_agent = f"{USER_AGENT} ({replica})" if replica else USER_AGENT
    return api_client


def is_not_found(error: BaseException) -> bool:
    return isinstance(error, ApiException) and error.status == 404


def is_invalid(error: BaseException) -> bool:
    """The apiserver refused the object itself: only a spec change can fix it."""
    return isinstance(error, ApiException) and error.status in (400, 422)


def api_error_message(error: ApiException) -> str:
    try:
        message = json.loads(error.body or "{}").get("message")
    except ValueError:
        message = None
    return str(message or error.reason or error)


def _json(body: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(body)
    return data


class KubeClient:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._api_client = api_client
        self._batch = client.BatchV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    async def _request(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
        """One API call in a worker thread, its answer read there in full, raw. urllib3
        returns a connection to its pool only once the answer is read: an answer left
        unread (a write whose answer is not needed) closed its connection when collected,
        so each Event write cost a new TLS connection (4 % of the operator's CPU at 5,000).

        Every call has a deadline (REQUEST_TIMEOUT): a pooled connection that died silently
        (a NAT entry dropped, a peer frozen) otherwise held the pass, and its object, for
        the kernel's TCP timeout, about 15 minutes. A call that gets no answer, in time or
        at all, raises ApiException with status NO_ANSWER, which every caller already turns
        into a retry (BackendUnavailable), as it does a 503; and the pool's other
        connections, which went the same way, are dropped, so the retry opens a new one
        instead of waiting out each dead one in turn."""

        def call_and_read() -> bytes:
            response = call(
                *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
            )
            return cast(bytes, response.data)

        try:
            return await asyncio.to_thread(call_and_read)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            cause = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) else error
            if isinstance(cause, urllib3.exceptions.TimeoutError):
                self._api_client.rest_client.pool_manager.clear()
            reason = f"no answer from the apiserver: {error}"
            raise ApiException(status=NO_ANSWER, reason=reason) from error

    async def list_all(
        self, kind: str, namespaces: list[str], label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Every object of a kind (scheduledjobs, cronjobs, jobs)."""
        return [item async for page in self.list_pages(kind, namespaces, label_selector)
                for item in page]  # fmt: skip

    async def list_pages(
        self, kind: str, namespaces: list[str], label_selector: str | None = None
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Every object of a kind, a page (LIST_PAGE objects) at a time: a caller that keeps
        only what it needs of each page never holds thousands of full objects at once
        (their managedFields and all: the re-list's whole listing was 70 MiB at 5,000)."""
        calls: dict[str, tuple[Any, Any]] = {
            "scheduledjobs": (
                lambda **kw: self._custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw),
                lambda ns, **kw: self._custom.list_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, **kw
                ),
            ),
            "cronjobs": (
                self._batch.list_cron_job_for_all_namespaces,
                self._batch.list_namespaced_cron_job,
            ),
            "jobs": (self._batch.list_job_for_all_namespaces, self._batch.list_namespaced_job),
        }
        cluster_wide, namespaced = calls[kind]
        scopes: list[Any] = [(cluster_wide, ())] if not namespaces else [
            (namespaced, (ns,)) for ns in namespaces
        ]  # fmt: skip
        for call, args in scopes:
            token: str | None = None
            while True:
                extra: dict[str, Any] = {"limit": LIST_PAGE}
                if label_selector:
                    extra["label_selector"] = label_selector
                if token:
                    extra["_continue"] = token
                page = _json(await self._request(call, *args, **extra))
                token = (page.get("metadata") or {}).get("continue")
                yield page.get("items") or []
                if not token:
                    break

    async def create_cronjob(
        self, manifest: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any] | None:
        """Create a CronJob; None if one of that name is there already, whoever made it
        (a create never writes over anything: the caller reads it and decides). With
        dry_run, the apiserver gives its full verdict (admission included) and stores
        nothing."""
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        response = await self._create(self._batch.create_namespaced_cron_job, manifest, **extra)
        return None if response is None else _json(response)

    async def create_job(self, manifest: dict[str, Any]) -> bool:
        """Create a Job; False if one of that name is there already (made by an earlier
        pass whose answer was lost)."""
        return await self._create(self._batch.create_namespaced_job, manifest) is not None

    async def _create(
        self, call: Callable[..., Any], manifest: dict[str, Any], **extra: Any
    ) -> bytes | None:
        """A create as Sundial's field manager; None when the name is taken (409)."""
        try:
            return await self._request(
                call,
                manifest["metadata"]["namespace"],
                cast(Any, manifest),
                field_manager=FIELD_MANAGER,
                **extra,
            )
        except ApiException as error:
            if error.status == 409:
                return None
            raise

    async def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        response = await self._request(
            self._core.list_namespaced_pod,
            namespace,
            label_selector=label_selector,
        )
        items: list[dict[str, Any]] = _json(response).get("items") or []
        return items

    def _list_pods_call(self, namespace: str | None) -> Any:
        """The Pod listing (and watch) of one namespace, or of all when None."""
        if namespace:
            return partial(self._core.list_namespaced_pod, namespace)
        return self._core.list_pod_for_all_namespaces

    async def list_pod_pages(
        self, namespace: str | None, label_selector: str, field_selector: str
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """The selected Pods a page at a time, each page with the listing's resourceVersion
        (a watch from it misses nothing). namespace None: every namespace."""
        call = self._list_pods_call(namespace)
        token: str | None = None
        version = ""
        while True:
            extra: dict[str, Any] = {"limit": LIST_PAGE, "label_selector": label_selector,
                                     "field_selector": field_selector}  # fmt: skip
            if token:
                extra["_continue"] = token
            page = _json(await self._request(call, **extra))
            meta = page.get("metadata") or {}
            version = version or meta.get("resourceVersion", "")
            token = meta.get("continue")
            yield page.get("items") or [], version
            if not token:
                break

    async def watch_pods(
        self, namespace: str | None, label_selector: str, field_selector: str, version: str
    ) -> AsyncIterator[dict[str, Any]]:
        """The selected Pods' watch events from `version` on, until the server ends the
        watch (after about WATCH_SECONDS). The client blocks while it waits, so the
        answer is read in a thread of its own, not one of the request threads."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        call = self._list_pods_call(namespace)
        responses: list[Any] = []
        stopping = threading.Event()

        def deliver(item: dict[str, Any] | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
                loop.call_soon_threadsafe(events.put_nowait, item)

        def read() -> None:
            silent = False
            try:
                response = call(
                    watch=True, label_selector=label_selector, field_selector=field_selector,
                    resource_version=version, allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_SECONDS, _preload_content=False,
                    _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SILENCE_SECONDS),
                )  # fmt: skip
                responses.append(response)
                for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                    deliver(json.loads(line))
            except urllib3.exceptions.ReadTimeoutError:
                # Silent past the bookmarks' period: the connection is dead. Ended like a
                # watch the server closed, so the caller resumes from the last version.
                silent = True
                deliver(None)
            except BaseException as error:  # handed to the loop, raised there
                deliver(error)
            else:
                deliver(None)
            finally:
                if responses:  # a stream stopped halfway cannot serve another request
                    ended_early = stopping.is_set() or silent
                    (responses[0].close if ended_early else responses[0].release_conn)()

        threading.Thread(target=read, name="sundial-pod-watch", daemon=True).start()
        try:
            while (item := await events.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stopping.set()
            if responses:
                # Cancelled or abandoned: end the thread's read at once. A close from here
                # would wait for that read to return (the apiserver's next bookmark, up to
                # a minute away); shutting the socket down does not.
                with contextlib.suppress(Exception):
                    responses[0].shutdown()

    async def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = await self._request(self._batch.read_namespaced_job, name, namespace)
        except ApiException as error:
            if is_not_found(error):
                return None
            raise
        return _json(response)

    async def delete_job(self, namespace: str, name: str) -> None:
        """Delete a Job and its Pods (background propagation); gone already is done."""
        try:
            await self._request(
                self._batch.delete_namespaced_job, name, namespace,
                propagation_policy="Background",
            )  # fmt: skip
        except ApiException as error:
            if not is_not_found(error):
                raise

    async def set_job_ttl(self, namespace: str, name: str, seconds: int) -> None:
        await self._request(
            self._batch.patch_namespaced_job,
            name,
            namespace,
            {"spec": {"ttlSecondsAfterFinished": seconds}},
        )

    async def read_cronjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = await self._request(self._batch.read_namespaced_cron_job, name, namespace)
        except ApiException as error:
            if is_not_found(error):
                return None
            raise
        return _json(response)

    async def replace_cronjob(
        self, manifest: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Replace a CronJob wholly: what the manifest leaves out is gone, whoever set it
        (a replace, unlike a merge, leaves no field behind). The manifest's
        resourceVersion is the precondition: a CronJob changed since it was read answers
        409, and the pass is tried again on what the watch brings. Field ownership is
        cleared (`managedFields: [{}]`): Sundial writes the whole object, so no manager's
        record of its fields means anything."""
        meta = manifest["metadata"]
        body = {**manifest, "metadata": {**meta, "managedFields": [{}]}}
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        response = await self._request(
            self._batch.replace_namespaced_cron_job,
            meta["name"],
            meta["namespace"],
            cast(Any, body),
            field_manager=FIELD_MANAGER,
            **extra,
        )
        return _json(response)

    async def delete_cronjob(self, namespace: str, name: str, *, propagation: str) -> None:
        try:
            await self._request(
                self._batch.delete_namespaced_cron_job,
                name,
                namespace,
                propagation_policy=propagation,
            )
        except ApiException as error:
            if not is_not_found(error):
                raise

    async def read_scheduledjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.read_sundial_object(PLURAL, name, namespace)

    async def patch_scheduledjob_status(
        self, namespace: str, name: str, status_patch: dict[str, Any]
    ) -> dict[str, Any]:
        """Returns the object as written (its resourceVersion orders the cache after it)."""
        response = await self._request(
            self._custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"status": status_patch},
            _content_type="application/merge-patch+json",
        )
        return _json(response)

    async def patch_scheduledjob_metadata(
        self, namespace: str, name: str, metadata_patch: dict[str, Any]
    ) -> None:
        await self._request(
            self._custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"metadata": metadata_patch},
            _content_type="application/merge-patch+json",
        )

    async def read_sundial_object(
        self, plural: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """A sundial.dev object (a connection) by name; cluster-scoped without namespace."""
        try:
            if namespace is None:
                response = await self._request(
                    self._custom.get_cluster_custom_object, GROUP, VERSION, plural, name,
                )  # fmt: skip
            else:
                response = await self._request(
                    self._custom.get_namespaced_custom_object, GROUP, VERSION, namespace,
                    plural, name,
                )  # fmt: skip
        except ApiException as error:
            if is_not_found(error):
                return None
            raise
        return _json(response)

    async def namespace_labels(self, name: str) -> dict[str, str]:
        response = await self._request(self._core.read_namespace, name)
        labels: dict[str, str] = (_json(response).get("metadata") or {}).get("labels") or {}
        return labels

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        response = await self._request(self._core.read_namespaced_secret, name, namespace)
        data: dict[str, str] = _json(response).get("data") or {}
        return data

    async def cronjob_event_messages(self, namespace: str, cronjob: str) -> list[str]:
        """The messages of the Events the CronJob controller posted about one CronJob."""
        response = await self._request(
            self._core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.kind=CronJob,involvedObject.name={cronjob}",
        )
        return [str(item.get("message") or "") for item in _json(response).get("items") or []]

    async def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        await self._request(self._core.create_namespaced_event, namespace, cast(Any, body))

    async def patch_event(
        self, namespace: str, name: str, count: int, last_timestamp: datetime
    ) -> None:
        await self._request(
            self._core.patch_namespaced_event,
            name,
            namespace,
            {"count": count, "lastTimestamp": last_timestamp.isoformat()},
        )


class LeaseClient:
    """The leader election's Lease, on a connection and a thread of its own: renewals
    never queue behind the reconcile workers' calls, whatever the load."""

    def __init__(self, api_client: client.ApiClient, *, timeout: float) -> None:
        self._api = client.CoordinationV1Api(api_client)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sundial-lease")
        self._timeout = timeout

    async def _call(self, method: Any, *args: Any) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        call = partial(method, *args, _preload_content=False, _request_timeout=self._timeout)
        return _json(await loop.run_in_executor(self._executor, lambda: call().data))

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call(self._api.read_namespaced_lease, name, namespace)
        except ApiException as error:
            if is_not_found(error):
                return None
            raise

    async def create(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return await self._call(self._api.create_namespaced_lease, namespace, body)

    async def replace(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        """Fails with 409 when someone wrote the Lease since it was read: its
        resourceVersion is the lock."""
        meta = lease["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "resourceVersion": meta["resourceVersion"]}, "spec": spec}  # fmt: skip
        return await self._call(
            self._api.replace_namespaced_lease, meta["name"], meta["namespace"], body
        )

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        """Every Lease in the namespace (sharding reads its shard and member Leases in one
        request; they have no labels to select by, being written spec only)."""
        listed = await self._call(self._api.list_namespaced_lease, namespace)
        return list(listed.get("items") or [])

    async def delete(self, lease: dict[str, Any]) -> None:
        """Deletes the Lease as read (its resourceVersion the precondition); a Lease gone
        or changed meanwhile is left alone."""
        meta = lease["metadata"]
        body = {"preconditions": {"resourceVersion": meta["resourceVersion"]}}
        try:
            await self._call(
                self._api.delete_namespaced_lease, meta["name"], meta["namespace"], body
            )
        except ApiException as error:
            if not is_not_found(error) and error.status != 409:
                raise

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
