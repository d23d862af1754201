"""A loopback TCP proxy that breaks its link on demand, for the chaos test.

Theory of operation. The proxy forwards raw bytes between each client and one upstream
address, so TLS and HTTP/2 pass through it end to end. What it does with connections is decided
by :class:`LinkFaults`, a small state machine with no I/O:

* ``OPEN``: a new client is connected upstream; bytes flow both ways.
* ``SILENT`` (a silent link, as when packets are dropped): nothing is read or forwarded, in
  either direction, on any connection; a new client is accepted and held unconnected. Both
  ends keep their connections and see nothing. Leaving ``SILENT`` for ``OPEN`` resumes every
  held byte in order (a stalled network that recovers); a cut ends them (one that does not).
* ``DOWN`` (a cut link): a cut resets every current connection on both sides (RST, SO_LINGER
  0); while ``DOWN`` a new client is accepted and reset at once, as a load balancer does while
  the backend behind it is gone.

An upstream that refuses the connection, or breaks it, gets the same treatment: the client is
reset. The thin trio loop (:class:`ChaosProxy`) keeps one task per direction per connection;
each holds at most one chunk (``CHUNK`` bytes) it has read and not yet written, so the proxy
buffers at most ``2 * CHUNK`` per connection, and TCP flow control does the rest.
"""

from __future__ import annotations

import enum
import socket
import struct
from dataclasses import dataclass, field

import trio

__all__ = ["CHUNK", "Admission", "ChaosProxy", "LinkFaults", "Mode", "ProxyStatistics"]

CHUNK = 64 * 1024
CONNECT_SECONDS = 5.0  # an upstream that does not answer within this is treated as refusing
_LINGER_RESET = struct.pack("ii", 1, 0)  # close() then sends RST instead of FIN


class Mode(enum.Enum):
    OPEN = "open"
    SILENT = "silent"
    DOWN = "down"


class Admission(enum.Enum):
    """What to do with a newly accepted client."""

    CONNECT = "connect"  # open the upstream connection and forward
    HOLD = "hold"  # keep it, unconnected, until the mode changes
    RESET = "reset"  # reset it at once


@dataclass(slots=True)
class LinkFaults:
    """The proxy's fault state (no I/O). ``cuts`` counts cuts, so a caller can tell them apart."""

    mode: Mode = Mode.OPEN
    cuts: int = 0

    def admit(self) -> Admission:
        if self.mode is Mode.OPEN:
            return Admission.CONNECT
        if self.mode is Mode.SILENT:
            return Admission.HOLD
        return Admission.RESET

    def may_forward(self) -> bool:
        return self.mode is Mode.OPEN

    def silence(self) -> None:
        """Stall every connection (from OPEN; a DOWN link stays down)."""
        if self.mode is Mode.OPEN:
            self.mode = Mode.SILENT

    def cut(self) -> None:
        """Down: every current connection must be reset, and new ones too until restore()."""
        self.mode = Mode.DOWN
        self.cuts += 1

    def restore(self) -> None:
        self.mode = Mode.OPEN


@dataclass(slots=True)
class ProxyStatistics:
    accepted: int = 0
    connected: int = 0  # upstream connections opened
    refused: int = 0  # clients reset because the upstream could not be reached
    reset: int = 0  # connections ended with a reset (cuts, refusals, broken peers)
    bytes_up: int = 0  # client -> upstream
    bytes_down: int = 0  # upstream -> client


@dataclass(eq=False)
class _Connection:
    client: trio.SocketStream
    upstream: trio.SocketStream | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    clean: bool = False  # both directions ended with an EOF: close with FIN, not RST

    def reset(self) -> None:
        self.clean = False
        self.scope.cancel()

    def close(self) -> None:
        """Close both sockets now (synchronous: safe in a cancelled finally)."""
        for stream in (self.client, self.upstream):
            if stream is None:
                continue
            if not self.clean:
                try:
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                except OSError:
                    pass  # already gone
            stream.socket.close()


class ChaosProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; :meth:`cut`, :meth:`silence` and
    :meth:`restore` change the link at once (synchronous, callable from any task)."""

    def __init__(self, target: tuple[str, int], name: str = "proxy") -> None:
        self.target = target
        self.name = name
        self.faults = LinkFaults()
        self.statistics = ProxyStatistics()
        self.port = 0
        self._changed = trio.Event()
        self._connections: set[_Connection] = set()

    @property
    def connections(self) -> int:
        """Client connections held now (forwarding, stalled or waiting to connect)."""
        return len(self._connections)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on a free loopback port until cancelled; ``task_status.started(port)``.
        Every connection's task belongs to this call and is reset when it is cancelled."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    def cut(self) -> None:
        """Reset every current connection on both sides; new ones are reset until restore()."""
        self.faults.cut()
        for connection in list(self._connections):
            connection.reset()
        self._wake()

    def silence(self) -> None:
        """Stall every connection, and hold new ones, until restore() or cut()."""
        self.faults.silence()
        self._wake()

    def restore(self) -> None:
        """Forward again: stalled bytes flow on, held clients connect upstream."""
        self.faults.restore()
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _until_forwarding(self) -> None:
        while not self.faults.may_forward():
            await self._changed.wait()

    async def _handle(self, client: trio.SocketStream) -> None:
        connection = _Connection(client)
        self._connections.add(connection)
        self.statistics.accepted += 1
        try:
            with connection.scope:
                while (admission := self.faults.admit()) is Admission.HOLD:
                    await self._changed.wait()
                if admission is Admission.RESET:
                    return
                try:
                    with trio.fail_after(CONNECT_SECONDS):
                        connection.upstream = await trio.open_tcp_stream(*self.target)
                except (OSError, trio.TooSlowError):
                    self.statistics.refused += 1
                    return
                self.statistics.connected += 1
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, connection, client, connection.upstream, True)
                    nursery.start_soon(self._pump, connection, connection.upstream, client, False)
                connection.clean = True
        finally:
            self._connections.discard(connection)
            if not connection.clean:
                self.statistics.reset += 1
            connection.close()

    async def _pump(
        self,
        connection: _Connection,
        source: trio.SocketStream,
        sink: trio.SocketStream,
        upwards: bool,
    ) -> None:
        """Copy ``source`` to ``sink`` one chunk at a time; an EOF is passed on as an EOF, a
        broken side resets the whole connection (both sides see RST, as they would on a
        real link)."""
        try:
            while True:
                await self._until_forwarding()
                data = await source.receive_some(CHUNK)
                await self._until_forwarding()  # what was read as the link fell silent waits
                if not data:
                    await sink.send_eof()
                    return
                await sink.send_all(data)
                if upwards:
                    self.statistics.bytes_up += len(data)
                else:
                    self.statistics.bytes_down += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            connection.reset()
