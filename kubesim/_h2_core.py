"""A sans-I/O HTTP/2 server connection (RFC 9113) for kubesim's HTTPS listener.

Why not Hypercorn's HTTP/2 (the h2 library under an ASGI stream layer): under bench_ops every
deploy is two small requests to kubesim over HTTPS, and py-spy put ~57 % of the bench
process's CPU in Hypercorn, h2, hyperframe and hpack (h2's state machine makes an event object
per frame and validates every header both ways; Hypercorn moves each answer through a stream
buffer, a send task and a writer). kubesim shares the benchmark's two cores with the agent and
the server it stands in for the API server of, so its cost is theirs to lose.

Theory of operation. Bytes read from the client go into :meth:`receive_data`, which parses every
whole frame: a request's head (HEADERS + CONTINUATION, decoded by the hpack package) opens a
:class:`Stream` and is reported once; DATA lands in the stream's ``body``; SETTINGS and PING are
answered; WINDOW_UPDATE and RST_STREAM are reported so the I/O layer can wake whoever waits.
Answers are :meth:`send_headers` and :meth:`send_data`, which frames as much as the client's
flow-control windows allow and returns how much that was. Everything to write collects in one
output buffer (:meth:`data_to_send`), in the order it was produced.

Bounds. A request body is held until the handler takes it (:meth:`take_body`); credit goes back
to the client only then (WINDOW_UPDATEs once half a window is owed), so a stream holds at most
its window (``STREAM_WINDOW``) and the connection ``CONNECTION_WINDOW``: a client that sends
more is a flow-control error, not memory growth. Header blocks are capped at
``MAX_HEADER_BLOCK`` bytes and the open streams at ``MAX_STREAMS`` (more are refused with
REFUSED_STREAM, as Go's server does). A protocol violation raises :class:`H2Error` after
queueing a GOAWAY that names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from hpack import Decoder, HPACKError
from hpack.table import HeaderTable

__all__ = ["H2Error", "H2ServerCore", "Stream"]

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
_PUSH_PROMISE, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR = 0x9

_HEADER_TABLE_SIZE, _MAX_CONCURRENT, _INITIAL_WINDOW, _MAX_FRAME = 0x1, 0x3, 0x4, 0x5
_DEFAULT_WINDOW = 65_535
_MAX_WINDOW = 2**31 - 1

MAX_STREAMS: Final = 1000  # an agent keeps one watch per kind open on one connection
MAX_FRAME_IN: Final = 2**20  # what we accept (SETTINGS_MAX_FRAME_SIZE)
STREAM_WINDOW: Final = 2**20  # request body bytes a stream may have unread
CONNECTION_WINDOW: Final = 16 * 2**20
MAX_HEADER_BLOCK: Final = 256 * 1024


class H2Error(Exception):
    """The client broke the protocol (a connection error); ``code`` is the HTTP/2 error code
    already queued in a GOAWAY."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True, eq=False)
class Stream:
    """One request. ``body`` holds DATA not yet taken; ``ended``: the client sent all of it;
    ``reset``: the client (or we) reset the stream; ``answered``: our END_STREAM is queued."""

    id: int
    headers: list[tuple[bytes, bytes]]
    send_window: int
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset: bool = False
    answered: bool = False
    owed: int = 0  # body bytes taken whose credit is not yet returned


def _head(length: int, kind: int, flags: int, stream_id: int) -> bytes:
    return length.to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big")


def _frame(kind: int, flags: int, stream_id: int, payload: bytes | memoryview = b"") -> bytes:
    return _head(len(payload), kind, flags, stream_id) + bytes(payload)


def _window_update(stream_id: int, increment: int) -> bytes:
    return _frame(_WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


class H2ServerCore:
    """One server connection's protocol state; see the module's theory of operation."""

    def __init__(self) -> None:
        self.streams: dict[int, Stream] = {}
        self._inbound = bytearray()
        self._out = bytearray()
        self._preface_seen = False
        self._decoder = Decoder()
        self._decoder.max_header_list_size = MAX_HEADER_BLOCK
        self._block: bytearray | None = None  # a header block awaiting CONTINUATION
        self._block_stream = 0
        self._block_ends = False
        self._last_id = 0
        self._send_window = _DEFAULT_WINDOW  # the client's connection window for our DATA
        self._peer_initial = _DEFAULT_WINDOW
        self._peer_max_frame = 16_384
        self._recv_window = CONNECTION_WINDOW
        self._recv_owed = 0
        self._goaway_received = False
        self._table_size_update = False  # the client set its table size: say ours is 0
        self._reset_here = False  # receive_data reset a stream itself
        settings = b"".join(
            key.to_bytes(2, "big") + value.to_bytes(4, "big")
            for key, value in (
                (_MAX_CONCURRENT, MAX_STREAMS),
                (_INITIAL_WINDOW, STREAM_WINDOW),
                (_MAX_FRAME, MAX_FRAME_IN),
            )
        )
        self._out += _frame(_SETTINGS, 0, 0, settings)
        self._out += _window_update(0, CONNECTION_WINDOW - _DEFAULT_WINDOW)

    # -- output ----------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Everything queued for the client, in order (then nothing is queued)."""
        data = bytes(self._out)
        self._out.clear()
        return data

    @property
    def has_output(self) -> bool:
        return bool(self._out)

    @property
    def queued_bytes(self) -> int:
        return len(self._out)

    def send_headers(
        self, stream: Stream, status: int, headers: list[tuple[bytes, bytes]], end: bool
    ) -> None:
        """Queue the answer's head (``end``: there is no body). Header names must be lower
        case (kubesim's own; they are not checked)."""
        if stream.reset:
            return
        block = encode_headers(status, headers)
        if self._table_size_update:  # RFC 7541 4.2: first in the next block after a change
            block = b"\x20" + block  # a dynamic table size update to 0 (we never index)
            self._table_size_update = False
        flags = _END_HEADERS | (_END_STREAM if end else 0)
        limit = self._peer_max_frame
        if len(block) <= limit:
            self._out += _frame(_HEADERS, flags, stream.id, block)
        else:  # rare: a head larger than one frame goes on in CONTINUATIONs
            self._out += _frame(_HEADERS, flags & ~_END_HEADERS, stream.id, block[:limit])
            for offset in range(limit, len(block), limit):
                last = offset + limit >= len(block)
                chunk = block[offset : offset + limit]
                self._out += _frame(_CONTINUATION, _END_HEADERS if last else 0, stream.id, chunk)
        if end:
            self._answered(stream)

    def send_data(self, stream: Stream, data: memoryview, end: bool) -> int:
        """Queue as much of ``data`` as the windows allow, with END_STREAM after its last byte
        if ``end``; returns how many bytes were queued (the rest waits for a window update).
        A reset stream takes everything and sends nothing."""
        if stream.reset:
            return len(data)
        size = len(data)
        sent = 0
        limit = self._peer_max_frame
        while sent < size:
            room = min(self._send_window, stream.send_window, limit, size - sent)
            if room <= 0:
                return sent
            last = end and sent + room == size
            # Head, then the payload straight from the caller's buffer: one copy of the bytes.
            self._out += _head(room, _DATA, _END_STREAM if last else 0, stream.id)
            self._out += data[sent : sent + room]
            self._send_window -= room
            stream.send_window -= room
            sent += room
        if end and not stream.answered:
            if size == 0:
                self._out += _frame(_DATA, _END_STREAM, stream.id)
            self._answered(stream)
        return sent

    def reset_stream(self, stream: Stream, code: int = INTERNAL_ERROR) -> None:
        """Abandon ``stream``: RST_STREAM to the client, and it is forgotten."""
        if not stream.reset:
            self._out += _frame(_RST_STREAM, 0, stream.id, code.to_bytes(4, "big"))
            stream.reset = True
            self._reset_here = True  # (receive_data reports it: its handler must look)
        self._forget(stream)

    def take_body(self, stream: Stream) -> bytes:
        """The body bytes received and not yet taken; their flow-control credit goes back to
        the client (in WINDOW_UPDATEs, once half a window is owed)."""
        data = bytes(stream.body)
        stream.body.clear()
        taken = len(data)
        if taken:
            self._credit(taken)
            self._stream_credit(stream, taken)
        return data

    def _stream_credit(self, stream: Stream, length: int) -> None:
        if stream.ended or stream.reset:
            return  # the client sends no more on it
        stream.owed += length
        if stream.owed >= STREAM_WINDOW // 2:
            self._out += _window_update(stream.id, stream.owed)
            stream.owed = 0

    def _credit(self, length: int) -> None:
        self._recv_owed += length
        if self._recv_owed >= CONNECTION_WINDOW // 4:
            self._out += _window_update(0, self._recv_owed)
            self._recv_window += self._recv_owed
            self._recv_owed = 0

    def _answered(self, stream: Stream) -> None:
        stream.answered = True
        if stream.ended:
            self._forget(stream)

    def _forget(self, stream: Stream) -> None:
        if self.streams.pop(stream.id, None) is not None and stream.body:
            self._credit(len(stream.body))  # what the handler never took
            stream.body.clear()

    def close(self, code: int = NO_ERROR) -> None:
        """Queue a GOAWAY naming the last stream we took."""
        payload = self._last_id.to_bytes(4, "big") + code.to_bytes(4, "big")
        self._out += _frame(_GOAWAY, 0, 0, payload)

    # -- input -----------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray) -> tuple[list[Stream], bool]:
        """Parse every whole frame received so far. Returns the streams whose request head
        arrived (new requests, in order) and whether a window opened or a stream was reset
        (whoever waits to send should look again). Raises H2Error (a GOAWAY is queued)."""
        self._inbound += data
        opened: list[Stream] = []
        try:
            if not self._preface_seen:
                if len(self._inbound) < len(PREFACE):
                    if not PREFACE.startswith(bytes(self._inbound)):
                        raise H2Error("the connection did not start with the HTTP/2 preface")
                    return opened, False
                if self._inbound[: len(PREFACE)] != PREFACE:
                    raise H2Error("the connection did not start with the HTTP/2 preface")
                del self._inbound[: len(PREFACE)]
                self._preface_seen = True
            self._reset_here = False
            used, woke = self._frames(opened)
            woke = woke or self._reset_here
        except H2Error as exc:
            self.close(exc.code)
            raise
        del self._inbound[:used]
        return opened, woke

    def _frames(self, opened: list[Stream]) -> tuple[int, bool]:
        buf = self._inbound
        size = len(buf)
        pos = 0
        woke = False
        with memoryview(buf) as view:
            while size - pos >= 9:
                length = int.from_bytes(buf[pos : pos + 3], "big")
                if length > MAX_FRAME_IN:
                    raise H2Error(
                        f"a frame of {length} bytes, over {MAX_FRAME_IN}", FRAME_SIZE_ERROR
                    )
                end = pos + 9 + length
                if end > size:
                    break
                kind = buf[pos + 3]
                flags = buf[pos + 4]
                stream_id = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                if self._block is not None and kind != _CONTINUATION:
                    raise H2Error("a header block was interrupted by another frame")
                with view[pos + 9 : end] as payload:
                    if kind == _DATA:
                        self._on_data(flags, stream_id, payload)
                    elif kind == _HEADERS:
                        self._on_headers(flags, stream_id, payload, opened)
                    elif kind == _CONTINUATION:
                        self._on_continuation(flags, stream_id, payload, opened)
                    elif kind == _WINDOW_UPDATE:
                        woke = self._on_window_update(stream_id, payload) or woke
                    elif kind == _RST_STREAM:
                        woke = self._on_reset(stream_id, payload) or woke
                    elif kind == _SETTINGS:
                        woke = self._on_settings(flags, stream_id, payload) or woke
                    elif kind == _PING:
                        self._on_ping(flags, stream_id, payload)
                    elif kind == _GOAWAY:
                        self._goaway_received = True
                    elif kind == _PUSH_PROMISE:
                        raise H2Error("a client sent PUSH_PROMISE")
                    # PRIORITY and unknown frame types are ignored (section 5.5).
                pos = end
        return pos, woke

    def _on_data(self, flags: int, stream_id: int, payload: memoryview) -> None:
        length = len(payload)
        self._recv_window -= length
        if self._recv_window < 0:
            raise H2Error("the client overran the connection window", FLOW_CONTROL_ERROR)
        if stream_id == 0 or stream_id > self._last_id:
            raise H2Error(f"DATA on stream {stream_id}, which was never opened")
        stream = self.streams.get(stream_id)
        if stream is None or stream.reset or stream.ended:
            self._credit(length)  # a stream already over: its bytes are dropped
            return
        body = _unpadded(payload) if flags & _PADDED else payload
        if len(stream.body) + stream.owed + length > STREAM_WINDOW:
            raise H2Error(f"the client overran stream {stream_id}'s window", FLOW_CONTROL_ERROR)
        stream.body += body
        if flags & _END_STREAM:
            self._end(stream)
        if length != len(body):  # padding is flow-controlled but never read: credit it now
            self._credit(length - len(body))
            self._stream_credit(stream, length - len(body))

    def _on_headers(
        self, flags: int, stream_id: int, payload: memoryview, opened: list[Stream]
    ) -> None:
        if stream_id == 0 or stream_id % 2 == 0:
            raise H2Error(f"HEADERS on stream {stream_id}, not a client stream")
        block = _unpadded(payload) if flags & _PADDED else payload
        if flags & _PRIORITY_FLAG:
            block = block[5:]
        self._block = bytearray(block)
        self._block_stream = stream_id
        self._block_ends = bool(flags & _END_STREAM)
        if flags & _END_HEADERS:
            self._header_block_done(opened)

    def _on_continuation(
        self, flags: int, stream_id: int, payload: memoryview, opened: list[Stream]
    ) -> None:
        if self._block is None or stream_id != self._block_stream:
            raise H2Error("CONTINUATION without a header block to continue")
        self._block += payload
        if len(self._block) > MAX_HEADER_BLOCK:
            raise H2Error(f"a header block over {MAX_HEADER_BLOCK} bytes", COMPRESSION_ERROR)
        if flags & _END_HEADERS:
            self._header_block_done(opened)

    def _header_block_done(self, opened: list[Stream]) -> None:
        block, stream_id = self._block, self._block_stream
        self._block = None
        assert block is not None
        try:
            headers = self._decoder.decode(bytes(block), raw=True)
        except HPACKError as exc:
            raise H2Error(f"undecodable header block: {exc}", COMPRESSION_ERROR) from exc
        if stream_id <= self._last_id:
            stream = self.streams.get(stream_id)
            if stream is None:
                return  # a stream we reset or refused: what was in flight is ignored (5.1)
            if stream.ended:
                self.reset_stream(stream, STREAM_CLOSED)  # HEADERS after the request's end
            elif not self._block_ends:
                raise H2Error(f"a second HEADERS on stream {stream_id} that is not trailers")
            else:
                self._end(stream)  # trailers: the request's end
            return
        self._last_id = stream_id
        if len(self.streams) >= MAX_STREAMS or self._goaway_received:
            self._out += _frame(_RST_STREAM, 0, stream_id, REFUSED_STREAM.to_bytes(4, "big"))
            return
        stream = Stream(stream_id, [(bytes(n), bytes(v)) for n, v in headers], self._peer_initial)
        self.streams[stream_id] = stream
        if self._block_ends:
            stream.ended = True
        opened.append(stream)

    def _end(self, stream: Stream) -> None:
        stream.ended = True
        if stream.answered:
            self._forget(stream)

    def _on_window_update(self, stream_id: int, payload: memoryview) -> bool:
        if len(payload) != 4:
            raise H2Error("a WINDOW_UPDATE that is not 4 bytes", FRAME_SIZE_ERROR)
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if increment == 0:
            if stream_id == 0:
                raise H2Error("a WINDOW_UPDATE of 0 for the connection")
            stream = self.streams.get(stream_id)
            if stream is not None:
                self.reset_stream(stream, PROTOCOL_ERROR)
            return stream is not None
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise H2Error("the connection window grew past 2^31-1", FLOW_CONTROL_ERROR)
            return True
        stream = self.streams.get(stream_id)
        if stream is None:
            return False
        stream.send_window += increment
        if stream.send_window > _MAX_WINDOW:  # a stream error: that stream only
            self.reset_stream(stream, FLOW_CONTROL_ERROR)
        return True

    def _on_reset(self, stream_id: int, payload: memoryview) -> bool:
        if stream_id == 0 or len(payload) != 4:
            raise H2Error("a malformed RST_STREAM")
        stream = self.streams.get(stream_id)
        if stream is None:
            return False
        stream.reset = True
        self._forget(stream)
        return True

    def _on_settings(self, flags: int, stream_id: int, payload: memoryview) -> bool:
        if stream_id != 0:
            raise H2Error("SETTINGS on a stream")
        if flags & _ACK:
            return False
        if len(payload) % 6:
            raise H2Error("SETTINGS of a length not a multiple of 6", FRAME_SIZE_ERROR)
        woke = False
        for offset in range(0, len(payload), 6):
            key = int.from_bytes(payload[offset : offset + 2], "big")
            value = int.from_bytes(payload[offset + 2 : offset + 6], "big")
            if key == _INITIAL_WINDOW:
                if value > _MAX_WINDOW:
                    raise H2Error("an initial window over 2^31-1", FLOW_CONTROL_ERROR)
                delta = value - self._peer_initial
                self._peer_initial = value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > _MAX_WINDOW:
                        raise H2Error("a stream window grew past 2^31-1", FLOW_CONTROL_ERROR)
                woke = woke or delta > 0
            elif key == _MAX_FRAME:
                if not 16_384 <= value <= 2**24 - 1:
                    raise H2Error(f"a SETTINGS_MAX_FRAME_SIZE of {value}", PROTOCOL_ERROR)
                self._peer_max_frame = value
            elif key == _HEADER_TABLE_SIZE:
                self._table_size_update = True
        self._out += _frame(_SETTINGS, _ACK, 0)
        return woke

    def _on_ping(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id != 0 or len(payload) != 8:
            raise H2Error(
                "a malformed PING", FRAME_SIZE_ERROR if stream_id == 0 else PROTOCOL_ERROR
            )
        if not flags & _ACK:
            self._out += _frame(_PING, _ACK, 0, payload)


def _unpadded(payload: memoryview) -> memoryview:
    if not payload:
        raise H2Error("a padded frame with no pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise H2Error("padding longer than its frame")
    return payload[1 : len(payload) - pad]


# -- HPACK for answers ---------------------------------------------------------------------
# Stateless: every field a literal without indexing (RFC 7541 6.2.2), its name from the static
# table where it is there, ``:status`` indexed where the static table has it. The dynamic
# table stays empty (after a client's SETTINGS_HEADER_TABLE_SIZE the next block says its size
# is 0: ``send_headers``), and each field's bytes can be cached.

_STATIC_NAMES: dict[bytes, int] = {}
for _index, (_name, _value) in enumerate(HeaderTable.STATIC_TABLE, start=1):
    _STATIC_NAMES.setdefault(_name, _index)
_STATUS_INDEXED = {
    int(value): index
    for index, (name, value) in enumerate(HeaderTable.STATIC_TABLE, start=1)
    if name == b":status"
}
_FIELD_CACHE: dict[tuple[bytes, bytes], bytes] = {}
_FIELD_CACHE_LIMIT = 1024


def _integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes((first | value,))
    out = bytearray((first | top,))
    value -= top
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(name: bytes, value: bytes) -> bytes:
    cached = _FIELD_CACHE.get((name, value))
    if cached is not None:
        return cached
    index = _STATIC_NAMES.get(name)
    head = _integer(index, 4) if index else b"\x00" + _integer(len(name), 7) + name
    encoded = head + _integer(len(value), 7) + value
    if len(_FIELD_CACHE) >= _FIELD_CACHE_LIMIT:
        _FIELD_CACHE.clear()
    _FIELD_CACHE[(name, value)] = encoded
    return encoded


def encode_headers(status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
    """An answer's header block: ``:status`` then ``headers`` (lower-case names)."""
    index = _STATUS_INDEXED.get(status)
    first = _integer(index, 7, 0x80) if index else _field(b":status", str(status).encode())
    return first + b"".join([_field(name, value) for name, value in headers])
