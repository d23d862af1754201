"""A small HTTP/2 client for long-lived GET streams (watches), on trio and the h2 library.

Why not httpx: httpcore 1.0 reads an HTTP/2 connection under a lock whose holder blocks in the
socket read, so a stream whose data already arrived waits until some other frame comes; with
quiet watches that is forever (see KubeClient). Here one reader task per connection owns the
socket.

Theory of operation. ``H2Connection`` is one TLS connection that negotiated ``h2`` by ALPN.
Its reader task (run in the client's nursery) is the only reader: it feeds bytes to h2 and
routes each event to its stream's state (headers, body chunks, end, reset), waking only that
stream's consumer. Writes (HEADERS, WINDOW_UPDATE, RST_STREAM, and the SETTINGS/PING acks h2
produces) go out under one lock. Flow-control credit for a stream is returned when its
consumer takes the data, so a consumer that stops reading (the budget is full) stops its
stream at the server after ``STREAM_WINDOW`` bytes while the others keep flowing. The
stream window is large (1 MiB): with 64 KiB a busy watch went at the pace of the WINDOW_UPDATE
round trips (~2,000 events/s on loaded cores instead of ~2,800). The connection window
(``CONNECTION_WINDOW``, 16 MiB) is the bound on what one connection buffers; it holds 16
stalled streams' full windows, and streams stall together anyway (they stop when the shared
event budget is full), so a stall there delays the others only while the budget is full.
A connection carries at most min(server's MAX_CONCURRENT_STREAMS, MAX_STREAMS) streams; the
pool opens another when all are full. When the reader fails (reset, TLS error, GOAWAY), every
open stream of the connection gets a KubeConnectionError and the pool stops using it.
"""

from __future__ import annotations

import logging
import ssl
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import httpx
import trio

from ._errors import KubeClosedError, KubeConnectionError

__all__ = ["H2Connection", "H2Pool", "StreamState"]

log = logging.getLogger("agent.kube")

STREAM_WINDOW = 1024 * 1024
MAX_STREAMS = 250
CONNECTION_WINDOW = 16 * 1024 * 1024
READ_SIZE = 256 * 1024
READ_IDLE = 30.0  # client-go's ReadIdleTimeout
PING_TIMEOUT = 15.0  # client-go's PingTimeout
MAX_FRAME_SIZE = 64 * 1024  # fewer frames (and task switches) per byte; = the window


@dataclass(slots=True, eq=False)
class StreamState:
    """One stream as the reader fills it and its consumer drains it."""

    stream_id: int
    status_code: int = 0
    headers: httpx.Headers | None = None
    chunks: deque[tuple[bytes, int]] = field(default_factory=deque)  # (data, flow length)
    ended: bool = False
    error: Exception | None = None
    wakeup: trio.Event = field(default_factory=trio.Event)

    def wake(self) -> None:
        self.wakeup.set()

    async def wait(self) -> None:
        self.wakeup = trio.Event()
        await self.wakeup.wait()


def _stream_error(cause: Exception) -> Exception:
    """What a stream's consumer sees: KubeClosedError when we closed the connection,
    KubeConnectionError for everything the peer or the network did."""
    error_type = KubeClosedError if isinstance(cause, KubeClosedError) else KubeConnectionError
    error = error_type(str(cause))
    error.__cause__ = cause
    return error


class H2Connection:
    """One HTTP/2 connection; see the module docstring. Made by :meth:`H2Pool.acquire`."""

    def __init__(self, stream: trio.SSLStream[trio.SocketStream], authority: str) -> None:
        self._socket = stream
        self._authority = authority.encode()
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config)
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
                h2.settings.SettingCodes.MAX_FRAME_SIZE: MAX_FRAME_SIZE,
            },
        )
        # Settings given as initial values count as already in force, so h2 never updates
        # its inbound frame limit from them: set it to what we advertise.
        self._h2.max_inbound_frame_size = MAX_FRAME_SIZE
        self._write_lock = trio.Lock()
        self._streams: dict[int, StreamState] = {}
        self.reserved = 0  # slots promised to streams being opened or open
        self._last_read = trio.current_time()
        self._ping_answered = trio.Event()
        self.error: Exception | None = None
        self.closed = False

    @property
    def max_streams(self) -> int:
        return min(self._h2.remote_settings.max_concurrent_streams, MAX_STREAMS)

    def available(self) -> bool:
        return self.error is None and not self.closed and self.reserved < self.max_streams

    def peer_certificate(self) -> bytes | None:
        der: bytes | None = self._socket.getpeercert(binary_form=True)
        return der

    async def _flush(self) -> None:
        # Called after every read and every consumer hand-over, and usually there is nothing
        # to send: then it returns without a checkpoint (a lock acquire is one, a task switch
        # per frame). Bytes are taken from h2 only by the lock's holder, so frames go out in
        # the order h2 produced them.
        if not self._write_lock.locked():
            data = self._h2.data_to_send()
            if not data:
                return
            self._write_lock.acquire_nowait()  # no checkpoint between taking and sending
            try:
                await self._socket.send_all(data)
            finally:
                self._write_lock.release()
            return
        async with self._write_lock:
            data = self._h2.data_to_send()
            if data:
                await self._socket.send_all(data)

    async def start(self) -> None:
        """Send the preface and settings; wait for the server's SETTINGS and for its ack of
        ours (h2 applies our larger frame size only once acknowledged)."""
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        await self._flush()
        settings = acknowledged = False
        while not (settings and acknowledged):
            data = await self._socket.receive_some(READ_SIZE)
            if not data:
                raise KubeConnectionError("the server closed the HTTP/2 connection at once")
            for event in self._h2.receive_data(data):
                settings |= isinstance(event, h2.events.RemoteSettingsChanged)
                acknowledged |= isinstance(event, h2.events.SettingsAcknowledged)
            await self._flush()

    async def run_reader(self) -> None:
        """Read frames until the connection ends, with the PING health check beside it.
        Never raises (errors go to the streams)."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._health_check)
                await self._read_frames()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._socket)
            self._fail(KubeClosedError("the HTTP/2 connection was closed"))

    async def _read_frames(self) -> None:
        try:
            while True:
                data = await self._socket.receive_some(READ_SIZE)
                self._last_read = trio.current_time()
                if not data:
                    raise KubeConnectionError("the server closed the HTTP/2 connection")
                for event in self._h2.receive_data(data):
                    self._dispatch(event)
                await self._flush()
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            h2.exceptions.ProtocolError,
            KubeConnectionError,
            OSError,
        ) as exc:
            self._fail(exc)

    async def _health_check(self) -> None:
        """Like client-go's HTTP/2 health check: after READ_IDLE seconds without a frame,
        PING; no answer within PING_TIMEOUT means the connection is dead (a silent network
        or a vanished peer would otherwise hold every watch on it forever), so close it."""
        while self.error is None:
            idle = trio.current_time() - self._last_read
            if idle < READ_IDLE:
                await trio.sleep(READ_IDLE - idle)
                continue
            self._ping_answered = trio.Event()
            try:
                self._h2.ping(b"kubesvc!")
                await self._flush()
            except (
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                h2.exceptions.ProtocolError,
            ):
                return  # the reader sees the failure too
            with trio.move_on_after(PING_TIMEOUT):
                await self._ping_answered.wait()
                continue
            self._fail(
                KubeConnectionError(
                    f"no answer to an HTTP/2 PING within {PING_TIMEOUT:.0f} s: "
                    "the connection is dead"
                )
            )
            await trio.aclose_forcefully(self._socket)  # ends the reader
            return

    def _fail(self, exc: Exception) -> None:
        if self.error is None:
            if not isinstance(exc, KubeClosedError):
                log.info("HTTP/2 connection to %s failed: %r", self._authority.decode(), exc)
            self.error = exc
        for state in self._streams.values():
            if state.error is None and not state.ended:
                state.error = exc
            state.wake()

    def _dispatch(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            state = self._streams.get(event.stream_id)
            if state is not None:
                headers = [(bytes(k), bytes(v)) for k, v in event.headers or []]
                for key, value in headers:
                    if key == b":status":
                        state.status_code = int(value)
                fields = [(k, v) for k, v in headers if not k.startswith(b":")]
                state.headers = httpx.Headers(fields)
                state.wake()
        elif isinstance(event, h2.events.DataReceived):
            length = event.flow_controlled_length or 0
            state = self._streams.get(event.stream_id or 0)
            if state is None:  # a stream we dropped: give the connection credit back now
                self._h2.acknowledge_received_data(length, event.stream_id or 0)
            else:
                state.chunks.append((event.data or b"", length))
                state.wake()
        elif isinstance(event, h2.events.StreamEnded):
            state = self._streams.get(event.stream_id or 0)
            if state is not None:
                state.ended = True
                state.wake()
        elif isinstance(event, h2.events.StreamReset):
            state = self._streams.get(event.stream_id or 0)
            if state is not None:
                state.error = KubeConnectionError(
                    f"the server reset the stream (HTTP/2 error {event.error_code!r})"
                )
                state.wake()
        elif isinstance(event, h2.events.PingAckReceived):
            self._ping_answered.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True  # GOAWAY: no new streams; streams above last_stream_id are lost
            last = event.last_stream_id or 0
            for stream_id, state in self._streams.items():
                if stream_id > last and not state.ended:
                    state.error = KubeConnectionError("the server sent GOAWAY")
                    state.wake()

    def begin(self, path: str, headers: Mapping[str, str]) -> StreamState:
        """Queue a GET on a slot already reserved; the caller must ``close_stream`` the
        returned state (or, if this raises, the slot is released here)."""
        try:
            if self.error is not None or self.closed:
                raise KubeConnectionError(f"the HTTP/2 connection is gone: {self.error}")
            stream_id = self._h2.get_next_available_stream_id()
            request_headers = [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", self._authority),
                (b":path", path.encode()),
            ] + [(k.lower().encode(), v.encode()) for k, v in headers.items()]
            self._h2.send_headers(stream_id, request_headers, end_stream=True)
        except BaseException:
            self.reserved -= 1
            raise
        state = StreamState(stream_id)
        self._streams[stream_id] = state
        return state

    async def wait_response(self, state: StreamState) -> None:
        """Send what is queued and wait for the response headers. Raises KubeConnectionError."""
        try:
            await self._flush()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise KubeConnectionError(f"cannot send on the HTTP/2 connection: {exc!r}") from exc
        while state.headers is None and state.error is None:
            await state.wait()
        if state.error is not None:
            raise _stream_error(state.error)

    async def receive_some(self, state: StreamState) -> bytes:
        while not state.chunks and not state.ended and state.error is None:
            await state.wait()
        if state.chunks:
            data = b"".join(chunk for chunk, _ in state.chunks)
            credit = sum(length for _, length in state.chunks)
            state.chunks.clear()
            self._h2.acknowledge_received_data(credit, state.stream_id)
            await self._flush()
            return data
        if state.error is not None:
            raise _stream_error(state.error)
        return b""

    async def close_stream(self, state: StreamState) -> None:
        """Forget a stream: reset it if unfinished, give back the credit it held."""
        self._streams.pop(state.stream_id, None)
        self.reserved -= 1
        credit = sum(length for _, length in state.chunks)
        state.chunks.clear()
        if self.error is not None:
            return
        try:
            if credit:
                self._h2.acknowledge_received_data(credit, state.stream_id)
            if not state.ended and state.error is None:
                self._h2.reset_stream(state.stream_id, h2.errors.ErrorCodes.CANCEL)
            await self._flush()
        except (h2.exceptions.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the connection is going away; the reader reports it

    async def aclose(self) -> None:
        """Close the connection; its open streams get KubeClosedError."""
        self.closed = True
        self._fail(KubeClosedError("the client was closed"))
        await trio.aclose_forcefully(self._socket)


class H2Pool:
    """HTTP/2 connections to one server for watches; opens one more when all are full.

    ``acquire`` returns None when the server does not speak HTTP/2 (ALPN chose HTTP/1.1);
    from then on ``unsupported`` is true and the caller uses HTTP/1.1.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        server_hostname: str,
        nursery: trio.Nursery,
    ) -> None:
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._ssl.set_alpn_protocols(["h2", "http/1.1"])
        self._server_hostname = server_hostname
        self._nursery = nursery
        self._connections: list[H2Connection] = []
        self._connect_lock = trio.Lock()
        self.unsupported = False

    @property
    def connections(self) -> int:
        return len(self._connections)

    def _pick(self) -> H2Connection | None:
        self._connections = [c for c in self._connections if c.error is None]
        for connection in self._connections:
            if connection.available():
                connection.reserved += 1
                return connection
        return None

    async def acquire(self) -> H2Connection | None:
        """A connection with a free stream slot (reserved for the caller), or None."""
        connection = self._pick()
        if connection is not None:
            return connection
        async with self._connect_lock:
            connection = self._pick()
            if connection is not None or self.unsupported:
                return connection
            authority = f"{self._host}:{self._port}"
            if ":" in self._host:
                authority = f"[{self._host}]:{self._port}"
            tcp = await trio.open_tcp_stream(self._host, self._port)
            stream = trio.SSLStream(tcp, self._ssl, server_hostname=self._server_hostname)
            try:
                await stream.do_handshake()
                if stream.selected_alpn_protocol() != "h2":
                    self.unsupported = True
                    await trio.aclose_forcefully(stream)
                    return None
                connection = H2Connection(stream, authority)
                await connection.start()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            self._nursery.start_soon(connection.run_reader)
            self._connections.append(connection)
            connection.reserved += 1
            return connection

    async def aclose(self) -> None:
        for connection in self._connections:
            await connection.aclose()
        self._connections.clear()
