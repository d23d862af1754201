"""Hypercorn's per-connection server, with HTTP/2 sends batched (kubesim only, no global patch).

Why: Hypercorn's HTTP/2 sender takes one DATA frame (16 KiB with default client settings) per
turn of its send loop, and every turn pays a buffer pop, a flush through TLS and a trip
through trio's scheduler. A watch streaming 4 KB pods spent most of its CPU there (about
16,000 events per CPU-second against 115,000 over HTTP/1.1). :class:`_BatchingH2Protocol`
sends every frame the flow-control window allows (up to ``_MAX_BATCH`` bytes) and flushes
once. Frames, windows and priorities are unchanged: only how many go out per turn.

A stream's buffer is also bounded here (:func:`_push`): Hypercorn's ``StreamBuffer.push`` lets
a writer go on whenever any pop was short, whatever is still held, so a watch whose client
reads slower than kubesim writes piled up tens of MB per stream (84 MB seen in bench_agent),
and every append then moved that whole bytearray (~2 ms per 256 KB chunk, ~19% of the bench
process's CPU).

This leans on Hypercorn internals (``TCPServer.run``, ``ProtocolWrapper``, ``H2Protocol``,
``StreamBuffer``'s bytearray and events);
pyproject pins Hypercorn below 0.20, and the HTTP/2 tests exercise this path.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import h2.exceptions
import h11
import priority
import trio
from hypercorn.events import Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.events import Body, Data
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.h2 import (
    BUFFER_HIGH_WATER,
    BUFFER_LOW_WATER,
    BufferCompleteError,
    H2Protocol,
    StreamBuffer,
)
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.typing import ConnectionState, H11SendableEvent
from hypercorn.utils import parse_socket_addr

__all__ = ["ConnectionServer"]

_MAX_BATCH = 1024 * 1024  # bytes of DATA frames per send-loop turn (fairness between streams)


async def _pop_as_frames(
    buffer: StreamBuffer, budget: int, frame_size: int, send: Callable[[bytearray], None]
) -> int:
    """``StreamBuffer.pop(budget)`` cut into frames: each frame's bytes are copied out of the
    buffer once (``pop`` copied them twice, and cutting its result into frames a third time);
    the writer is let go once what is left is below the low-water mark (:func:`_push`).
    Returns how many bytes were taken."""
    held = buffer.buffer
    length = min(len(held), budget)
    for offset in range(0, length, frame_size):
        send(held[offset : min(offset + frame_size, length)])
    del held[:length]
    if len(held) < BUFFER_LOW_WATER:
        await buffer._paused.set()
    if not held:
        await buffer._is_empty.set()
    return length


async def _push(buffer: StreamBuffer, data: bytes) -> None:
    """``StreamBuffer.push`` with a bound: the writer waits until the sender has taken the
    buffer below the low-water mark, so a stream holds less than ``BUFFER_HIGH_WATER`` plus
    one write (a watch writes up to 256 KB at a time). ``close`` empties the buffer and sets
    the event, so a writer waiting on a reset stream goes on (and its next push fails)."""
    if buffer._complete:
        raise BufferCompleteError()
    buffer.buffer.extend(data)
    await buffer._is_empty.clear()
    while len(buffer.buffer) >= BUFFER_HIGH_WATER:
        await buffer._paused.clear()
        await buffer._paused.wait()


class _RoundRobin:
    """Hypercorn's choice of the next stream to send on, without ``priority.PriorityTree``:
    the streams with something to send, in turn (clients' priority hints are ignored, as
    Go's server does by default).

    Why: the tree's ``next()`` pops every blocked stream off its heap, and pushes it back,
    until it finds one with data; an agent keeps its ~20 idle watches open on the same
    connection as its requests, so every frame sent paid for all of them. With 25 idle
    watches open, kubesim's CPU per short request doubled (1.0-1.3 -> 2.2 ms) over HTTP/2,
    and over plain HTTP/1.1 (a connection per watch) it did not. Same interface and errors
    as the tree, for the calls Hypercorn makes.
    """

    def __init__(self) -> None:
        self._streams: set[int] = set()
        self._ready: dict[int, None] = {}  # insertion-ordered: the turn order

    def _known(self, stream_id: int) -> None:
        if stream_id not in self._streams:
            raise priority.MissingStreamError(stream_id)  # type: ignore[attr-defined]

    def insert_stream(self, stream_id: int, *_: Any, **__: Any) -> None:
        if stream_id in self._streams:
            raise priority.DuplicateStreamError(stream_id)  # type: ignore[attr-defined]
        self._streams.add(stream_id)
        self._ready[stream_id] = None  # the tree's new streams start active too

    def reprioritize(self, stream_id: int, *_: Any, **__: Any) -> None:
        self._known(stream_id)

    def block(self, stream_id: int) -> None:
        self._known(stream_id)
        self._ready.pop(stream_id, None)

    def unblock(self, stream_id: int) -> None:
        self._known(stream_id)
        self._ready.setdefault(stream_id, None)

    def remove_stream(self, stream_id: int) -> None:
        self._known(stream_id)
        self._streams.discard(stream_id)
        self._ready.pop(stream_id, None)

    def __iter__(self) -> _RoundRobin:
        return self

    def __next__(self) -> int:
        if not self._ready:
            raise priority.DeadlockError("no stream has data to send")  # type: ignore[attr-defined]
        stream_id = next(iter(self._ready))
        del self._ready[stream_id]
        self._ready[stream_id] = None  # to the back of the turn
        return stream_id


class _BatchingH2Protocol(H2Protocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # kubesim's own answers need no checking: h2 validated and normalized every header
        # of every answer (send_headers of a small answer: 76-88 us with, 48-60 without, on
        # this machine). What clients send is still checked.
        self.connection.config.validate_outbound_headers = False
        self.connection.config.normalize_outbound_headers = False
        self.priority = _RoundRobin()  # type: ignore[assignment]

    async def stream_send(self, event: StreamEvent) -> None:
        if not isinstance(event, (Body, Data)):
            await super().stream_send(event)
            return
        try:  # as H2Protocol.stream_send, with the bounded push
            self.priority.unblock(event.stream_id)
            await self.has_data.set()
            await _push(self.stream_buffers[event.stream_id], event.data)
        except (
            BufferCompleteError,
            KeyError,
            priority.MissingStreamError,  # type: ignore[attr-defined]  # untyped re-export
            h2.exceptions.ProtocolError,
        ):
            return  # the connection closed while this stream was blocked on flow control

    async def _send_data(self, stream_id: int) -> None:
        try:
            window = self.connection.local_flow_control_window(stream_id)
            frame_size = self.connection.max_outbound_frame_size
            budget = max(0, min(window, _MAX_BATCH))
            if await _pop_as_frames(
                self.stream_buffers[stream_id],
                budget,
                frame_size,
                partial(self.connection.send_data, stream_id),
            ):
                await self._flush()
            else:
                self.priority.block(stream_id)
            if self.stream_buffers[stream_id].complete:
                self.connection.end_stream(stream_id)
                await self._flush()
                del self.stream_buffers[stream_id]
                self.priority.remove_stream(stream_id)
        except (h2.exceptions.StreamClosedError, KeyError, h2.exceptions.ProtocolError):
            # The stream or connection closed while waiting to send: drop what is left.
            await self.stream_buffers[stream_id].close()
            del self.stream_buffers[stream_id]
            self.priority.remove_stream(stream_id)


class _CoalescingH11Protocol(H11Protocol):
    """Hypercorn's HTTP/1.1, with a sized response's head sent in one write with its body.

    Hypercorn writes a response as three socket writes: the head at ``http.response.start``,
    the body, and the end of the message (nothing at all with a Content-Length). A small
    answer (most of kubesim's: a GET, a create, an error) thus cost two sends, each through
    a lock, a shielded cancel scope and a trio checkpoint, and reached the client as two
    segments. The head of a response with a Content-Length is held until the next event
    (its body, or the end of a body-less answer), which the app sends at once; a streamed
    (chunked) response, a watch, still gets its head at once. Empty writes are skipped."""

    _held = b""

    async def _send_h11_event(self, event: H11SendableEvent) -> None:
        try:
            data = self.connection.send(event)
        except h11.LocalProtocolError:
            if self.connection.their_state != h11.ERROR:
                raise
            data = self._held
            self._held = b""
        else:
            if type(event) is h11.Response and _sized(event):
                self._held += data
                return
            if self._held:
                data = self._held + data
                self._held = b""
        if data:
            await self.send(RawData(data=data))


def _sized(response: h11.Response) -> bool:
    return any(name == b"content-length" for name, _ in response.headers)


class _ProtocolWrapper(ProtocolWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Hypercorn picked the protocol (ALPN, upgrade); ours replace it with the same state.
        ours: dict[type, type[H11Protocol] | type[H2Protocol]] = {
            H11Protocol: _CoalescingH11Protocol,
            H2Protocol: _BatchingH2Protocol,
        }
        replacement = ours.get(type(self.protocol))
        if replacement is not None:
            self.protocol = replacement(
                self.app,
                self.config,
                self.context,
                self.task_group,
                self.state,
                self.ssl,
                self.client,
                self.server,
                self.send,
            )


class ConnectionServer(TCPServer):
    """Hypercorn's ``TCPServer`` for one accepted connection, using the batching wrapper.

    The TLS handshake is already done by the caller (kubesim's listener notes the client
    certificate first); ``do_handshake`` again is a no-op on a trio SSLStream.

    The keep-alive timeout is one task per connection whose deadline moves: Hypercorn
    cancels its idle task when a request comes and starts a new one (a trio task, its
    cancel scope and a lock) when the answer is sent, twice per request, ~6% of the CPU
    kubesim spent on a small request. kubesim's WorkerContext is never terminated (it
    has no graceful shutdown: the listener's nursery is cancelled), so the idle task
    only ever waited for the timeout; this one does the same.
    """

    _idle_scope: trio.CancelScope
    _ended = False  # run's reading ended: the idle task stops without closing
    _writer: _Writer | None = None  # HTTP/2 only: see _Writer

    def _idle_deadline(self) -> float:
        return trio.current_time() + self.config.keep_alive_timeout

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            self._idle_scope.deadline = self._idle_deadline() if event.idle else math.inf
            return
        writer = self._writer
        if writer is not None:
            if isinstance(event, RawData):
                await writer.send(event.data)
                return
            await writer.drain()  # a close comes after what was queued before it
        await super().protocol_send(event)

    async def _send_raw(self, data: bytes) -> None:
        await super().protocol_send(RawData(data=data))

    async def flushed(self) -> None:
        """Return once what the app wrote so far has been sent (HTTP/2: Hypercorn's send task
        moves it from the stream's buffer to the writer after the app's write returned)."""
        if self._writer is None:
            return
        for _ in range(10):  # bounded: a stream the client's window holds back never drains
            await trio.lowlevel.checkpoint()  # the send task runs: stream buffer -> writer
            await self._writer.drain()
            if not self._sendable():
                return

    def _sendable(self) -> bool:
        """Some HTTP/2 stream holds bytes its flow-control window would let out now."""
        protocol = getattr(self.protocol, "protocol", None)
        if not isinstance(protocol, H2Protocol):
            return False
        try:
            return any(
                buffer.buffer and protocol.connection.local_flow_control_window(stream_id) > 0
                for stream_id, buffer in protocol.stream_buffers.items()
            )
        except h2.exceptions.StreamClosedError:
            return False

    async def _idle_watch(self) -> None:
        with self._idle_scope:
            await trio.sleep_forever()
        if self._ended:  # the connection ended first (run): no close due
            return
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    async def run(self) -> None:
        try:
            try:
                with trio.fail_after(self.config.ssl_handshake_timeout):
                    await self.stream.do_handshake()
            except (trio.BrokenResourceError, trio.TooSlowError):
                return
            alpn_protocol = self.stream.selected_alpn_protocol()
            socket = self.stream.transport_stream.socket
            ssl = True
        except AttributeError:  # plain TCP
            alpn_protocol = "http/1.1"
            socket = self.stream.socket
            ssl = False
        try:
            client = parse_socket_addr(socket.family, socket.getpeername())
            server = parse_socket_addr(socket.family, socket.getsockname())
            async with TaskGroup() as task_group:
                self._task_group = task_group
                self.protocol = _ProtocolWrapper(
                    self.app,
                    self.config,
                    self.context,
                    task_group,
                    ConnectionState(self.state),
                    ssl,
                    client,
                    server,
                    self.protocol_send,
                    alpn_protocol,
                )
                self._idle_scope = trio.CancelScope(deadline=self._idle_deadline())
                task_group.spawn(self._idle_watch)
                if alpn_protocol == "h2":
                    self._writer = _Writer(self._send_raw)
                    task_group.spawn(self._writer.run)
                await self.protocol.initiate()
                try:
                    await self._read_data()
                finally:
                    # The client is gone (or we are): the idle task must not hold the
                    # connection's task group open until the keep-alive timeout.
                    self._ended = True
                    self._idle_scope.cancel()
                    if self._writer is not None:
                        self._writer.scope.cancel()
        except OSError:
            pass
        finally:
            await self._close()


_MAX_QUEUED = 256 * 1024  # bytes a sender may leave queued before it waits for the writer


class _Writer:
    """One HTTP/2 connection's sends, gathered: what every stream's task queues while the
    writer is busy (or until it next runs) goes out in one TLS record and one send.

    Why: Hypercorn flushes after every frame event (a response's HEADERS, its DATA, its
    end: three TLS writes and three send calls for one small answer), and over TLS each of
    those is a record, a lock and a pass through trio's scheduler. kubesim over HTTPS spent
    about half its CPU per request there (py-spy, bench_kube_client), the part of a deploy
    over HTTPS that plain HTTP/1.1 did not pay. Order is kept (one queue, one writer); a
    sender waits only when more than ``_MAX_QUEUED`` bytes wait (backpressure for watches).
    """

    def __init__(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        self._send = send
        self._queued = bytearray()
        self._wake = trio.Event()
        self._taken = trio.Event()  # set (and replaced) whenever the writer takes the queue
        self._busy = False
        self.scope = trio.CancelScope()

    def _took(self) -> None:
        self._taken.set()
        self._taken = trio.Event()

    async def send(self, data: bytes) -> None:
        self._queued += data
        self._wake.set()
        while len(self._queued) > _MAX_QUEUED and not self.scope.cancel_called:
            await self._taken.wait()

    async def drain(self) -> None:
        while (self._queued or self._busy) and not self.scope.cancel_called:
            await self._taken.wait()

    async def run(self) -> None:
        try:
            with self.scope:
                while True:
                    if not self._queued:
                        self._took()  # (drain() waits for an empty queue)
                        self._wake = trio.Event()
                        await self._wake.wait()
                        continue
                    data = bytes(self._queued)
                    self._queued.clear()
                    self._busy = True
                    self._took()
                    await self._send(data)
                    self._busy = False
        finally:
            self._busy = False
            self._took()
