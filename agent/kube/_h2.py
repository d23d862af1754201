"""The HTTP/2 transport of the Kubernetes client: every request and watch of one API server
over as few TLS connections as the server allows (one, up to its stream limit), on trio.

Why its own: httpcore 1.0 reads an HTTP/2 connection under one lock whose holder blocks in
the socket read until *any* frame arrives, so with quiet watches open a response that already
arrived waited until some other data came (measured: a request behind 10 idle watches never
completed), and it parked the 101st stream of a connection. Here one reader task per
connection (in the client's nursery) owns the socket and wakes exactly the streams a read
touched; the protocol itself is the sans-I/O core in agent/kube/_h2_core.py.

Theory of operation. :class:`H2Pool` hands out a stream slot on a connection with room
(``open``), dialing another (agent/kube/_dial.py: TLS with ALPN, through a proxy's tunnel if
one is set) when all are full. When ALPN chooses HTTP/1.1 the pool says so
(:class:`H2Unsupported`, carrying the connection for the HTTP/1.1 transport to use) and is
not used again. The reader feeds what it reads to the core; one writer task sends what the
core queued (requests, WINDOW_UPDATEs, SETTINGS/PING acks) in the order the core made it,
the frames of many requests in one TLS record when they come together. Flow-control credit
is returned as consumers take the bytes, so one stalled watch stops only its own stream. After
``READ_IDLE`` seconds without a frame a PING checks the connection (client-go's health
check); no answer within ``PING_TIMEOUT`` closes it.

A GOAWAY is routine (an API server restarting, or balancing connections): logged at DEBUG
with the account, the connection takes no new streams and ends when its last stream does;
streams the GOAWAY did not cover fail as unprocessed, and the client sends them again on
another connection. When the connection breaks, each open stream fails; one that had no
response head yet fails as unanswered (a safe request may be sent again).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

import trio

from .._coarse_sleep import coarse_sleep_until
from ._dial import Dialed, Dialer
from ._h2_core import H2Core, H2ProtocolError, Stream, error_name, request_headers
from ._seam import Request, TransportError
from ._tls import TlsStream

__all__ = ["H2Connection", "H2Exchange", "H2Pool", "H2Unsupported"]

log = logging.getLogger("agent.kube")

STREAM_WINDOW = 1024 * 1024
CONNECTION_WINDOW = 16 * 1024 * 1024
MAX_STREAMS = 250
MAX_FRAME_SIZE = 64 * 1024  # fewer frames (and task switches) per byte
READ_SIZE = 256 * 1024
READ_IDLE = 30.0  # client-go's ReadIdleTimeout
PING_TIMEOUT = 15.0  # client-go's PingTimeout


class H2Unsupported(Exception):
    """The server chose HTTP/1.1 by ALPN; ``dialed`` is that connection, unused (None for
    the requests that waited while it was found out)."""

    def __init__(self, dialed: Dialed | None) -> None:
        super().__init__("the server does not speak HTTP/2")
        self.dialed = dialed


class H2Connection:
    """One HTTP/2 connection: the core, its socket, and the waits of its streams."""

    def __init__(self, dialed: Dialed, authority: str, label: str) -> None:
        assert isinstance(dialed.stream, TlsStream)  # h2 is negotiated by TLS's ALPN only
        self._dialed = dialed
        self._socket = dialed.stream
        self.label = label  # "account a: 10.0.0.1:6443", for the log
        self.core = H2Core(
            authority,
            stream_window=STREAM_WINDOW,
            connection_window=CONNECTION_WINDOW,
            max_frame_size=MAX_FRAME_SIZE,
            max_streams=MAX_STREAMS,
        )
        self._output_ready = trio.Event()  # the writer waits on it for something to send
        self._sending = False
        self._waiters: dict[int, trio.Event] = {}
        self.reserved = 0  # slots promised to streams being opened or open
        self._last_read = trio.current_time()
        self._ping_answered = trio.Event()
        self.error: str | None = None  # why the connection is unusable (None: fine)
        self._goaway_logged = False

    def available(self) -> bool:
        return self.error is None and self.core.can_open() and self.reserved < self.core.max_streams

    @property
    def finished(self) -> bool:
        """Broken, or drained after a GOAWAY: the pool forgets it."""
        return self.error is not None or (not self.core.can_open() and not self.core.streams)

    def peer_certificate(self) -> bytes | None:
        return self._dialed.peer_certificate()

    def _kick(self) -> None:
        """Have the writer send what the core queued (no wait: see ``_write_frames``)."""
        if self.core.has_output():
            self._output_ready.set()

    async def start(self) -> None:
        """Send the preface and settings; wait for the server's SETTINGS (its stream limit)."""
        self.core.initiate()
        await self._socket.send_all(self.core.data_to_send())
        while not self.core.settings_received:
            data = await self._socket.receive_some(READ_SIZE)
            if not data:
                raise trio.BrokenResourceError("the server closed the HTTP/2 connection at once")
            try:
                self.core.receive_data(data)
            except H2ProtocolError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            if self.core.has_output():
                await self._socket.send_all(self.core.data_to_send())

    async def run_reader(self) -> None:
        """Read frames until the connection ends, with the PING health check beside it.
        Never raises (errors go to the streams)."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._health_check)
                nursery.start_soon(self._write_frames)
                await self._read_frames()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._socket)
            self._fail("the HTTP/2 connection was closed", routine=True)

    async def _read_frames(self) -> None:
        core = self.core
        socket = self._socket
        try:
            while True:
                received = await socket.receive_into(core.inbound, READ_SIZE)
                self._last_read = trio.current_time()
                if not received:
                    self._fail("the server closed the HTTP/2 connection", routine=True)
                    return
                before = core.pings_answered
                touched = core.process()
                if core.pings_answered != before:
                    self._ping_answered.set()
                for stream in touched:
                    self._wake(stream.stream_id)
                if core.goaway is not None and not self._goaway_logged:
                    self._log_goaway()
                self._kick()
                if core.goaway is not None and not core.streams:
                    return  # drained: nothing more will come that anyone waits for
        except H2ProtocolError as exc:
            self._fail(str(exc), routine=False)
            if not self._sending:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(1),
                    contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
                ):
                    await socket.send_all(core.data_to_send())  # the GOAWAY saying why
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(f"the HTTP/2 connection broke: {exc}", routine=False)

    async def _write_frames(self) -> None:
        """The connection's one writer: sends what the core queued whenever it is kicked.

        Why a task of its own: every request of every stream adds frames, and a writer that
        sends all that accumulated while it was sending makes one TLS record and one send
        for many requests at once. And no consumer is ever cancelled mid-send (which would
        cut a TLS record and with it the connection every watch of the cluster shares): a
        consumer only waits for an answer. A send that never completes (a silent network)
        is ended by the health check's close. Never raises."""
        core = self.core
        try:
            while True:
                if not core.has_output():
                    self._output_ready = trio.Event()
                    await self._output_ready.wait()
                    continue
                self._sending = True
                await self._socket.send_all(core.data_to_send())
                self._sending = False
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(f"the HTTP/2 connection broke: {exc}", routine=False)
            await trio.aclose_forcefully(self._socket)  # ends the reader

    def _log_goaway(self) -> None:
        self._goaway_logged = True
        assert self.core.goaway is not None
        last, code, debug = self.core.goaway
        level = logging.DEBUG if code == 0 else logging.INFO
        log.log(
            level,
            "%s: GOAWAY (%s%s, last stream %d): no new requests on this HTTP/2 connection",
            self.label,
            error_name(code),
            f": {debug.decode(errors='replace')}" if debug else "",
            last,
        )

    def _wake(self, stream_id: int) -> None:
        event = self._waiters.pop(stream_id, None)
        if event is not None:
            event.set()

    async def _wait(self, stream: Stream) -> None:
        event = self._waiters[stream.stream_id] = trio.Event()
        await event.wait()

    async def _health_check(self) -> None:
        """Like client-go's HTTP/2 health check: after READ_IDLE seconds without a frame,
        PING; no answer within PING_TIMEOUT means the connection is dead (a silent network
        or a vanished peer would otherwise hold every watch on it forever), so close it."""
        while self.error is None:
            # Sleep *until* the due time, not *for* the difference: on a virtual clock
            # ``now + (READ_IDLE - idle)`` can land one rounding step short of
            # ``last_read + READ_IDLE``, and the loop then spun without time moving on.
            # Coarse: a thousand connections' checks share one deadline a second.
            due = self._last_read + READ_IDLE
            if trio.current_time() < due:
                await coarse_sleep_until(due)
                continue
            self._ping_answered = trio.Event()
            self.core.ping(b"kubesvc!")
            self._kick()
            with trio.move_on_after(PING_TIMEOUT):
                await self._ping_answered.wait()
                continue
            self._fail(
                f"no answer to an HTTP/2 PING within {PING_TIMEOUT:.0f} s: the connection is dead",
                routine=False,
            )
            await trio.aclose_forcefully(self._socket)  # ends the reader
            return

    def _fail(self, message: str, *, routine: bool, ours: bool = False) -> None:
        """The connection is over: every unfinished stream fails with ``message``."""
        if self.error is None:
            self.error = message
            quiet = ours or (routine and (self.core.goaway is not None or not self.core.streams))
            log.log(logging.DEBUG if quiet else logging.INFO, "%s: %s", self.label, message)
        for stream in self.core.fail(message, ours=ours):
            self._wake(stream.stream_id)

    # --- streams -------------------------------------------------------------------------

    async def open_stream(self, request: Request, scheme: str) -> Stream:
        """Send ``request`` on a slot already reserved and wait for the response head. The
        caller owns the returned stream (``close_stream``); on an error the slot is freed
        here. Raises TransportError."""
        try:
            if not (self.error is None and self.core.can_open()):
                raise TransportError(
                    f"the HTTP/2 connection takes no new requests: {self.error or 'GOAWAY'}",
                    stage="send",
                    unprocessed=True,
                )
            fields = request_headers(request.headers)
            if request.body:
                fields.append(("content-length", str(len(request.body))))
            stream = self.core.start_request(
                request.method, request.target, fields, request.body, scheme=scheme
            )
        except BaseException:
            self.reserved -= 1
            raise
        self._kick()
        try:
            while stream.headers is None and stream.error is None:
                await self._wait(stream)
            if stream.headers is None:
                raise _stream_error(stream, "head")
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.close_stream(stream)
            raise
        return stream

    async def receive_some(self, stream: Stream) -> bytes:
        while not stream.chunks and not stream.done:
            await self._wait(stream)
        chunks = stream.chunks
        if chunks:
            data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
            chunks.clear()
            self.core.consumed(stream, len(data))
            self._kick()
            return data
        if stream.error is not None:
            raise _stream_error(stream, "body")
        return b""

    async def close_stream(self, stream: Stream) -> None:
        """Forget a stream: reset it if unfinished, give back the credit it held."""
        if stream.stream_id not in self.core.streams:
            return
        self.reserved -= 1
        self._waiters.pop(stream.stream_id, None)
        self.core.close_stream(stream)
        self._kick()

    async def aclose(self) -> None:
        """Close the connection; its open streams fail."""
        self._fail("the client was closed", routine=True, ours=True)
        await trio.aclose_forcefully(self._socket)


def _stream_error(stream: Stream, stage: str) -> TransportError:
    return TransportError(
        stream.error or "the HTTP/2 stream failed",
        stage=stage,
        unprocessed=stream.unprocessed,
        unanswered=stage == "head" and stream.lost,
        ours=stream.closed_by_us,
    )


class H2Exchange:
    """A response being read from one HTTP/2 stream (see Exchange in agent/kube/_seam.py)."""

    http_version = "HTTP/2"

    def __init__(self, connection: H2Connection, stream: Stream) -> None:
        self._connection = connection
        self._stream = stream
        self.status_code = stream.status_code
        self.headers: Mapping[str, str] = stream.headers or {}

    def peer_certificate(self) -> bytes | None:
        return self._connection.peer_certificate()

    async def receive_some(self) -> bytes:
        return await self._connection.receive_some(self._stream)

    async def aclose(self) -> None:
        await self._connection.close_stream(self._stream)


class H2Pool:
    """HTTP/2 connections to one server; opens one more when all are full.

    ``label`` names the connections in the log (the account and server). ``open`` raises
    H2Unsupported when the server does not speak HTTP/2; ``unsupported`` is true from then on.
    """

    def __init__(self, dialer: Dialer, *, nursery: trio.Nursery, label: str) -> None:
        assert dialer.tls is not None
        dialer.tls.set_alpn_protocols(["h2", "http/1.1"])
        self._dialer = dialer
        self._authority = dialer.authority
        self._nursery = nursery
        self._label = label
        self._connections: list[H2Connection] = []
        self._connect_lock = trio.Lock()
        self.unsupported = False

    @property
    def connections(self) -> int:
        """Connections open now (those draining after a GOAWAY included)."""
        self._connections = [c for c in self._connections if not c.finished]
        return len(self._connections)

    def _pick(self) -> H2Connection | None:
        for connection in self._connections:
            if connection.available():
                connection.reserved += 1
                return connection
        return None

    async def _acquire(self) -> H2Connection:
        connection = self._pick()
        if connection is not None:
            return connection
        async with self._connect_lock:
            connection = self._pick()
            if connection is not None:
                return connection
            if self.unsupported:
                raise H2Unsupported(None)
            dialed = await self._dialer.dial()
            if dialed.alpn != "h2":
                self.unsupported = True
                raise H2Unsupported(dialed)
            connection = H2Connection(dialed, self._authority, self._label)
            try:
                # The server's SETTINGS are part of connecting: a server that finished TLS
                # and then says nothing must not hold every request of the cluster here.
                with trio.fail_after(self._dialer.connect_timeout):
                    await connection.start()
            except BaseException as exc:
                await trio.aclose_forcefully(dialed.stream)
                if isinstance(exc, trio.TooSlowError):
                    raise TransportError(
                        f"ConnectTimeout: no HTTP/2 SETTINGS from {self._authority} within "
                        f"{self._dialer.connect_timeout} s",
                        stage="connect",
                        timeout=True,
                    ) from exc
                if isinstance(exc, trio.BrokenResourceError | OSError):
                    raise TransportError(
                        f"ConnectError: the HTTP/2 connection did not start: {exc}",
                        stage="connect",
                    ) from exc
                raise
            self._nursery.start_soon(connection.run_reader)
            self._connections = [c for c in self._connections if not c.finished]
            self._connections.append(connection)
            connection.reserved += 1
            return connection

    async def open(self, request: Request) -> H2Exchange:
        connection = await self._acquire()
        stream = await connection.open_stream(request, "https")
        return H2Exchange(connection, stream)

    async def aclose(self) -> None:
        for connection in self._connections:
            await connection.aclose()
        self._connections.clear()
