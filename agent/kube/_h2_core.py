"""A sans-I/O HTTP/2 client connection (RFC 9113) for the agent's Kubernetes client.

Why not the h2 library: its connection state machine turns every frame into event objects
(~15-25 us a DATA frame, the hot path of every watch), and it treats a GOAWAY as the end of
the connection: any frame after it, such as the rest of a response the server promised to
finish, raised ``ProtocolError``, so every graceful API-server shutdown failed every watch
and request on the connection. Header compression is agent/kube/_hpack.py.

Theory of operation. Bytes read from the network go into ``inbound`` and ``process()`` parses
every whole frame: response heads and body bytes land in their :class:`Stream` (which the I/O
layer wakes), SETTINGS/PING are answered, WINDOW_UPDATEs release request bodies waiting for
flow-control window. Bytes to write collect in an output buffer (``data_to_send()``), in the
order they were produced. A request is ``start_request()``: HEADERS now, and as much of its
body as the peer's windows allow; the rest goes out as WINDOW_UPDATEs arrive (a large body
waits, it never needs another transport). Flow-control credit for a response is returned
only when its consumer takes the bytes (``consumed()``), in WINDOW_UPDATEs once half a stream
window (a quarter of the connection window) is owed: a consumer that stops reading stops its
stream at the server after ``stream_window`` bytes while the other streams go on.

GOAWAY: no new streams; streams above its last stream id were never processed (marked
``unprocessed``: safe to send again whatever the method); streams at or below it go on until
they end. A connection error (the peer broke the protocol) raises :class:`H2ProtocolError`
after queueing a GOAWAY naming it. Buffers are bounded by the windows we advertise: a peer
that sends more than a window is a flow-control error, not memory growth.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ._hpack import Decoder, HpackError, encode_field

__all__ = [
    "CANCEL",
    "NO_ERROR",
    "REFUSED_STREAM",
    "H2Core",
    "H2ProtocolError",
    "Stream",
    "error_name",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 section 6).
_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
_PUSH_PROMISE, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
# Flags.
_END_STREAM = _ACK = 0x1
_END_HEADERS = 0x4
_PADDED = 0x8
_PRIORITY_FLAG = 0x20
# Error codes (section 7).
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR = 0x9
_ERROR_NAMES = {
    0x0: "NO_ERROR",
    0x1: "PROTOCOL_ERROR",
    0x2: "INTERNAL_ERROR",
    0x3: "FLOW_CONTROL_ERROR",
    0x4: "SETTINGS_TIMEOUT",
    0x5: "STREAM_CLOSED",
    0x6: "FRAME_SIZE_ERROR",
    0x7: "REFUSED_STREAM",
    0x8: "CANCEL",
    0x9: "COMPRESSION_ERROR",
    0xA: "CONNECT_ERROR",
    0xB: "ENHANCE_YOUR_CALM",
    0xC: "INADEQUATE_SECURITY",
    0xD: "HTTP_1_1_REQUIRED",
}
# Settings (section 6.5.2).
_ENABLE_PUSH, _MAX_CONCURRENT_STREAMS = 0x2, 0x3
_INITIAL_WINDOW_SIZE, _MAX_FRAME_SIZE = 0x4, 0x5

_DEFAULT_WINDOW = 65535
_MAX_WINDOW = 2**31 - 1
_MAX_STREAM_ID = 2**31 - 1
# Sent never indexed, as h2 did: a credential must not sit in the peer's compression table.
_SENSITIVE = frozenset({b"authorization", b"proxy-authorization"})


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"error 0x{code:x}")


class H2ProtocolError(Exception):
    """The peer broke the protocol: the connection is unusable (a GOAWAY saying why is queued)."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(f"{message} (HTTP/2 {error_name(code)})")
        self.code = code


@dataclass(slots=True, eq=False)
class Stream:
    """One request and its response, as the core fills it and the I/O layer drains it."""

    stream_id: int
    method: str
    status_code: int = 0
    #: the response head's fields (names lowercase, repeats joined by ", "), once it came
    headers: dict[str, str] | None = None
    chunks: deque[bytes] = field(default_factory=deque)
    buffered: int = 0  # body bytes in ``chunks``
    received: int = 0  # body bytes received in all
    content_length: int | None = None
    ended: bool = False  # the response is complete
    #: why the stream failed (reset, GOAWAY, a length mismatch); None while it is fine
    error: str | None = None
    #: the server said it never processed the request (GOAWAY above it, REFUSED_STREAM)
    unprocessed: bool = False
    #: the connection ended under it (EOF, reset, our close), rather than a stream error
    lost: bool = False
    closed_by_us: bool = False  # ... because we closed the connection
    # outbound
    send_window: int = _DEFAULT_WINDOW
    pending: memoryview | None = None  # request body not yet sent (waits for window)
    sent_all: bool = False  # our END_STREAM went out: the request is complete
    recv_window: int = 0  # what the peer may still send on this stream
    unreturned: int = 0  # bytes taken by the consumer whose stream credit is not yet sent

    @property
    def done(self) -> bool:
        return self.ended or self.error is not None


def _frame(kind: int, flags: int, stream_id: int, payload: bytes | memoryview = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + bytes(payload)
    )


def _window_update(stream_id: int, increment: int) -> bytes:
    return b"\x00\x00\x04\x08\x00" + stream_id.to_bytes(4, "big") + increment.to_bytes(4, "big")


class H2Core:
    """One client connection's protocol state. See the module docstring.

    ``stream_window`` / ``connection_window`` are the receive windows advertised,
    ``max_frame_size`` the largest frame accepted, ``max_streams`` the most streams opened at
    once (also bounded by the server's SETTINGS_MAX_CONCURRENT_STREAMS).
    """

    def __init__(
        self,
        authority: str,
        *,
        stream_window: int = 1024 * 1024,
        connection_window: int = 16 * 1024 * 1024,
        max_frame_size: int = 64 * 1024,
        max_streams: int = 250,
    ) -> None:
        self._authority = authority.encode()
        self.stream_window = stream_window
        self.connection_window = connection_window
        self.max_frame_size = max_frame_size
        self._max_streams = max_streams
        self.inbound = bytearray()  # bytes read and not yet parsed (an unfinished frame)
        self._out = bytearray()
        self.streams: dict[int, Stream] = {}
        self._next_id = 1
        self._decoder = Decoder()  # (encoding is stateless: agent/kube/_hpack.py)
        self._block: bytearray | None = None  # a header block awaiting CONTINUATION
        self._block_stream = 0
        self._block_end_stream = False
        # The peer's settings, as RFC 9113 says they are until its SETTINGS frame comes.
        self.settings_received = False
        self.peer_max_streams = _MAX_STREAM_ID
        self._peer_initial_window = _DEFAULT_WINDOW
        self._peer_max_frame = 16384
        self._send_window = _DEFAULT_WINDOW  # connection-level, for request bodies
        self._recv_window = connection_window
        self._unreturned = 0  # connection credit owed to the peer
        self._blocked: list[Stream] = []  # streams with a body waiting for window
        self.goaway: tuple[int, int, bytes] | None = None  # (last stream id, code, debug data)
        self.pings_answered = 0
        self.error: H2ProtocolError | None = None

    # --- what the I/O layer asks ---------------------------------------------------------

    @property
    def max_streams(self) -> int:
        return min(self.peer_max_streams, self._max_streams)

    def can_open(self) -> bool:
        """Whether a new stream may start (no GOAWAY, no error, ids left)."""
        return self.goaway is None and self.error is None and self._next_id <= _MAX_STREAM_ID

    def data_to_send(self) -> bytes:
        data = bytes(self._out)
        self._out.clear()
        return data

    def has_output(self) -> bool:
        return bool(self._out)

    def initiate(self) -> None:
        """Queue the preface, our SETTINGS and the connection window's increase."""
        settings = b"".join(
            code.to_bytes(2, "big") + value.to_bytes(4, "big")
            for code, value in (
                (_ENABLE_PUSH, 0),
                (_MAX_CONCURRENT_STREAMS, self._max_streams),
                (_INITIAL_WINDOW_SIZE, self.stream_window),
                (_MAX_FRAME_SIZE, self.max_frame_size),
            )
        )
        self._out += PREFACE + _frame(_SETTINGS, 0, 0, settings)
        if self.connection_window > _DEFAULT_WINDOW:
            self._out += _window_update(0, self.connection_window - _DEFAULT_WINDOW)

    def ping(self, payload: bytes) -> None:
        self._out += _frame(_PING, 0, 0, payload[:8].ljust(8, b"\0"))

    def close(self, code: int = NO_ERROR) -> None:
        """Queue a GOAWAY: we open nothing more (the I/O layer closes the socket after)."""
        last = max(0, self._next_id - 2)
        self._out += _frame(_GOAWAY, 0, 0, last.to_bytes(4, "big") + code.to_bytes(4, "big"))

    def start_request(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
        *,
        scheme: str = "https",
    ) -> Stream:
        """Open a stream: HEADERS (and CONTINUATIONs) now, the body as the windows allow.
        The caller checked ``can_open()``."""
        stream_id = self._next_id
        self._next_id += 2
        pieces = [
            encode_field(b":method", method.encode()),
            encode_field(b":scheme", scheme.encode()),
            encode_field(b":authority", self._authority),
            encode_field(b":path", path.encode()),
        ]
        for name, value in headers:
            key = name.lower().encode()
            pieces.append(encode_field(key, value.encode(), key in _SENSITIVE))
        block = b"".join(pieces)
        stream = Stream(
            stream_id,
            method,
            send_window=self._peer_initial_window,
            recv_window=self.stream_window,
        )
        self.streams[stream_id] = stream
        flags = 0 if body else _END_STREAM
        stream.sent_all = not body
        step = self._peer_max_frame
        if len(block) <= step:
            self._out += _frame(_HEADERS, flags | _END_HEADERS, stream_id, block)
        else:
            self._out += _frame(_HEADERS, flags, stream_id, block[:step])
            for start in range(step, len(block), step):
                last = start + step >= len(block)
                piece = block[start : start + step]
                self._out += _frame(_CONTINUATION, _END_HEADERS if last else 0, stream_id, piece)
        if body:
            stream.pending = memoryview(body)
            self._send_body(stream)
            if stream.pending is not None:
                self._blocked.append(stream)
        return stream

    def consumed(self, stream: Stream, length: int) -> None:
        """The consumer took ``length`` body bytes of ``stream``: return their credit (in
        batches, see the module docstring)."""
        stream.buffered -= length
        stream.unreturned += length
        if stream.unreturned >= self.stream_window // 2 and not stream.done:
            self._out += _window_update(stream.stream_id, stream.unreturned)
            stream.recv_window += stream.unreturned
            stream.unreturned = 0
        self._return_connection_credit(length)

    def close_stream(self, stream: Stream) -> None:
        """Forget ``stream``: reset it if it is still going, give back the credit it held."""
        if self.streams.pop(stream.stream_id, None) is None:
            return
        if stream.pending is not None:
            stream.pending = None
            self._blocked = [s for s in self._blocked if s is not stream]
        held = stream.buffered
        stream.buffered = 0
        stream.chunks.clear()
        # Unfinished, or answered before we finished sending the request (a server may answer
        # early, 413): either way the server must hear that nothing more comes.
        unfinished = not stream.done or (stream.ended and not stream.sent_all)
        if unfinished and self.error is None:
            self._out += _frame(_RST_STREAM, 0, stream.stream_id, CANCEL.to_bytes(4, "big"))
        if held:
            self._return_connection_credit(held)

    def fail(self, message: str, *, ours: bool = False) -> list[Stream]:
        """The connection ended (EOF, reset, or our close when ``ours``): every unfinished
        stream fails with ``message`` (marked ``lost``); returns them."""
        failed = []
        for stream in self.streams.values():
            if not stream.done:
                stream.error = message
                stream.lost = True
                stream.closed_by_us = ours
                failed.append(stream)
        self._blocked.clear()
        return failed

    # --- parsing -------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Stream]:
        """``inbound += data; process()``."""
        self.inbound += data
        return self.process()

    def process(self) -> list[Stream]:
        """Handle every whole frame in ``inbound``; return the streams whose state changed
        (possibly repeated). Raises H2ProtocolError (a connection error)."""
        if self.error is not None:
            raise self.error
        touched: list[Stream] = []
        try:
            used = self._frames(touched)
        except H2ProtocolError as exc:
            self.error = exc
            self.close(exc.code)
            raise
        del self.inbound[:used]  # (not on an error: a traceback may still hold views of it)
        return touched

    def _frames(self, touched: list[Stream]) -> int:
        """``process``' loop; returns how many leading bytes of ``inbound`` it used."""
        buf = self.inbound
        size = len(buf)
        pos = 0
        limit = self.max_frame_size
        with memoryview(buf) as view:
            while size - pos >= 9:
                length = int.from_bytes(buf[pos : pos + 3], "big")
                if length > limit:
                    raise H2ProtocolError(
                        f"a frame of {length} bytes, over the {limit} allowed", FRAME_SIZE_ERROR
                    )
                end = pos + 9 + length
                if end > size:
                    break
                kind = buf[pos + 3]
                flags = buf[pos + 4]
                stream_id = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                if self._block is not None and kind != _CONTINUATION:
                    raise H2ProtocolError("a header block was interrupted by another frame")
                with view[pos + 9 : end] as payload:
                    if kind == _DATA:
                        self._on_data(flags, stream_id, payload, touched)
                    elif kind == _HEADERS:
                        self._on_headers(flags, stream_id, payload, touched)
                    elif kind == _CONTINUATION:
                        self._on_continuation(flags, stream_id, payload, touched)
                    elif kind == _SETTINGS:
                        self._on_settings(flags, stream_id, payload, touched)
                    elif kind == _WINDOW_UPDATE:
                        self._on_window_update(stream_id, payload, touched)
                    elif kind == _PING:
                        self._on_ping(flags, stream_id, payload)
                    elif kind == _RST_STREAM:
                        self._on_reset(stream_id, payload, touched)
                    elif kind == _GOAWAY:
                        self._on_goaway(stream_id, payload, touched)
                    elif kind == _PUSH_PROMISE:
                        raise H2ProtocolError("PUSH_PROMISE, though push is disabled")
                    # PRIORITY and unknown frame types are ignored (section 5.5).
                pos = end
        return pos

    def _known(self, stream_id: int, what: str) -> Stream | None:
        """The open stream ``stream_id``, or None for one we closed. Raises for a frame on a
        stream that was never opened."""
        stream = self.streams.get(stream_id)
        if stream is None and (stream_id == 0 or stream_id >= self._next_id):
            raise H2ProtocolError(f"{what} on stream {stream_id}, which was never opened")
        return stream

    def _on_data(
        self, flags: int, stream_id: int, payload: memoryview, touched: list[Stream]
    ) -> None:
        length = len(payload)
        self._recv_window -= length
        if self._recv_window < 0:
            raise H2ProtocolError("the server overran the connection window", FLOW_CONTROL_ERROR)
        stream = self._known(stream_id, "DATA")
        if flags & _PADDED:
            payload = self._unpad(payload)
        data = payload.tobytes()
        padding = length - len(data)
        if stream is None or stream.done:
            self._return_connection_credit(length)  # a stream we dropped: nobody reads it
            return
        stream.recv_window -= length
        if stream.recv_window < 0:
            raise H2ProtocolError(
                f"the server overran stream {stream_id}'s window", FLOW_CONTROL_ERROR
            )
        if stream.headers is None:
            self._stream_error(stream, "DATA before the response head", touched)
            return
        if padding:
            self._return_connection_credit(padding)
            stream.unreturned += padding
        if data:
            stream.chunks.append(data)
            stream.buffered += len(data)
            stream.received += len(data)
        if flags & _END_STREAM:
            self._end(stream, touched)
        touched.append(stream)

    def _unpad(self, payload: memoryview) -> memoryview:
        if not payload:
            raise H2ProtocolError("a padded frame without its pad length")
        pad = payload[0]
        if pad >= len(payload):
            raise H2ProtocolError("padding longer than the frame")
        return payload[1 : len(payload) - pad]

    def _on_headers(
        self, flags: int, stream_id: int, payload: memoryview, touched: list[Stream]
    ) -> None:
        if flags & _PADDED:
            payload = self._unpad(payload)
        if flags & _PRIORITY_FLAG:
            payload = payload[5:]
        self._known(stream_id, "HEADERS")
        self._block = bytearray(payload)
        self._block_stream = stream_id
        self._block_end_stream = bool(flags & _END_STREAM)
        if flags & _END_HEADERS:
            self._header_block_done(touched)

    def _on_continuation(
        self, flags: int, stream_id: int, payload: memoryview, touched: list[Stream]
    ) -> None:
        if self._block is None or stream_id != self._block_stream:
            raise H2ProtocolError("CONTINUATION without the HEADERS it continues")
        self._block += payload
        if len(self._block) > self._decoder.max_header_list_size * 2:
            raise H2ProtocolError("a header block too large", COMPRESSION_ERROR)
        if flags & _END_HEADERS:
            self._header_block_done(touched)

    def _header_block_done(self, touched: list[Stream]) -> None:
        block, self._block = self._block, None
        assert block is not None
        try:
            # Decoded even for a stream we dropped: the compression state is the connection's.
            fields = self._decoder.decode(bytes(block))
        except HpackError as exc:
            raise H2ProtocolError(
                f"undecodable response headers: {exc}", COMPRESSION_ERROR
            ) from exc
        stream = self.streams.get(self._block_stream)
        if stream is None or stream.done:
            return
        status = 0
        headers: dict[str, str] = {}
        for raw_name, raw_value in fields:
            name = raw_name.decode("latin-1")
            value = raw_value.decode("latin-1")
            if name == ":status":
                status = int(value) if value.isdigit() else 0
            elif not name.startswith(":"):
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if stream.headers is None:
            if 100 <= status < 200 and not self._block_end_stream:
                return  # an interim answer (100 Continue): the real one follows
            if not 200 <= status <= 599:
                self._stream_error(stream, f"a response with status {status or 'missing'}", touched)
                return
            stream.status_code = status
            stream.headers = headers
            length = headers.get("content-length", "")
            if length.isdigit():
                stream.content_length = int(length)
        elif not self._block_end_stream:
            self._stream_error(stream, "trailers that do not end the stream", touched)
            return
        if self._block_end_stream:
            self._end(stream, touched)
        touched.append(stream)

    def _end(self, stream: Stream, touched: list[Stream]) -> None:
        expected = stream.content_length
        if (
            expected is not None
            and stream.received != expected
            and stream.method != "HEAD"
            and stream.status_code not in (204, 304)
        ):
            self._stream_error(
                stream,
                f"the response body has {stream.received} bytes, its Content-Length says "
                f"{expected}",
                touched,
            )
            return
        stream.ended = True
        self._drop_pending(stream)

    def _stream_error(self, stream: Stream, message: str, touched: list[Stream]) -> None:
        """A stream error (section 5.4.2): reset the stream, tell its consumer."""
        stream.error = f"the server broke the HTTP/2 stream: {message}"
        self._drop_pending(stream)
        self._out += _frame(_RST_STREAM, 0, stream.stream_id, PROTOCOL_ERROR.to_bytes(4, "big"))
        touched.append(stream)

    def _on_settings(
        self, flags: int, stream_id: int, payload: memoryview, touched: list[Stream]
    ) -> None:
        if stream_id != 0:
            raise H2ProtocolError("SETTINGS on a stream")
        if flags & _ACK:
            return
        if len(payload) % 6:
            raise H2ProtocolError("a SETTINGS frame of a bad length", FRAME_SIZE_ERROR)
        for offset in range(0, len(payload), 6):
            code = int.from_bytes(payload[offset : offset + 2], "big")
            value = int.from_bytes(payload[offset + 2 : offset + 6], "big")
            if code == _MAX_CONCURRENT_STREAMS:
                self.peer_max_streams = value
            elif code == _INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    raise H2ProtocolError(
                        "SETTINGS_INITIAL_WINDOW_SIZE too large", FLOW_CONTROL_ERROR
                    )
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > _MAX_WINDOW:
                        raise H2ProtocolError("a stream window overflowed", FLOW_CONTROL_ERROR)
            elif code == _MAX_FRAME_SIZE:
                if not 16384 <= value <= 2**24 - 1:
                    raise H2ProtocolError(f"SETTINGS_MAX_FRAME_SIZE {value} is out of range")
                self._peer_max_frame = value
        self.settings_received = True
        self._out += _frame(_SETTINGS, _ACK, 0)
        self._unblock(touched)

    def _on_window_update(self, stream_id: int, payload: memoryview, touched: list[Stream]) -> None:
        if len(payload) != 4:
            raise H2ProtocolError("a WINDOW_UPDATE of a bad length", FRAME_SIZE_ERROR)
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise H2ProtocolError("a WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise H2ProtocolError("the connection window overflowed", FLOW_CONTROL_ERROR)
        else:
            stream = self._known(stream_id, "WINDOW_UPDATE")
            if stream is None or stream.done:
                return
            if increment == 0:
                self._stream_error(stream, "a WINDOW_UPDATE of 0", touched)
                return
            stream.send_window += increment
            if stream.send_window > _MAX_WINDOW:
                self._stream_error(stream, "its window overflowed", touched)
                return
        self._unblock(touched)

    def _on_ping(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id != 0 or len(payload) != 8:
            raise H2ProtocolError("a malformed PING", FRAME_SIZE_ERROR)
        if flags & _ACK:
            self.pings_answered += 1
        else:
            self._out += _frame(_PING, _ACK, 0, payload)

    def _on_reset(self, stream_id: int, payload: memoryview, touched: list[Stream]) -> None:
        if len(payload) != 4:
            raise H2ProtocolError("a RST_STREAM of a bad length", FRAME_SIZE_ERROR)
        stream = self._known(stream_id, "RST_STREAM")
        if stream is None or stream.done:
            return
        code = int.from_bytes(payload, "big")
        stream.error = f"the server reset the stream (HTTP/2 {error_name(code)})"
        stream.unprocessed = code == REFUSED_STREAM
        self._drop_pending(stream)
        touched.append(stream)

    def _on_goaway(self, stream_id: int, payload: memoryview, touched: list[Stream]) -> None:
        if stream_id != 0 or len(payload) < 8:
            raise H2ProtocolError("a malformed GOAWAY")
        last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        code = int.from_bytes(payload[4:8], "big")
        self.goaway = (last, code, payload[8:200].tobytes())
        for sid, stream in self.streams.items():
            if sid > last and not stream.done:
                stream.error = f"the server sent GOAWAY ({error_name(code)}) before taking it"
                stream.unprocessed = True
                self._drop_pending(stream)
                touched.append(stream)

    # --- flow control --------------------------------------------------------------------

    def _return_connection_credit(self, length: int) -> None:
        self._unreturned += length
        if self._unreturned >= self.connection_window // 4:
            self._out += _window_update(0, self._unreturned)
            self._recv_window += self._unreturned
            self._unreturned = 0

    def _send_body(self, stream: Stream) -> None:
        """Queue DATA frames of ``stream``'s pending body as far as the windows allow."""
        pending = stream.pending
        assert pending is not None
        while pending:
            room = min(stream.send_window, self._send_window, self._peer_max_frame)
            if room <= 0:
                break
            piece = pending[:room]
            pending = pending[room:]
            stream.send_window -= len(piece)
            self._send_window -= len(piece)
            self._out += _frame(_DATA, 0 if pending else _END_STREAM, stream.stream_id, piece)
        stream.pending = pending if pending else None
        stream.sent_all = stream.pending is None

    def _unblock(self, touched: list[Stream]) -> None:
        if not self._blocked:
            return
        still = []
        for stream in self._blocked:
            if stream.pending is None:
                continue
            self._send_body(stream)
            if stream.pending is not None:
                still.append(stream)
            else:
                touched.append(stream)
        self._blocked = still

    def _drop_pending(self, stream: Stream) -> None:
        if stream.pending is not None:
            stream.pending = None
            self._blocked = [s for s in self._blocked if s is not stream]


def request_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """Header fields for ``start_request`` with the connection-specific ones left out
    (section 8.2.2 forbids them in HTTP/2)."""
    return [
        (name, value)
        for name, value in headers.items()
        if name.lower() not in ("host", "connection", "keep-alive", "transfer-encoding", "upgrade")
    ]
