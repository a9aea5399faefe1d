"""A TCP relay on loopback between one client and one server, that makes the network faults
of a production cluster happen on demand: latency, a stall (the connection stays open and
silent, as behind a dead NAT entry or a peer that froze), a freeze (only the connections open
now stall: a client's pooled connections died, a new one would work), a cut (every open
connection reset) and an outage (new connections reset too). Each direction has its own
setting, so a request can reach the server while its answer never comes back.

TLS passes through untouched (the relay sees only bytes), so a client keeps verifying the
server's certificate; 127.0.0.1 is in the apiserver's and the TLS front's names.

Threads, not asyncio: the relay lives in the test process beside synchronous tests, and a
handful of connections per client is all it carries.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

# client -> server ("request") and server -> client ("answer")
Direction = Literal["request", "answer"]
DIRECTIONS: tuple[Direction, ...] = ("request", "answer")
_TICK = 0.05  # how soon a pump notices a changed setting
_CHUNK = 65536


@dataclass
class _Setting:
    latency: float = 0.0
    stalled: bool = False


@dataclass
class _Connection:
    client: socket.socket
    server: socket.socket
    closed: threading.Event = field(default_factory=threading.Event)
    pumps_left: int = 2
    frozen: bool = False

    def pump_done(self) -> None:
        """Both directions ended (each passed its half-close on): the connection is over."""
        self.pumps_left -= 1
        if self.pumps_left <= 0:
            self.closed.set()
            for end in (self.client, self.server):
                end.close()  # gracefully: what is still in the send buffers goes out

    def reset(self) -> None:
        """Closes both ends with an RST (linger 0), as a dropped connection looks."""
        self.closed.set()
        for end in (self.client, self.server):
            with contextlib.suppress(OSError):
                end.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                end.close()


class Relay:
    """Listens on 127.0.0.1 (an ephemeral port unless `port` is given) and forwards each
    connection to `target` ("host:port"). `address` is what the client dials instead."""

    def __init__(self, target: str, name: str = "relay", port: int = 0) -> None:
        host, target_port = target.rsplit(":", 1)
        self.name = name
        self.target = (host, int(target_port))
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self._listener.getsockname()[1]
        self._settings = {direction: _Setting() for direction in DIRECTIONS}
        self._down = False
        self._connections: list[_Connection] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self.accepted = 0
        self.refused = 0
        threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """For an HTTPS server (the apiserver)."""
        return f"https://{self.address}"

    # -- faults

    def latency(self, seconds: float, direction: Direction | None = None) -> None:
        """Every chunk in `direction` (both when None) waits `seconds` before it goes on."""
        self._set(direction, latency=seconds)

    def stall(self, direction: Direction | None = None) -> None:
        """Stops forwarding in `direction`: connections stay open, bytes wait unread (the
        sender's buffers fill and its writes block), new connections are accepted and
        hang alike. `resume` lets everything through again, nothing lost."""
        self._set(direction, stalled=True)

    def freeze(self) -> int:
        """Stalls the connections open now, both ways, and only those: new connections go
        through. What a client's pooled connections look like after their route died
        silently. Returns how many were frozen; `resume` thaws them."""
        with self._changed:
            self._connections = [c for c in self._connections if not c.closed.is_set()]
            for connection in self._connections:
                connection.frozen = True
            return len(self._connections)

    def cut(self) -> int:
        """Resets every open connection now; new ones are still relayed. Returns how many
        were cut."""
        with self._lock:
            open_now, self._connections = self._connections, []
        for connection in open_now:
            connection.reset()
        return len(open_now)

    def down(self) -> None:
        """An outage: open connections are reset and new ones reset at once, until resume."""
        with self._lock:
            self._down = True
        self.cut()

    def resume(self) -> None:
        """No latency, no stall, no outage: the relay forwards as if it were not there."""
        with self._changed:
            self._down = False
            for setting in self._settings.values():
                setting.latency, setting.stalled = 0.0, False
            for connection in self._connections:
                connection.frozen = False
            self._changed.notify_all()

    @contextlib.contextmanager
    def stalled(self, direction: Direction | None = None) -> Iterator[None]:
        self.stall(direction)
        try:
            yield
        finally:
            self.resume()

    @contextlib.contextmanager
    def slowed(self, seconds: float, direction: Direction | None = None) -> Iterator[None]:
        self.latency(seconds, direction)
        try:
            yield
        finally:
            self.resume()

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        self.down()
        try:
            yield
        finally:
            self.resume()

    @property
    def open_connections(self) -> int:
        with self._lock:
            self._connections = [c for c in self._connections if not c.closed.is_set()]
            return len(self._connections)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        # close() alone does not wake a thread blocked in accept(); shutdown() does.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self.cut()

    # -- internals

    def _set(self, direction: Direction | None, **values: float | bool) -> None:
        with self._changed:
            for each in (direction,) if direction else DIRECTIONS:
                for attribute, value in values.items():
                    setattr(self._settings[each], attribute, value)
            self._changed.notify_all()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down, closed = self._down, self._closed
            if closed:
                client.close()
                return
            if down:
                self.refused += 1
                _Connection(client, client).reset()
                continue
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                self.refused += 1
                _Connection(client, client).reset()
                continue
            server.settimeout(None)
            connection = _Connection(client, server)
            with self._lock:
                self._connections.append(connection)
                self.accepted += 1
            for source, sink, direction in (
                (client, server, "request"),
                (server, client, "answer"),
            ):
                threading.Thread(
                    target=self._pump,
                    args=(connection, source, sink, direction),
                    name=f"{self.name}-{direction}",
                    daemon=True,
                ).start()

    def _pump(
        self, connection: _Connection, source: socket.socket, sink: socket.socket, direction: str
    ) -> None:
        setting = self._settings[direction]  # type: ignore[index]

        def stalled() -> bool:
            return (setting.stalled or connection.frozen) and not self._closed

        try:
            while not connection.closed.is_set():
                with self._changed:
                    if stalled():
                        # Not reading is the stall: the bytes wait in the kernel's buffers.
                        self._changed.wait(_TICK)
                        continue
                readable, _, _ = select.select([source], [], [], _TICK)
                with self._changed:
                    # Asked again: a stall that began while select waited holds these bytes.
                    if not readable or stalled():
                        continue
                    delay = setting.latency
                data = source.recv(_CHUNK)
                if not data:
                    with contextlib.suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)  # pass the half-close on
                    with self._lock:
                        connection.pump_done()
                    return
                if delay:
                    time.sleep(delay)
                sink.sendall(data)
        except (OSError, ValueError):
            connection.reset()
