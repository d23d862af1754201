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
DATA frames of open streams are the hot path (an API server sends one per watch event, and
h2 spends ~15-25 us on each): the reader splits frames itself, hands a plain DATA frame of a
stream whose headers arrived straight to that stream, and returns its flow-control credit
with WINDOW_UPDATE frames of its own (h2 never sees those bytes, so its windows stay whole).
Every other frame, including a DATA frame that ends or pads its stream, goes through h2 in
order. What the fast path buffers is bounded like the rest: a stream never holds more than
its window, the connection never more than its window (else: a flow-control error).
TLS is the module's own ``_TlsStream`` (ssl.MemoryBIO): one read decrypts every whole record
received, where trio.SSLStream hands over one record (<= 16 KiB) per call, a scheduler pass each.
A connection carries at most min(server's MAX_CONCURRENT_STREAMS, MAX_STREAMS) streams; the
pool opens another when all are full. When the reader fails (reset, TLS error, GOAWAY), every
open stream of the connection gets a KubeConnectionError and the pool stops using it.
"""

from __future__ import annotations

import logging
import ssl
from collections import deque
from collections.abc import Callable, Mapping
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
    # (data, flow length counted by h2, flow length of a fast-path frame)
    chunks: deque[tuple[bytes, int, int]] = field(default_factory=deque)
    fast_buffered: int = 0  # fast-path bytes in ``chunks``
    fast_unreturned: int = 0  # fast-path bytes taken by the consumer, credit not yet sent
    ended: bool = False
    error: Exception | None = None
    # The server says it never processed the request (GOAWAY below it, REFUSED_STREAM): a
    # request of any method may be sent again on another connection.
    unprocessed: bool = False
    # Watches take DATA frames past h2 (the module docstring); a request's answer goes
    # through h2, which checks it against the answer's Content-Length.
    fast_path: bool = True
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


def _whole_frames(buf: bytearray, limit: int) -> int:
    """How many leading bytes of ``buf`` are whole frames (all of it from an oversize frame
    on, for h2 to refuse)."""
    pos = 0
    while len(buf) - pos >= 9:
        length = int.from_bytes(buf[pos : pos + 3], "big")
        if length > limit:
            return len(buf)
        if pos + 9 + length > len(buf):
            break
        pos += 9 + length
    return pos


class _TlsStream(trio.abc.AsyncResource):
    """TLS over a trio TCP stream (ssl.MemoryBIO), for the one reader of an H2Connection.

    Why not trio.SSLStream: it returns one TLS record (<= 16 KiB) per receive_some, each with
    a checkpoint (a pass through the scheduler), ~3 per 4.4 KB watch event's worth of frames.
    ``receive_some`` here decrypts every whole record read so far in one call and touches the
    network only when none is left. One task receives; sends (and TLS bytes a read produced,
    such as a TLS 1.3 KeyUpdate) go out under one lock, in the order the TLS object made them.
    TLS failures raise trio.BrokenResourceError (the cause kept), as trio.SSLStream does; an
    EOF, clean or not, reads as ``b""``.
    """

    def __init__(
        self, tcp: trio.SocketStream, context: ssl.SSLContext, server_hostname: str | None
    ) -> None:
        self._tcp = tcp
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )
        self._send_lock = trio.Lock()

    def selected_alpn_protocol(self) -> str | None:
        return self._tls.selected_alpn_protocol()

    def getpeercert(self, binary_form: bool = True) -> bytes | None:
        """The server's certificate (DER; the only form asked for here)."""
        der = self._tls.getpeercert(binary_form=True)
        return der if isinstance(der, bytes) else None

    async def do_handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLError, ssl.CertificateError) as exc:
                raise trio.BrokenResourceError(f"TLS handshake failed: {exc}") from exc
            await self._send_pending()
            data = await self._tcp.receive_some(READ_SIZE)
            if not data:
                raise trio.BrokenResourceError("the server closed the connection in the handshake")
            self._incoming.write(data)
        await self._send_pending()

    async def receive_some(self, max_bytes: int) -> bytes:
        """Up to about ``max_bytes`` of plaintext (at least one byte), ``b""`` at EOF."""
        chunks: list[bytes] = []
        await self._receive(chunks.append, max_bytes)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def receive_into(self, buffer: bytearray, max_bytes: int) -> int:
        """``receive_some``, appending to ``buffer`` (each record's plaintext is copied once,
        not joined first); returns how many bytes it added, 0 at EOF."""
        before = len(buffer)
        await self._receive(buffer.extend, max_bytes)
        return len(buffer) - before

    async def _receive(self, sink: Callable[[bytes], object], max_bytes: int) -> None:
        """Give ``sink`` the plaintext of every whole record received (up to about
        ``max_bytes``, at least one byte), reading the network only when none is left; gives
        nothing at EOF."""
        while True:
            room = max_bytes
            ended = False
            try:
                while room > 0:
                    chunk = self._tls.read(room)
                    if not chunk:  # the server's close_notify
                        ended = True
                        break
                    sink(chunk)
                    room -= len(chunk)
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                ended = True
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError(f"TLS read failed: {exc}") from exc
            if self._outgoing.pending:
                await self._send_pending()
            if room < max_bytes or ended:
                return
            data = await self._tcp.receive_some(max_bytes)
            if not data:
                self._incoming.write_eof()
            else:
                self._incoming.write(data)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._tls.write(data)
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(f"TLS write failed: {exc}") from exc
        await self._send_pending()

    async def _send_pending(self) -> None:
        async with self._send_lock:
            data = self._outgoing.read()
            if data:
                await self._tcp.send_all(data)

    async def aclose(self) -> None:
        await self._tcp.aclose()


def _window_update(stream_id: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame (RFC 9113 section 6.9)."""
    return b"\x00\x00\x04\x08\x00" + stream_id.to_bytes(4, "big") + increment.to_bytes(4, "big")


class H2Connection:
    """One HTTP/2 connection; see the module docstring. Made by :meth:`H2Pool.acquire`."""

    def __init__(self, stream: _TlsStream, authority: str) -> None:
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
        self._inbound = bytearray()  # bytes read, not yet a whole frame
        self._raw_out = bytearray()  # our own WINDOW_UPDATE frames, sent after h2's bytes
        self._fast_buffered = 0  # fast-path bytes held by all streams
        self._fast_unreturned = 0  # connection credit of fast-path bytes not yet sent
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

    def _output(self) -> bytes:
        data = self._h2.data_to_send()
        if self._raw_out:
            data += self._raw_out
            self._raw_out.clear()
        return data

    async def _flush(self) -> None:
        # Called after every read and every consumer hand-over, and usually there is nothing
        # to send: then it returns without a checkpoint (a lock acquire is one, a task switch
        # per frame). Bytes are taken from h2 only by the lock's holder, so frames go out in
        # the order h2 produced them.
        if not self._write_lock.locked():
            data = self._output()
            if not data:
                return
            self._write_lock.acquire_nowait()  # no checkpoint between taking and sending
            try:
                await self._socket.send_all(data)
            finally:
                self._write_lock.release()
            return
        async with self._write_lock:
            data = self._output()
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
            # Only whole frames go to h2 (the reader splits frames itself from here on, so h2
            # must not keep half of one).
            self._inbound += data
            whole = _whole_frames(self._inbound, self._h2.max_inbound_frame_size)
            frames = bytes(self._inbound[:whole])
            del self._inbound[:whole]
            for event in self._h2.receive_data(frames):
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
                received = await self._socket.receive_into(self._inbound, READ_SIZE)
                self._last_read = trio.current_time()
                if not received:
                    raise KubeConnectionError("the server closed the HTTP/2 connection")
                self._receive_frames()
                await self._flush()
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            h2.exceptions.ProtocolError,
            KubeConnectionError,
            OSError,
        ) as exc:
            self._fail(exc)

    def _receive_frames(self) -> None:
        """Split whole frames off the bytes read (in ``_inbound``): fast DATA to its stream,
        the rest to h2 (in order); keep an unfinished frame for the next read."""
        buf = self._inbound
        # Payloads are copied out through a view, once (a bytearray slice and bytes() of it
        # copied twice); the view goes before ``buf`` is trimmed (a live view pins its size).
        with memoryview(buf) as view:
            pos = self._split_frames(buf, view)
        del buf[:pos]

    def _split_frames(self, buf: bytearray, view: memoryview) -> int:
        """``_receive_frames``' loop; returns how many leading bytes of ``buf`` it used."""
        size = len(buf)
        pos = 0
        run = -1  # start of a run of frames for h2
        limit = self._h2.max_inbound_frame_size
        while size - pos >= 9:
            length = int.from_bytes(buf[pos : pos + 3], "big")
            if length > limit:
                run = pos if run < 0 else run
                pos = size  # h2 reports the oversize frame
                break
            end = pos + 9 + length
            if end > size:
                break
            state = None
            if buf[pos + 3] == 0 and not buf[pos + 4] & 0x09 and length:  # DATA, no END/PAD
                stream_id = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                state = self._streams.get(stream_id)
            if (
                state is None
                or state.headers is None
                or state.ended
                or state.error is not None
                or not state.fast_path
            ):
                run = pos if run < 0 else run
            else:
                if run >= 0:
                    self._to_h2(view[run:pos])
                    run = -1
                self._fast_data(state, view[pos + 9 : end].tobytes())
            pos = end
        if run >= 0:
            self._to_h2(view[run:pos])
        return pos

    def _to_h2(self, frames: memoryview) -> None:
        for event in self._h2.receive_data(frames.tobytes()):
            self._dispatch(event)

    def _fast_data(self, state: StreamState, payload: bytes) -> None:
        length = len(payload)
        state.fast_buffered += length
        self._fast_buffered += length
        if state.fast_buffered > STREAM_WINDOW or self._fast_buffered > CONNECTION_WINDOW:
            raise KubeConnectionError("the server sent more than the HTTP/2 window allows")
        state.chunks.append((payload, 0, length))
        state.wake()

    def _return_fast_credit(self, state: StreamState | None, taken: int) -> None:
        """Give back flow-control credit for fast-path bytes, in WINDOW_UPDATE frames of our
        own, once half a stream window / a quarter of the connection window is owed."""
        self._fast_buffered -= taken
        self._fast_unreturned += taken
        if state is not None:
            state.fast_buffered -= taken
            state.fast_unreturned += taken
            if state.fast_unreturned >= STREAM_WINDOW // 2:
                self._raw_out += _window_update(state.stream_id, state.fast_unreturned)
                state.fast_unreturned = 0
        if self._fast_unreturned >= CONNECTION_WINDOW // 4:
            self._raw_out += _window_update(0, self._fast_unreturned)
            self._fast_unreturned = 0

    async def _health_check(self) -> None:
        """Like client-go's HTTP/2 health check: after READ_IDLE seconds without a frame,
        PING; no answer within PING_TIMEOUT means the connection is dead (a silent network
        or a vanished peer would otherwise hold every watch on it forever), so close it."""
        while self.error is None:
            # Sleep *until* the due time, not *for* the difference: on a virtual clock
            # ``now + (READ_IDLE - idle)`` can land one rounding step short of
            # ``last_read + READ_IDLE``, and the loop then spun without time moving on.
            due = self._last_read + READ_IDLE
            if trio.current_time() < due:
                await trio.sleep_until(due)
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
                if state.fast_path and any(k == b"content-length" for k, _ in fields):
                    # A watch refused with a Status (429, 5xx, 410) has a length: h2 checks
                    # it at the end of the stream, so the body must go through h2 too, or
                    # h2 counts 0 bytes and fails the whole connection (every watch on it).
                    state.fast_path = False
                state.wake()
        elif isinstance(event, h2.events.DataReceived):
            length = event.flow_controlled_length or 0
            state = self._streams.get(event.stream_id or 0)
            if state is None:  # a stream we dropped: give the connection credit back now
                self._h2.acknowledge_received_data(length, event.stream_id or 0)
            else:
                state.chunks.append((event.data or b"", length, 0))
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
                state.unprocessed = event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
                state.wake()
        elif isinstance(event, h2.events.PingAckReceived):
            self._ping_answered.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True  # GOAWAY: no new streams; streams above last_stream_id are lost
            last = event.last_stream_id or 0
            for stream_id, state in self._streams.items():
                if stream_id > last and not state.ended:
                    state.error = KubeConnectionError("the server sent GOAWAY")
                    state.unprocessed = True
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

    def begin_request(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes | None
    ) -> StreamState | None:
        """Queue a request with an optional body on a slot already reserved, like ``begin``
        (the answer skips the watches' fast path). None when the body does not fit the peer's
        flow-control windows right now (the slot is released, nothing was queued): the
        caller sends it another way; a whole request queued at once keeps this client free
        of waits for WINDOW_UPDATE. Operations' bodies are a few KB against windows of
        64 KiB and more."""
        if not body:
            body = None
        try:
            if self.error is not None or self.closed:
                raise KubeConnectionError(f"the HTTP/2 connection is gone: {self.error}")
            if body is not None and (
                len(body) > self._h2.outbound_flow_control_window
                or len(body) > self._h2.remote_settings.initial_window_size
            ):
                self.reserved -= 1
                return None
            stream_id = self._h2.get_next_available_stream_id()
            request_headers = [
                (b":method", method.encode()),
                (b":scheme", b"https"),
                (b":authority", self._authority),
                (b":path", path.encode()),
            ] + [(k.lower().encode(), v.encode()) for k, v in headers.items()]
            self._h2.send_headers(stream_id, request_headers, end_stream=body is None)
            if body is not None:
                step = self._h2.max_outbound_frame_size
                for start in range(0, len(body), step):
                    end = start + step
                    self._h2.send_data(stream_id, body[start:end], end_stream=end >= len(body))
        except BaseException:
            self.reserved -= 1
            raise
        state = StreamState(stream_id, fast_path=False)
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
            chunks = state.chunks
            data = chunks[0][0] if len(chunks) == 1 else b"".join(c[0] for c in chunks)
            credit = sum(c[1] for c in chunks)
            fast = sum(c[2] for c in chunks)
            chunks.clear()
            if credit:
                self._h2.acknowledge_received_data(credit, state.stream_id)
            if fast:
                self._return_fast_credit(state, fast)
            await self._flush()
            return data
        if state.error is not None:
            raise _stream_error(state.error)
        return b""

    async def close_stream(self, state: StreamState) -> None:
        """Forget a stream: reset it if unfinished, give back the credit it held."""
        self._streams.pop(state.stream_id, None)
        self.reserved -= 1
        credit = sum(c[1] for c in state.chunks)
        fast = sum(c[2] for c in state.chunks)
        state.chunks.clear()
        if self.error is not None:
            return
        try:
            if fast:  # the stream goes: only the connection's credit matters
                self._return_fast_credit(None, fast)
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
            stream = _TlsStream(tcp, self._ssl, self._server_hostname)
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
