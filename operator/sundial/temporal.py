"""Every Temporal call the operator makes: one client per distinct connection, created on
the operator's event loop and reused, and one request budget for all of them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from sundial.config import OperatorConfig
from sundial.workqueue import Retry

RPC_TIMEOUT = timedelta(seconds=10)
CONNECT_TIMEOUT = 10.0
_UNAVAILABLE = {
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.UNKNOWN,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.INTERNAL,
}


class TemporalUnavailable(Retry):
    """Temporal could not be reached; the message names the address, never a credential."""


class TemporalRejected(Exception):
    """Temporal refused the request itself (INVALID_ARGUMENT and the like): a spec problem."""


@dataclass(frozen=True)
class Connection:
    """Where and how to reach Temporal. Credentials stay out of repr (and so out of logs)."""

    address: str
    namespace: str
    client_cert: bytes | None = dataclasses.field(default=None, repr=False)
    client_key: bytes | None = dataclasses.field(default=None, repr=False)
    server_ca: bytes | None = dataclasses.field(default=None, repr=False)
    api_key: str | None = dataclasses.field(default=None, repr=False)

    @property
    def uses_tls(self) -> bool:
        return bool(self.client_cert or self.server_ca or self.api_key)

    def describe(self) -> str:
        return f"{self.address} (namespace {self.namespace})"


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as file:
        return file.read()


def default_connection(config: OperatorConfig) -> Connection:
    """The operator-wide connection; credentials come from files (a mounted Secret) or
    the environment, read once at start-up."""
    api_key_file = _read(config.temporal_api_key_file)
    api_key = api_key_file.decode().strip() if api_key_file else config.temporal_api_key
    return Connection(
        address=config.temporal_address,
        namespace=config.temporal_namespace,
        client_cert=_read(config.temporal_tls_cert_file),
        client_key=_read(config.temporal_tls_key_file),
        server_ca=_read(config.temporal_tls_ca_file),
        api_key=api_key or None,
    )


class RequestBudget:
    """A token bucket shared by every Temporal call: the operator's request rate stays
    bounded however many ScheduledJobs it has."""

    def __init__(
        self,
        per_second: float,
        burst: int | None = None,
        on_request: Callable[[], None] | None = None,
    ) -> None:
        self.per_second = per_second
        self._on_request = on_request
        self.capacity = float(burst or max(1, int(per_second)))
        self._tokens = self.capacity
        self._updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def take(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                self._tokens = min(
                    self.capacity, self._tokens + (now - self._updated) * self.per_second
                )
                self._updated = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    if self._on_request is not None:
                        self._on_request()
                    return
                await asyncio.sleep((1 - self._tokens) / self.per_second)


def schedule_fingerprint(description: ScheduleDescription) -> str:
    """A hash of the schedule as the server holds it (spec, action, policies), without its
    pause state: the server rewrites cron strings, so this is compared with the same
    hash taken right after Sundial's own last write, never with the desired spec."""
    schedule = type(description.raw_description.schedule)()
    schedule.CopyFrom(description.raw_description.schedule)
    schedule.ClearField("state")
    return hashlib.sha256(schedule.SerializeToString(deterministic=True)).hexdigest()[:16]


class Temporal:
    def __init__(self, budget: RequestBudget) -> None:
        self.budget = budget
        self._clients: dict[Connection, Client] = {}
        self._connecting: dict[Connection, asyncio.Lock] = {}

    async def client(self, connection: Connection) -> Client:
        if connection in self._clients:
            return self._clients[connection]
        lock = self._connecting.setdefault(connection, asyncio.Lock())
        async with lock:
            if connection not in self._clients:
                self._clients[connection] = await self._connect(connection)
        return self._clients[connection]

    async def _connect(self, connection: Connection) -> Client:
        tls: TLSConfig | bool = False
        if connection.uses_tls:
            tls = TLSConfig(
                server_root_ca_cert=connection.server_ca,
                client_cert=connection.client_cert,
                client_private_key=connection.client_key,
            )
        try:
            return await asyncio.wait_for(
                Client.connect(
                    connection.address,
                    namespace=connection.namespace,
                    tls=tls,
                    api_key=connection.api_key,
                ),
                CONNECT_TIMEOUT,
            )
        except (RuntimeError, OSError, TimeoutError, RPCError) as error:
            raise TemporalUnavailable(
                f"cannot connect to Temporal at {connection.describe()}: {_first_line(error)}"
            ) from None

    @asynccontextmanager
    async def _call(self, connection: Connection, what: str) -> AsyncIterator[Client]:
        client = await self.client(connection)
        await self.budget.take()
        try:
            yield client
        except RPCError as error:
            if error.status in _UNAVAILABLE:
                raise TemporalUnavailable(
                    f"Temporal at {connection.describe()} is unavailable ({what}): "
                    f"{_first_line(error)}"
                ) from None
            if error.status == RPCStatusCode.NOT_FOUND and what.startswith(("describe", "delete")):
                raise  # the schedule is not there: the caller decides what that means
            raise TemporalRejected(f"Temporal refused to {what}: {error.message}") from None
        except (ValueError, TypeError) as error:
            # The SDK validates some values itself before sending (retry policies, payloads).
            raise TemporalRejected(f"cannot {what}: {error}") from None

    async def describe(
        self, connection: Connection, schedule_id: str
    ) -> ScheduleDescription | None:
        try:
            async with self._call(connection, "describe the schedule") as client:
                return await client.get_schedule_handle(schedule_id).describe(
                    rpc_timeout=RPC_TIMEOUT
                )
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    async def create(
        self, connection: Connection, schedule_id: str, schedule: Schedule, memo: dict[str, str]
    ) -> None:
        async with self._call(connection, "create the schedule") as client:
            # Already there: an earlier pass created it and lost the answer; the next pass
            # compares and updates it.
            with contextlib.suppress(ScheduleAlreadyRunningError):
                await client.create_schedule(
                    schedule_id, schedule, memo=memo, rpc_timeout=RPC_TIMEOUT
                )

    async def update(
        self, connection: Connection, schedule_id: str, schedule: Schedule, *, keep_state: bool
    ) -> None:
        """Read-modify-write with the server's conflict token. With keep_state the pause
        state on the server is kept (a pause by hand is reported, not undone)."""

        def replace(current: ScheduleUpdateInput) -> ScheduleUpdate:
            new = dataclasses.replace(schedule)
            if keep_state:
                new.state = current.description.schedule.state
            return ScheduleUpdate(schedule=new)

        async with self._call(connection, "update the schedule") as client:
            await client.get_schedule_handle(schedule_id).update(replace, rpc_timeout=RPC_TIMEOUT)

    async def set_paused(
        self, connection: Connection, schedule_id: str, paused: bool, note: str
    ) -> None:
        async with self._call(connection, "pause or unpause the schedule") as client:
            handle = client.get_schedule_handle(schedule_id)
            if paused:
                await handle.pause(note=note, rpc_timeout=RPC_TIMEOUT)
            else:
                await handle.unpause(note=note, rpc_timeout=RPC_TIMEOUT)

    async def delete(self, connection: Connection, schedule_id: str) -> None:
        try:
            async with self._call(connection, "delete the schedule") as client:
                await client.get_schedule_handle(schedule_id).delete(rpc_timeout=RPC_TIMEOUT)
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
