"""Every Temporal call the operator makes: one client per distinct connection, created on
the operator's event loop and reused, and one request budget for all of them."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import schedule_pb2 as enums_pb
from temporalio.api.schedule.v1 import message_pb2 as schedule_pb
from temporalio.api.workflowservice.v1 import request_response_pb2 as workflowservice_pb
from temporalio.client import (
    Client,
    Schedule,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleOverlapPolicy,
    ScheduleUpdate,
    ScheduleUpdateInput,
    WorkflowHistoryEventFilterType,
)
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from sundial.api import reasons
from sundial.backends.temporal.digests import Listed, listed_schedule
from sundial.backends.temporal.limits import (
    BREAKER_BASE_SECONDS,
    BREAKER_MAX_SECONDS,
    Breaker,
    RequestBudget,
)
from sundial.backends.temporal.refusals import (
    REFUSED_AT_CONNECT,
    REFUSED_CREDENTIALS,
    UNAVAILABLE,
    credentials_refused,
    first_line,
    is_tls_refusal,
    refusal_message,
)
from sundial.errors import TemporalRejected, TemporalUnavailable

RPC_TIMEOUT = timedelta(seconds=10)
# Schedules per page of a listing (the server's own maximum is 1000).
LIST_PAGE = 1000
CONNECT_TIMEOUT = 10.0
# A connection with no call for this long is dropped (Temporal.sweep_idle): a listing of
# every connection in use runs every 10 s and each object is described every 5 minutes at
# least, so only connections no object uses any more are ever this quiet.
IDLE_SECONDS = 900.0


@dataclass(frozen=True)
class Connection:
    """Where and how to reach Temporal, as resolved from a connection resource and its
    Secrets. Credentials stay out of repr (and so out of logs)."""

    address: str
    namespace: str
    client_cert: bytes | None = dataclasses.field(default=None, repr=False)
    client_key: bytes | None = dataclasses.field(default=None, repr=False)
    server_ca: bytes | None = dataclasses.field(default=None, repr=False)
    api_key: str | None = dataclasses.field(default=None, repr=False)
    tls: bool = False  # set by the resolver: a tls block, or an API key (which implies it)
    server_name: str | None = None

    def describe(self) -> str:
        return f"{self.address} (namespace {self.namespace})"


class Temporal:
    """Isolation keyed by what fails. A connection (everything a `Connection` holds:
    address, TLS and credentials, Temporal namespace) has its own circuit breaker, which
    makes its calls fail fast until its backoff has passed, and at most `per_address`
    calls in flight (the setting SUNDIAL_TEMPORAL_CONNECTIONS_PER_ADDRESS): TLS spoken to a
    plaintext server, refused credentials or a namespace over its rate limit stop only
    that connection's calls, never another tenant's on the same address. What protects
    the server is a cap per address, one call more than a connection's (so no single
    connection fills it), held only while a request is on its way: not while a call
    connects, nor while it waits for the request budget."""

    def __init__(
        self,
        budget: RequestBudget,
        *,
        per_address: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self.per_connection = per_address
        self.per_address = per_address + 1
        self._clock = clock
        self._clients: dict[Connection, Client] = {}
        self._connecting: dict[Connection, asyncio.Lock] = {}
        self._in_flight: dict[Connection, asyncio.Semaphore] = {}
        self._at_address: dict[str, asyncio.Semaphore] = {}
        self._breakers: dict[Connection, Breaker] = {}
        # When each connection's last call began, and its calls under way: a connection
        # no object uses any more (its namespace deleted, its object moved) is dropped
        # after IDLE_SECONDS, client, breaker and all (issue 25.13: they stayed for ever).
        self._last_call: dict[Connection, float] = {}
        self._calls: dict[Connection, int] = {}
        self._swept_at = clock()

    def sweep_idle(self) -> list[Connection]:
        """Drop the connections with no call for IDLE_SECONDS and none under way; the
        Temporal client's channel closes once nothing holds it. Returns what went."""
        now = self._clock()
        self._swept_at = now
        idle = [c for c, at in self._last_call.items()
                if now - at >= IDLE_SECONDS and not self._calls.get(c)]  # fmt: skip
        for connection in idle:
            self.forget(connection)
            del self._last_call[connection]
        in_use = {c.address for c in self._last_call}
        for address in [a for a in self._at_address if a not in in_use]:
            del self._at_address[address]
        return idle

    def held_connections(self) -> int:
        """Connections with state here (a client, a breaker, a cap)."""
        return len(self._clients.keys() | self._breakers.keys() | self._in_flight.keys())

    def forget(self, connection: Connection) -> None:
        """Drop the client of a connection no longer in use (its Secret was rotated, or
        the connection changed), its breaker and its calls' cap: the next call with the
        new one connects afresh."""
        self._clients.pop(connection, None)
        self._connecting.pop(connection, None)
        self._in_flight.pop(connection, None)
        self._breakers.pop(connection, None)

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
        if connection.tls:
            tls = TLSConfig(
                server_root_ca_cert=connection.server_ca,
                client_cert=connection.client_cert,
                client_private_key=connection.client_key,
                domain=connection.server_name,
            )
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can drop a stop's cancellation.
            async with asyncio.timeout(CONNECT_TIMEOUT):
                return await Client.connect(
                    connection.address,
                    namespace=connection.namespace,
                    tls=tls,
                    api_key=connection.api_key,
                )
        except RPCError as error:
            if error.status in REFUSED_CREDENTIALS:
                raise credentials_refused(
                    connection.describe(), first_line(error), REFUSED_CREDENTIALS[error.status]
                ) from None
            raise TemporalUnavailable(
                f"cannot connect to Temporal at {connection.describe()}: {first_line(error)}"
            ) from None
        except (RuntimeError, OSError, TimeoutError) as error:
            text = first_line(error)
            # The SDK reports a status refused at connect (its first call) as text.
            for code, reason in REFUSED_AT_CONNECT.items():
                if code in text:
                    raise credentials_refused(
                        connection.describe(), refusal_message(text), reason
                    ) from None
            if is_tls_refusal(text):
                raise TemporalRejected(
                    f"TLS with Temporal at {connection.describe()} failed: {text}",
                    reasons.TLS_HANDSHAKE_FAILED,
                ) from None
            raise TemporalUnavailable(
                f"cannot connect to Temporal at {connection.describe()}: {text}"
            ) from None

    @asynccontextmanager
    async def _call(
        self, connection: Connection, operation: str, what: str
    ) -> AsyncIterator[Client]:
        """One request: `operation` is the gRPC method (the requests metric's label),
        `what` says it in errors."""
        if self._clock() - self._swept_at >= IDLE_SECONDS / 10:
            self.sweep_idle()
        self._last_call[connection] = self._clock()
        self._calls[connection] = self._calls.get(connection, 0) + 1
        try:
            async with self._call_on(connection, operation, what) as client:
                yield client
        finally:
            self._calls[connection] -= 1
            if not self._calls[connection]:
                del self._calls[connection]

    @asynccontextmanager
    async def _call_on(
        self, connection: Connection, operation: str, what: str
    ) -> AsyncIterator[Client]:
        breaker = self._breakers.setdefault(connection, Breaker())
        self._fail_fast(connection, breaker)
        in_flight = self._in_flight.setdefault(connection, asyncio.Semaphore(self.per_connection))
        async with in_flight:
            self._fail_fast(connection, breaker)  # it may have opened while this call waited
            try:
                client = await self.client(connection)
                await self.budget.take(operation)
                at_address = self._at_address.setdefault(
                    connection.address, asyncio.Semaphore(self.per_address)
                )
                async with at_address:
                    yield client
            except TemporalUnavailable as error:
                self._trip(breaker, str(error))
                raise
            except RPCError as error:
                if error.status in UNAVAILABLE:
                    message = (
                        f"Temporal at {connection.describe()} is unavailable ({what}): "
                        f"{first_line(error)}"
                    )
                    self._trip(breaker, message)
                    raise TemporalUnavailable(message) from None
                breaker.failures, breaker.open_until = 0, 0.0
                if error.status == RPCStatusCode.NOT_FOUND and what.startswith(
                    ("describe", "delete")
                ):
                    raise  # the schedule is not there: the caller decides what that means
                if error.status in REFUSED_CREDENTIALS:
                    raise TemporalRejected(
                        f"Temporal refused to {what} with the connection's credentials: "
                        f"{error.message}",
                        REFUSED_CREDENTIALS[error.status],
                    ) from None
                raise TemporalRejected(f"Temporal refused to {what}: {error.message}") from None
            except (ValueError, TypeError) as error:
                # The SDK validates some values itself before sending (retry policies, payloads).
                raise TemporalRejected(f"cannot {what}: {error}") from None
            else:
                breaker.failures, breaker.open_until = 0, 0.0

    def _fail_fast(self, connection: Connection, breaker: Breaker) -> None:
        wait = breaker.open_until - self._clock()
        if wait > 0:
            raise TemporalUnavailable(
                f"Temporal at {connection.describe()} is unreachable ({breaker.last_error}); "
                f"not trying again for {wait:.0f}s"
            )

    def _trip(self, breaker: Breaker, message: str) -> None:
        breaker.failures += 1
        backoff = min(BREAKER_BASE_SECONDS * 2.0 ** (breaker.failures - 1), BREAKER_MAX_SECONDS)
        breaker.open_until = self._clock() + backoff
        breaker.last_error = message.split(": ", 1)[-1][:200]

    async def describe(
        self, connection: Connection, schedule_id: str
    ) -> ScheduleDescription | None:
        try:
            async with self._call(
                connection, "DescribeSchedule", "describe the schedule"
            ) as client:
                return await client.get_schedule_handle(schedule_id).describe(
                    rpc_timeout=RPC_TIMEOUT
                )
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise

    async def describe_present(
        self, connection: Connection, schedule_id: str
    ) -> ScheduleDescription:
        """describe() of a schedule just written: gone already is an outage to retry."""
        description = await self.describe(connection, schedule_id)
        if description is None:
            raise TemporalUnavailable(f"schedule {schedule_id} vanished while being written")
        return description

    async def create(
        self, connection: Connection, schedule_id: str, schedule: Schedule, memo: dict[str, str]
    ) -> bool:
        """False if a schedule of that id is there already (an earlier pass's, whose answer
        was lost, or someone else's: the caller describes it and decides)."""
        async with self._call(connection, "CreateSchedule", "create the schedule") as client:
            try:
                await client.create_schedule(
                    schedule_id, schedule, memo=memo, rpc_timeout=RPC_TIMEOUT
                )
            except ScheduleAlreadyRunningError:
                return False
            return True

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

        async with self._call(connection, "UpdateSchedule", "update the schedule") as client:
            await client.get_schedule_handle(schedule_id).update(replace, rpc_timeout=RPC_TIMEOUT)

    async def set_paused(
        self, connection: Connection, schedule_id: str, paused: bool, note: str
    ) -> None:
        async with self._call(
            connection, "PatchSchedule", "pause or unpause the schedule"
        ) as client:
            handle = client.get_schedule_handle(schedule_id)
            if paused:
                await handle.pause(note=note, rpc_timeout=RPC_TIMEOUT)
            else:
                await handle.unpause(note=note, rpc_timeout=RPC_TIMEOUT)

    async def trigger(
        self,
        connection: Connection,
        schedule_id: str,
        overlap: ScheduleOverlapPolicy,
        request_id: str,
    ) -> None:
        """Start one run now. `request_id` makes a repeat of the same request (a pass that
        died before recording it) a no-op on the server, which the SDK's own trigger()
        cannot: it sends a new random id each time."""
        patch = schedule_pb.SchedulePatch(
            trigger_immediately=schedule_pb.TriggerImmediatelyRequest(
                overlap_policy=enums_pb.ScheduleOverlapPolicy.ValueType(overlap)
            )
        )
        await self._patch(connection, schedule_id, patch, request_id, "trigger the schedule")

    async def backfill(
        self,
        connection: Connection,
        schedule_id: str,
        start: datetime,
        end: datetime,
        overlap: ScheduleOverlapPolicy,
        request_id: str,
    ) -> None:
        """Run the slots of [start, end] as if they were passing now (one request id per
        request, as trigger)."""
        backfill = schedule_pb.BackfillRequest(
            overlap_policy=enums_pb.ScheduleOverlapPolicy.ValueType(overlap)
        )
        backfill.start_time.FromDatetime(start)
        backfill.end_time.FromDatetime(end)
        patch = schedule_pb.SchedulePatch(backfill_request=[backfill])
        await self._patch(connection, schedule_id, patch, request_id, "backfill the schedule")

    async def _patch(
        self,
        connection: Connection,
        schedule_id: str,
        patch: schedule_pb.SchedulePatch,
        request_id: str,
        what: str,
    ) -> None:
        async with self._call(connection, "PatchSchedule", what) as client:
            await client.workflow_service.patch_schedule(
                workflowservice_pb.PatchScheduleRequest(
                    namespace=connection.namespace,
                    schedule_id=schedule_id,
                    patch=patch,
                    identity=client.identity,
                    request_id=request_id,
                ),
                retry=True,
                timeout=RPC_TIMEOUT,
            )

    async def look_up_run(self, connection: Connection, workflow_id: str) -> RunLookup | None:
        """A workflow a schedule started, as the server has it (the latest run of its
        chain); None if the server no longer has it (past the namespace's retention). A
        failed one costs a second request, for its close event's failure."""
        try:
            async with self._call(
                connection, "DescribeWorkflowExecution", "describe the workflow"
            ) as client:
                handle = client.get_workflow_handle(workflow_id)
                described = await handle.describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        status = described.status.name if described.status is not None else "RUNNING"
        failure_type = failure_message = None
        if status == "FAILED":
            failure_type, failure_message = await self._failure(connection, workflow_id)
        return RunLookup(
            status=status,
            run_id=described.run_id,
            start_time=described.start_time,
            close_time=described.close_time,
            failure_type=failure_type,
            failure_message=failure_message,
        )

    async def list_runs(
        self, connection: Connection, schedule_id: str, closed_after: datetime | None, limit: int
    ) -> list[ListedRun]:
        """The executions a schedule started (visibility: TemporalScheduledById), those
        still running or closed after `closed_after`, at most `limit`. One request per
        page; visibility is eventually consistent, so a later pass may show more."""
        query = _runs_query(schedule_id, closed_after)
        runs: list[ListedRun] = []
        async with self._call(
            connection, "ListWorkflowExecutions", "list the schedule's workflows"
        ) as client:
            async for execution in client.list_workflows(
                query, page_size=min(limit, 1000), limit=limit, rpc_timeout=RPC_TIMEOUT
            ):
                scheduled = execution.typed_search_attributes.get(SCHEDULED_START_TIME)
                runs.append(ListedRun(
                    workflow_id=execution.id, run_id=execution.run_id,
                    status=execution.status.name if execution.status else "RUNNING",
                    scheduled_time=scheduled or execution.start_time,
                    start_time=execution.start_time, close_time=execution.close_time,
                ))  # fmt: skip
        return runs

    async def count_runs(
        self, connection: Connection, schedule_id: str, closed_after: datetime | None = None
    ) -> int:
        """How many executions of the schedule Temporal still has (those running or closed
        after `closed_after`, if given): one request, whatever the number."""
        query = _runs_query(schedule_id, closed_after)
        async with self._call(
            connection, "CountWorkflowExecutions", "count the schedule's workflows"
        ) as client:
            counted = await client.count_workflows(query, rpc_timeout=RPC_TIMEOUT)
        return counted.count

    async def _failure(self, connection: Connection, workflow_id: str) -> tuple[str, str]:
        async with self._call(
            connection, "GetWorkflowExecutionHistory", "read the workflow's close event"
        ) as client:
            handle = client.get_workflow_handle(workflow_id)
            async for event in handle.fetch_history_events(
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT,
                rpc_timeout=RPC_TIMEOUT,
            ):
                failure = event.workflow_execution_failed_event_attributes.failure
                while failure.HasField("cause") and not failure.application_failure_info.type:
                    failure = failure.cause
                kind = (
                    failure.application_failure_info.type
                    or failure.WhichOneof("failure_info")
                    or "WorkflowFailed"
                )
                return _camel(kind), failure.message
        return "WorkflowFailed", ""

    async def list_schedules(self, connection: Connection, prefix: str) -> dict[str, Listed]:
        """Every schedule whose id starts with `prefix` in the connection's namespace, as
        its list entry shows it (`Listed`). One request per page of a thousand; the list
        is eventually consistent, so it only says which schedules to look at."""
        listed: dict[str, Listed] = {}
        token = b""
        while True:
            async with self._call(connection, "ListSchedules", "list the schedules") as client:
                page = await client.workflow_service.list_schedules(
                    workflowservice_pb.ListSchedulesRequest(
                        namespace=connection.namespace,
                        maximum_page_size=LIST_PAGE,
                        next_page_token=token,
                    ),
                    retry=True,
                    timeout=RPC_TIMEOUT,
                )
            for entry in page.schedules:
                if entry.schedule_id.startswith(prefix):
                    listed[entry.schedule_id] = listed_schedule(entry.info)
            token = page.next_page_token
            if not token:
                return listed

    async def delete(self, connection: Connection, schedule_id: str) -> None:
        try:
            async with self._call(connection, "DeleteSchedule", "delete the schedule") as client:
                await client.get_schedule_handle(schedule_id).delete(rpc_timeout=RPC_TIMEOUT)
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise


@dataclass(frozen=True)
class RunLookup:
    """A workflow execution, in plain values (status: the SDK's status name)."""

    status: str
    run_id: str
    start_time: datetime | None
    close_time: datetime | None
    failure_type: str | None = None
    failure_message: str | None = None


@dataclass(frozen=True)
class ListedRun:
    """An execution a schedule started, as the visibility listing shows it."""

    workflow_id: str
    run_id: str
    status: str
    scheduled_time: datetime
    start_time: datetime | None
    close_time: datetime | None


# The search attribute Temporal sets on a scheduled execution: the slot it was for.
SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")


def _runs_query(schedule_id: str, closed_after: datetime | None) -> str:
    query = f"TemporalScheduledById = '{_quoted(schedule_id)}'"
    if closed_after is not None:
        closed = closed_after.astimezone(UTC).isoformat()
        query += f" AND (ExecutionStatus = 'Running' OR CloseTime > '{closed}')"
    return query


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _camel(kind: str) -> str:
    """application_failure_info stays as the application's type; a proto field name
    (timeout_failure_info) becomes TimeoutFailure."""
    if "_" not in kind:
        return kind
    words = kind.removesuffix("_info").split("_")
    return "".join(word.capitalize() for word in words)
