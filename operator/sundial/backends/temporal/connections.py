"""Resolves a ScheduledJob's connection reference into a Connection: the connection
resource, the namespace-admission check, and the credentials from its Secrets.

What is read is kept per connection (not per ScheduledJob) for `refresh_seconds`, then
read again: a thousand objects on one connection cost one GET of it and its Secrets per
period, and a rotated Secret is in use within one period, without a restart. The last
good resolution is also what a finalizer falls back on when the Secrets are already gone
(a namespace being deleted takes its Secrets with it).
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import ValidationError

from sundial.api import reasons
from sundial.api.connection_models import (
    CLUSTER_CONNECTION_KIND,
    CLUSTER_CONNECTION_PLURAL,
    CONNECTION_PLURAL,
    ClusterTemporalConnectionSpec,
    ConnectionSecretRef,
    TemporalConnectionSpec,
)
from sundial.api.models import ConnectionRef, ScheduledJob
from sundial.backends.temporal.client import Connection
from sundial.config import OperatorConfig
from sundial.errors import Retry, SpecProblem, api_retry
from sundial.kube import ApiException, KubeClient, is_not_found
from sundial.planning.connection_policy import refusal

# A connection or Secret that is missing is looked for again this often.
MISSING_RETRY_SECONDS = 30.0
# An entry no object asked for in this long is dropped: every temporal-backed object's
# pass asks at least every 5 minutes (the resync), a revoked or deleting one every 30 s.
ENTRY_IDLE_SECONDS = 900.0
# Where the key of an apiKeySecretRef is, unless it says.
API_KEY_DEFAULT_KEY = "apiKey"

K = TypeVar("K")


@dataclass(frozen=True)
class Resolved:
    """A connection a ScheduledJob may use, and the reference it came from."""

    ref: ConnectionRef
    connection: Connection


@dataclass
class _Entry:
    read_at: float  # when the resource (and its Secrets) were last read; `used_at` below
    spec: TemporalConnectionSpec
    connection: Connection


def connection_ref(sj: ScheduledJob, default: ConnectionRef) -> ConnectionRef:
    """The connection `sj`'s schedule is made over: the spec's, or the default. Leaving
    Temporal, the one status says it was made over: off backend temporal the spec cannot
    name one (temporalConnectionRef is temporal-only), and the default may not exist."""
    made = sj.status.backend_ref
    if (
        sj.spec.backend != "temporal"
        and made is not None
        and made.kind == "TemporalSchedule"
        and made.connection is not None
    ):
        return made.connection
    return sj.spec.temporal_connection_ref or default


class ConnectionResolver:
    def __init__(
        self,
        kube: KubeClient,
        *,
        default_connection: str,
        cluster_resource_namespace: str,
        refresh_seconds: float,
        on_replaced: Callable[[Connection], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self.default_ref = ConnectionRef(kind=CLUSTER_CONNECTION_KIND, name=default_connection)
        self._secret_namespace = cluster_resource_namespace
        self._refresh = refresh_seconds
        self._on_replaced = on_replaced
        self._clock = clock
        self._entries: dict[tuple[str, str, str], _Entry] = {}
        self._namespace_labels: dict[str, tuple[float, dict[str, str]]] = {}
        # When each entry was last asked for: one no object asks for any more (its
        # namespace deleted, its objects moved) goes after ENTRY_IDLE_SECONDS, and the
        # labels of namespaces after a refresh period (issue 25.13: both were kept for ever).
        self._used_at: dict[tuple[str, str, str], float] = {}
        self._swept_at = clock()

    @classmethod
    def from_config(
        cls,
        kube: KubeClient,
        config: OperatorConfig,
        on_replaced: Callable[[Connection], None] = lambda _: None,
    ) -> ConnectionResolver:
        """The operator's and the worker's resolver, as their settings say."""
        return cls(
            kube,
            default_connection=config.default_connection,
            cluster_resource_namespace=config.cluster_resource_namespace,
            refresh_seconds=config.connection_refresh_seconds,
            on_replaced=on_replaced,
        )

    def held(self) -> int:
        """Entries and namespaces' labels kept."""
        return len(self._entries) + len(self._namespace_labels)

    def sweep(self) -> None:
        """Drop entries no object asked for in ENTRY_IDLE_SECONDS, and labels older than
        a refresh period (a resolve calls it now and then)."""
        now = self._swept_at = self._clock()
        labels_read = {namespace: at for namespace, (at, _) in self._namespace_labels.items()}
        idle, stale = to_forget(self._used_at, labels_read, now, self._refresh)
        for key in idle:
            del self._used_at[key]
            self._entries.pop(key, None)
        for namespace in stale:
            del self._namespace_labels[namespace]

    def ref_of(self, sj: ScheduledJob) -> ConnectionRef:
        return connection_ref(sj, self.default_ref)

    async def resolve(
        self, sj: ScheduledJob, ref: ConnectionRef | None = None, *, deleting: bool = False
    ) -> Resolved:
        """The connection `sj` uses (or `ref`, one it used before), if it may. With
        `deleting`, only to stop what was made over it (the finalizer deleting the
        schedule, or a schedule paused because the connection was taken away): no
        admission is asked, and a connection or Secret that is gone or cannot be read
        meanwhile is answered from the last good read (a namespace being deleted takes
        its Secrets, its TemporalConnections and the operator's Roles there along, in no
        set order, before its ScheduledJobs' finalizers have run)."""
        ref = ref or self.ref_of(sj)
        key = connection_key(ref.kind, ref.name, sj.metadata.namespace)
        if sweep_due(self._swept_at, self._clock(), self._refresh):
            self.sweep()
        self._used_at[key] = self._clock()
        entry = self._entries.get(key)
        if entry is None or read_again(entry.read_at, self._clock(), self._refresh):
            try:
                entry = await self._read(sj.metadata.namespace, ref, key)
            except (SpecProblem, Retry):
                if not (deleting and entry is not None):
                    raise
        if deleting:
            return Resolved(ref, entry.connection)
        labels = None
        if isinstance(entry.spec, ClusterTemporalConnectionSpec):
            labels = await self._labels(sj.metadata.namespace)
        why = refusal(sj, ref, entry.spec, labels)
        if why is not None:
            # Nothing is sent over a connection the object may not use.
            raise SpecProblem(
                reasons.CONNECTION_NOT_ALLOWED, why, retry_after=MISSING_RETRY_SECONDS
            )
        return Resolved(ref, entry.connection)

    async def cluster_connection(self, name: str) -> Connection:
        """A ClusterTemporalConnection by name, read now (for a process that serves it, as
        Sundial's worker does; no object asks, so nothing is admitted here)."""
        return await self.read(ConnectionRef(kind=CLUSTER_CONNECTION_KIND, name=name), "")

    async def read(self, ref: ConnectionRef, namespace: str) -> Connection:
        """A connection read now, with no object to admit: for the worker, and for the
        plugin, which reads it (and its Secrets) with its user's own rights."""
        scope = "" if ref.kind == CLUSTER_CONNECTION_KIND else namespace
        key = connection_key(ref.kind, ref.name, scope)
        return (await self._read(scope, ref, key)).connection

    async def _read(self, namespace: str, ref: ConnectionRef, key: tuple[str, str, str]) -> _Entry:
        cluster = ref.kind == CLUSTER_CONNECTION_KIND
        what = f"{ref.kind} {ref.name}"
        try:
            if cluster:
                body = await self._kube.read_sundial_object(CLUSTER_CONNECTION_PLURAL, ref.name)
            else:
                body = await self._kube.read_sundial_object(CONNECTION_PLURAL, ref.name, namespace)
        except ApiException as error:
            raise api_retry(error, f"reading {what}") from None
        if body is None:
            where = "" if cluster else f" in namespace {namespace}"
            hint = (
                "create it, or set spec.temporalConnectionRef"
                if ref == self.default_ref
                else "create it, or name another in spec.temporalConnectionRef"
            )
            raise SpecProblem(
                reasons.CONNECTION_NOT_FOUND, f"{what} does not exist{where}: {hint}",
                MISSING_RETRY_SECONDS,
            )  # fmt: skip
        model = ClusterTemporalConnectionSpec if cluster else TemporalConnectionSpec
        try:
            spec = model.model_validate(body.get("spec") or {})
        except ValidationError as error:
            raise SpecProblem(
                reasons.INVALID_CONNECTION, f"{what} is not valid: {error.errors()[0]['msg']}",
                MISSING_RETRY_SECONDS,
            ) from None  # fmt: skip
        secrets_namespace = self._secret_namespace if cluster else namespace
        connection = await self._credentials(spec, what, secrets_namespace)
        old = self._entries.get(key)
        if old is not None and old.connection != connection:
            self._on_replaced(old.connection)
        entry = _Entry(self._clock(), spec, connection)
        self._entries[key] = entry
        return entry

    async def _credentials(
        self, spec: TemporalConnectionSpec, what: str, namespace: str
    ) -> Connection:
        cert = key = ca = None
        api_key = None
        if spec.tls is not None and spec.tls.secret_ref is not None:
            data = await self._secret(spec.tls.secret_ref, what, namespace)
            cert, key, ca = (_decoded(data, k) for k in ("tls.crt", "tls.key", "ca.crt"))
            if (cert is None) != (key is None) or (cert is None and ca is None):
                raise SpecProblem(
                    reasons.INVALID_SECRET,
                    f"Secret {spec.tls.secret_ref.name} of {what} needs ca.crt, or tls.crt "
                    "and tls.key (mutual TLS), or all three",
                    MISSING_RETRY_SECONDS,
                )
        if spec.api_key_secret_ref is not None:
            ref = spec.api_key_secret_ref
            name = ref.key or API_KEY_DEFAULT_KEY
            value = _decoded(await self._secret(ref, what, namespace), name)
            if value is None or not value.strip():
                raise SpecProblem(
                    reasons.INVALID_SECRET, f"Secret {ref.name} of {what} has no key {name}",
                    MISSING_RETRY_SECONDS,
                )  # fmt: skip
            api_key = value.decode().strip()
        return Connection(
            address=spec.address,
            namespace=spec.namespace,
            client_cert=cert,
            client_key=key,
            server_ca=ca,
            api_key=api_key,
            tls=spec.tls is not None or api_key is not None,
            server_name=spec.tls.server_name if spec.tls is not None else None,
        )

    async def _secret(self, ref: ConnectionSecretRef, what: str, namespace: str) -> dict[str, str]:
        try:
            data = await self._kube.read_secret(namespace, ref.name)
        except ApiException as error:
            if is_not_found(error):
                raise SpecProblem(
                    reasons.SECRET_NOT_FOUND,
                    f"Secret {ref.name} named by {what} does not exist in namespace {namespace}",
                    MISSING_RETRY_SECONDS,
                ) from None
            raise api_retry(error, f"reading Secret {ref.name} of {what}") from None
        return data

    async def _labels(self, namespace: str) -> dict[str, str]:
        cached = self._namespace_labels.get(namespace)
        if cached is not None and not read_again(cached[0], self._clock(), self._refresh):
            return cached[1]
        try:
            labels = await self._kube.namespace_labels(namespace)
        except ApiException as error:
            raise api_retry(error, f"reading namespace {namespace}") from None
        self._namespace_labels[namespace] = (self._clock(), labels)
        return labels


def read_again(read_at: float, now: float, refresh: float) -> bool:
    """Whether what was read at `read_at` (a connection and its Secrets, a namespace's
    labels) is read again: once a refresh period has passed."""
    return now - read_at >= refresh


def sweep_due(swept_at: float, now: float, refresh: float) -> bool:
    """Whether a resolve at `now` sweeps first: a refresh period (at most
    ENTRY_IDLE_SECONDS) after the last sweep."""
    return now - swept_at >= min(refresh, ENTRY_IDLE_SECONDS)


def to_forget(
    used_at: Mapping[K, float], labels_read_at: Mapping[str, float], now: float, refresh: float
) -> tuple[list[K], list[str]]:
    """What a sweep at `now` drops: the entries no object asked for in ENTRY_IDLE_SECONDS
    (`used_at`: when each was last asked for), and the namespaces' labels read a refresh
    period ago or more (read again when next needed, if ever: a deleted namespace's go)."""
    idle = [key for key, at in used_at.items() if now - at >= ENTRY_IDLE_SECONDS]
    stale = [namespace for namespace, at in labels_read_at.items() if read_again(at, now, refresh)]
    return idle, stale


def connection_key(kind: str, name: str, namespace: str) -> tuple[str, str, str]:
    """Which connection resource a reference from an object in `namespace` names: a
    TemporalConnection is its namespace's, a ClusterTemporalConnection no namespace's."""
    return (kind, "" if kind == CLUSTER_CONNECTION_KIND else namespace, name)


def _decoded(data: dict[str, str], key: str) -> bytes | None:
    raw = data.get(key)
    if raw is None:
        return None
    try:
        return base64.b64decode(raw)
    except (binascii.Error, ValueError):
        return None
