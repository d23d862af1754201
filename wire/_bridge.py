"""The one place where trio meets grpclib (asyncio): a trio client and a trio server for Connect.

Theory of operation. Every process runs trio; :func:`open_loop` runs an asyncio loop inside it
(trio-asyncio). grpclib runs on that loop. Trio code crosses into asyncio once per message:
``ClientStream.send`` encodes the protobuf on the trio side, checks its size, then makes one
``aio_as_trio`` call into grpclib's ``send_message``; ``receive`` makes one call that returns
the message's bytes and decodes them back on the trio side. grpclib's codec here is the
identity on bytes, so no protobuf work happens on the asyncio side (EventBatch envelopes take
the hand-written path in _envelope.py). HTTP/2 credit is given back when grpclib's
``recv_message`` consumes the data, i.e. only when the trio side calls ``receive()``:
backpressure reaches the socket. Both ends announce 1 MiB DATA frames, so a batch of events
is one frame rather than dozens (h2's cost is per frame). One call per connection.

Server calls. grpclib runs each call in an asyncio task (:meth:`_ConnectService._handle`),
which starts the trio handler as a task in :func:`serve`'s own nursery (so serve owns every
handler) and waits for it. When the peer resets the stream or the connection dies, grpclib
cancels that asyncio task; the bridge then marks the :class:`ServerStream` lost and cancels
the operation the handler is waiting on, which surfaces as :class:`ConnectionLost`.

Cancellation from trio: cancelling ``send``/``receive`` resets the gRPC stream (a half-done
message would corrupt it otherwise); the stream raises StreamClosed afterwards.

Errors from grpclib, h2, ssl and sockets are translated here into wire's tree (_errors.py).
Message size: the server reads the gRPC length prefix itself and refuses an oversize message
before reading its body. The client (facing its own server) lets grpclib read the message and
checks the size after. Private grpclib seams used (grpclib is pinned < 0.5):
``Server._protocol_factory`` / ``Channel._protocol_factory`` and ``Connection._connection``
(frame size, closing connections on shutdown), ``server.Stream._stream`` (the bounded read),
and the client ``Stream``'s send state (``_send_framed``: a message goes out already framed).
``Channel.__connect__`` connects before the first request, so that a connection the peer reset
at once is seen (``Connection.is_closing()``) before grpclib creates a stream on it; where
grpclib still reaches for a closed connection's deleted ``_transport``, the AttributeError is
read as ConnectionLost (_closed_under_grpclib).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import betterproto
import h2.exceptions
import h2.settings
import hyperframe.frame
import trio
import trio_asyncio
from grpclib.client import Channel
from grpclib.client import Stream as _GrpcClientStream
from grpclib.config import Configuration
from grpclib.const import Cardinality
from grpclib.const import Handler as _GrpcHandler
from grpclib.const import Status as _GrpcStatus
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.exceptions import ProtocolError as _GrpcProtocolError
from grpclib.protocol import H2Protocol
from grpclib.server import Server
from grpclib.server import Stream as _GrpcServerStream

from ._envelope import (
    decode_ack,
    decode_agent_message,
    decode_server_message,
    encode_agent_message,
    encode_event_batch,
    encode_operation_result,
    encode_server_message,
    grpc_framed,
)
from ._errors import (
    ConnectionLost,
    EndOfStream,
    MessageTooLarge,
    ProtocolViolation,
    RecordError,
    Refuse,
    RemoteRefused,
    Status,
    StreamClosed,
    WireError,
)
from ._malloc import tune_malloc
from .messages import CONNECT_METHOD, AgentMessage, OperationResult, ServerMessage

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "CallInfo",
    "ClientStream",
    "Handler",
    "Keepalive",
    "ServerStream",
    "open_connection",
    "open_loop",
    "serve",
]

DEFAULT_MAX_MESSAGE_SIZE = 4 * 2**20
# HTTP/2 DATA frames we accept (announced in our SETTINGS). h2 costs ~0.1-0.5 ms per frame
# here; with the default 16 KiB a 0.9 MB batch takes 55 frames, with 1 MiB it takes one.
_MAX_FRAME_SIZE = 2**20
_GRPC_PREFIX = 5  # bytes in front of every gRPC message: compressed flag, length
# Cleanup after cancellation is shielded; this bounds how long it may take.
_CLEANUP_SECONDS = 5.0
_T = TypeVar("_T")
_M = TypeVar("_M", bound=betterproto.Message)


@dataclass(frozen=True, slots=True)
class Keepalive:
    """HTTP/2 PING every ``interval`` seconds while a call is open; a peer that does not answer
    within ``timeout`` seconds is dead and the connection is closed (ConnectionLost)."""

    interval: float = 20.0
    timeout: float = 20.0


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What the server knows about a call: its metadata (``authorization`` carries the bearer
    token), the client's TLS certificate (``ssl.getpeercert()`` form, None without mTLS) and
    its address."""

    metadata: dict[str, str]
    peer_cert: dict[str, Any] | None
    peer: tuple[str, int] | None


Handler = Callable[["ServerStream", CallInfo], Awaitable[None]]


class _RawCodec(CodecBase):
    """grpclib codec that passes bytes through: protobuf work stays on the trio side."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        assert isinstance(message, bytes)
        return message

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return data


def _config(keepalive: Keepalive | None, server_hostname: str | None = None) -> Configuration:
    if keepalive is None:
        return Configuration(ssl_target_name_override=server_hostname)
    return Configuration(
        _keepalive_time=keepalive.interval,
        _keepalive_timeout=keepalive.timeout,
        # grpclib stops pinging an idle stream after 2 pings by default; a dead peer must be
        # noticed on a quiet stream too, so ping for as long as a call is open.
        _http2_max_pings_without_data=0,
        _http2_min_sent_ping_interval_without_data=keepalive.interval,
        ssl_target_name_override=server_hostname,
    )


def _checked(data: bytes, limit: int) -> bytes:
    if len(data) > limit:
        raise MessageTooLarge(len(data), limit, direction="outgoing")
    return data


def _decode(data: bytes, parse: Callable[[bytes], _M], limit: int) -> _M:
    if len(data) > limit:
        raise MessageTooLarge(len(data), limit, direction="incoming")
    return parse(data)  # raises ProtocolViolation (wire/_envelope.py)


def _lost(exc: BaseException, what: str) -> ConnectionLost:
    return ConnectionLost(f"{what}: {exc}" if str(exc) else f"{what}: {type(exc).__name__}")


def _data_frame_repr(self: hyperframe.frame.DataFrame) -> str:
    return f"data=<{len(self.data)} bytes>"


# h2 logs every received frame with an eagerly built repr(frame) (h2/connection.py,
# _receive_frame), and a DATA frame's repr copies and hex-encodes its whole payload: measured
# ~17 us per 4.4 KB event, a third of the server's cost per event. Only the repr changes here.
hyperframe.frame.DataFrame._body_repr = _data_frame_repr  # type: ignore[method-assign,assignment]


def _with_large_frames(protocol: H2Protocol) -> H2Protocol:
    """Make ``protocol`` announce _MAX_FRAME_SIZE once its connection is up."""
    connection_made = protocol.connection_made

    def made(transport: asyncio.BaseTransport) -> None:
        connection_made(transport)
        h2_connection = protocol.connection._connection
        h2_connection.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: _MAX_FRAME_SIZE})
        protocol.connection.flush()

    protocol.connection_made = made  # type: ignore[method-assign]
    return protocol


class _Channel(Channel):
    """grpclib's Channel with large HTTP/2 frames."""

    def _protocol_factory(self) -> H2Protocol:
        return _with_large_frames(super()._protocol_factory())


# Failures that mean "the peer or the network broke it" when they escape grpclib.
_BROKEN = (StreamTerminatedError, h2.exceptions.H2Error, ConnectionError, ssl.SSLError, OSError)


_CLOSED_AT_ONCE = (
    "the connection closed before the call began (the server reset it, or its first bytes "
    "were not HTTP/2)"
)


def _closed_under_grpclib(exc: AttributeError) -> bool:
    """Whether ``exc`` is grpclib 0.4 reaching for a connection that is already closed.

    grpclib's ``Connection.close()`` deletes its ``_transport``, and some paths still use
    it afterwards: creating the call's HTTP/2 stream on a connection the peer reset between
    the TCP handshake and the first request (an address that accepts and resets at once: a
    Service or load balancer whose server restarts), or giving back flow-control credit
    after the close. That AttributeError means "the connection is gone", so the bridge
    reports it as ConnectionLost. Nothing of ours has an attribute of that name on the
    asyncio side, so any other AttributeError is a bug and propagates."""
    return exc.name == "_transport"


def _require_loop(what: str) -> None:
    if trio_asyncio.current_loop.get() is None:
        raise RuntimeError(
            f"{what} needs the bridge's asyncio loop: run it inside `async with wire.open_loop()`"
            " (in this task or one of its parents)"
        )


@asynccontextmanager
async def open_loop() -> AsyncIterator[None]:
    """Run the asyncio loop the bridge needs, for the duration of the block. Open it once, at
    the process entry point (or per test). Also tunes glibc's malloc for the process (see
    _malloc.py: MiB-sized messages otherwise cost page faults on every copy)."""
    tune_malloc()
    async with trio_asyncio.open_loop():
        yield


# ---- client ----------------------------------------------------------------------------------


class ClientStream:
    """The agent's end of one Connect call. Made by :func:`open_connection`, which owns it."""

    def __init__(self, max_message_size: int) -> None:
        self._limit = max_message_size
        self._channel: Channel | None = None
        self._grpc: _GrpcClientStream[bytes, bytes] | None = None
        self._ended = False
        self._closed = False
        # Once the call is over, every later operation raises this (a copy of) again.
        self._terminal: WireError | None = None
        # One task may receive while another sends, but two sends (or two receives) must not
        # interleave their frames.
        self._receive_lock = trio.Lock()
        self._send_lock = trio.Lock()
        # _aio_finish runs once; a concurrent second caller waits for its outcome.
        self._finishing: asyncio.Event | None = None
        self._finish_error: WireError | None = None

    async def send(self, message: AgentMessage) -> None:
        """Send one message. Raises MessageTooLarge (nothing sent, the stream stays usable),
        ConnectionLost, RemoteRefused, EndOfStream or StreamClosed."""
        data = _checked(encode_agent_message(message), self._limit)
        await self._send_framed(grpc_framed(data))

    async def send_event_batch(self, seq: int, records: bytes, count: int) -> None:
        """Send ``AgentMessage{event_batch{seq, records, count}}``, as ``send`` would, without
        building the betterproto objects (~0.1 ms each, once per batch). Raises what ``send``
        raises, and ValueError for a seq or count out of its field's range."""
        framed = encode_event_batch(seq, records, count, grpc_prefix=True)
        if framed is None:
            raise ValueError(f"EventBatch seq {seq} or count {count} is out of range")
        if len(framed) - _GRPC_PREFIX > self._limit:
            raise MessageTooLarge(len(framed) - _GRPC_PREFIX, self._limit, direction="outgoing")
        await self._send_framed(framed)

    async def send_operation_results(self, results: Sequence[OperationResult]) -> None:
        """Send ``AgentMessage{operation_result}`` for each of ``results``, in order, as
        ``send`` would, in one write: one crossing into asyncio for all of them (a crossing
        costs more than a small message), with no envelope object built. Raises what ``send``
        raises; MessageTooLarge when any of them is too large (then none is sent)."""
        framed = b"".join(
            grpc_framed(_checked(encode_operation_result(result), self._limit))
            for result in results
        )
        if framed:
            await self._send_framed(framed)

    async def _send_framed(self, framed: bytes) -> None:
        async with self._send_lock:
            if self._ended and self._terminal is None:
                raise StreamClosed("cannot send after end()")
            await self._op(self._aio_send, framed)

    async def receive(self) -> ServerMessage:
        """Wait for the server's next message. Raises EndOfStream when the server ended the call
        with OK, RemoteRefused(status, message) for any other status, ConnectionLost,
        MessageTooLarge, ProtocolViolation or StreamClosed."""
        async with self._receive_lock:
            data = await self._op(self._aio_receive)
        return _decode(data, decode_server_message, self._limit)

    async def receive_ack_or_message(self) -> int | ServerMessage:
        """``receive``, except that a plain Ack comes back as its seq (an int), with no
        betterproto object built: one comes for every batch. Raises what ``receive`` raises."""
        async with self._receive_lock:
            data = await self._op(self._aio_receive)
        if len(data) <= self._limit:
            seq = decode_ack(data)
            if seq is not None:
                return seq
        return _decode(data, decode_server_message, self._limit)

    async def end(self) -> None:
        """Finish our side (half-close): the server's receive() raises EndOfStream; receiving
        what the server still sends keeps working."""
        async with self._send_lock:
            await self._op(self._aio_end)

    async def aclose(self) -> None:
        """Reset the call if it is still open and close the connection. Idempotent; shielded and
        bounded, so it is safe in a cancelled scope."""
        if self._closed:
            return
        self._closed = True
        if self._terminal is None:
            self._terminal = StreamClosed("the stream was closed by aclose()")
        with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_SECONDS):
            await trio_asyncio.aio_as_trio(self._aio_teardown)()

    async def _op(self, fn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        if self._terminal is not None:
            raise _again(self._terminal)
        try:
            result: _T = await trio_asyncio.aio_as_trio(fn)(*args)
            return result
        except trio.Cancelled:
            # A message may be half-sent or half-read: the stream cannot be used any more.
            self._terminal = StreamClosed("an operation on the stream was cancelled")
            await self.aclose()
            raise
        except WireError as exc:
            self._terminal = exc
            raise

    async def _aio_open(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        metadata: Mapping[str, str],
        config: Configuration,
    ) -> None:
        where = f"cannot open a Connect call to {host}:{port}"
        channel = self._channel = _Channel(
            host, port, ssl=ssl_context, codec=_RawCodec(), config=config
        )
        grpc = channel.request(
            CONNECT_METHOD, Cardinality.STREAM_STREAM, bytes, bytes, metadata=dict(metadata)
        )
        await grpc.__aenter__()
        self._grpc = grpc
        try:
            # Connect first, then look: the peer may have reset the connection while the
            # connect's result waited for this task to run, and grpclib's send_request would
            # create its stream on the closed connection. Once connected, send_request reaches
            # create_stream without giving the loop a turn, so nothing can close it between.
            protocol = await channel.__connect__()
            if protocol.connection.is_closing():
                raise ConnectionLost(f"{where}: {_CLOSED_AT_ONCE}")
            # Send the headers now, so a refused connection shows at open.
            await grpc.send_request()
        except _BROKEN as exc:
            raise _lost(exc, where) from exc
        except AttributeError as exc:
            if not _closed_under_grpclib(exc):
                raise
            raise ConnectionLost(f"{where}: {_CLOSED_AT_ONCE}") from exc

    async def _aio_send(self, framed: bytes) -> None:
        """Send one message, its gRPC prefix included: grpclib's ``send_message`` would copy
        a whole batch (~1 MiB) once more to put the prefix in front of it."""
        grpc = self._grpc
        assert grpc is not None
        try:
            await _send_framed(grpc, framed)
        except _BROKEN as exc:
            await self._aio_finish(exc)
        except AttributeError as exc:
            if not _closed_under_grpclib(exc):
                raise
            await self._aio_finish(ConnectionResetError("the connection closed under a send"))

    async def _aio_receive(self) -> bytes:
        assert self._grpc is not None
        try:
            data = await self._grpc.recv_message()
        except GRPCError as exc:  # a trailers-only response: refused before any message
            raise _refused(exc) from exc
        except _BROKEN as exc:
            await self._aio_finish(exc)
        except AttributeError as exc:
            if not _closed_under_grpclib(exc):
                raise
            await self._aio_finish(ConnectionResetError("the connection closed under a read"))
        if data is None:
            await self._aio_finish(None)
        assert data is not None
        return data

    async def _aio_end(self) -> None:
        assert self._grpc is not None
        if self._ended:
            return
        try:
            await self._grpc.end()
        except _BROKEN as exc:
            await self._aio_finish(exc)
        self._ended = True

    async def _aio_finish(self, exc: BaseException | None) -> NoReturn:
        """The call is over (the server ended it, or it broke): raise what it ended with.

        Runs once per call: when the connection breaks while one task sends and another
        receives, both arrive here, and grpclib must be told the call ended only once (a
        second release of the stream raised KeyError out of the bridge). The second caller
        waits for the first and raises the same outcome.
        """
        if self._finishing is not None:
            await self._finishing.wait()
            raise _again(self._finish_error or ConnectionLost("the stream broke"))
        self._finishing = asyncio.Event()
        try:
            await self._aio_finish_once(exc)
        except WireError as error:
            self._finish_error = error
            raise
        except BaseException:
            self._finish_error = ConnectionLost("the stream broke while it was being finished")
            raise
        finally:
            self._finishing.set()

    async def _aio_finish_once(self, exc: BaseException | None) -> NoReturn:
        grpc = self._grpc
        assert grpc is not None
        if exc is None and not self._ended:
            try:
                await grpc.end()  # grpclib reads the trailers only once our side has ended
                self._ended = True
            except (*_BROKEN, _GrpcProtocolError) as end_exc:
                exc = end_exc
        terminated = StreamTerminatedError(str(exc)) if exc is not None else None
        try:
            # With a StreamTerminatedError, grpclib raises the status the trailers carried.
            await grpc.__aexit__(type(terminated) if terminated else None, terminated, None)
        except GRPCError as status_exc:
            raise _refused(status_exc) from status_exc
        except _BROKEN as broken:
            raise _lost(broken, "the connection broke") from broken
        if exc is not None:
            raise _lost(exc, "the server or the network broke the stream") from exc
        raise EndOfStream("the server ended the call")

    async def _aio_teardown(self) -> None:
        grpc, self._grpc = self._grpc, None
        if grpc is not None:
            closed = StreamClosed("closed")
            try:
                await grpc.__aexit__(StreamClosed, closed, None)  # resets the HTTP/2 stream
            except Exception:  # the call is being thrown away; its errors mean nothing now
                pass
        if self._channel is not None:
            self._channel.close()
            self._channel = None


async def _send_framed(grpc: _GrpcClientStream[bytes, bytes], framed: bytes) -> None:
    """grpclib's ``Stream.send_message`` for a message already framed (its checks and its
    counters: the keepalive reads ``last_message_sent``), minus its event dispatch, which
    nothing here listens to."""
    if not grpc._send_request_done:
        await grpc.send_request()
    if grpc._end_done:
        raise _GrpcProtocolError("Stream is ended")
    with grpc._wrapper:
        await grpc._stream.send_data(framed)
        grpc._send_message_done = True
        grpc._messages_sent += 1
        connection = grpc._stream.connection
        connection.messages_sent += 1
        connection.last_message_sent = time.monotonic()


def _refused(exc: GRPCError) -> RemoteRefused:
    return RemoteRefused(Status(exc.status.value), exc.message or "")


def _again(exc: WireError) -> WireError:
    """A fresh exception equal to ``exc``, so a reraise does not grow its traceback."""
    if isinstance(exc, RemoteRefused):
        return RemoteRefused(exc.status, exc.message)
    if isinstance(exc, MessageTooLarge):
        return MessageTooLarge(exc.size, exc.limit, direction=exc.direction)
    return type(exc)(*exc.args)


@asynccontextmanager
async def open_connection(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    metadata: Mapping[str, str] | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    keepalive: Keepalive | None = Keepalive(),
) -> AsyncIterator[ClientStream]:
    """Open one Connect call over its own HTTP/2 connection; yield its :class:`ClientStream`.

    ``ssl_context`` enables TLS (add a client certificate to it for mTLS); ALPN is set to h2 on
    it. ``server_hostname`` overrides the name the server certificate must match. ``metadata``
    is sent as call headers (lower-case keys), e.g. ``{"authorization": "Bearer ..."}``.
    Raises ConnectionLost when the server cannot be reached, RuntimeError outside
    :func:`open_loop`. The call is reset and the connection closed when the block exits.
    """
    _require_loop("wire.open_connection")
    if ssl_context is not None:
        ssl_context.set_alpn_protocols(["h2"])
    stream = ClientStream(max_message_size)
    try:
        await trio_asyncio.aio_as_trio(stream._aio_open)(
            host, port, ssl_context, metadata or {}, _config(keepalive, server_hostname)
        )
        yield stream
    finally:
        await stream.aclose()


# ---- server ----------------------------------------------------------------------------------


class ServerStream:
    """The server's end of one Connect call, given to the handler. The bridge owns it."""

    def __init__(self, grpc: _GrpcServerStream[bytes, bytes], max_message_size: int) -> None:
        self._grpc = grpc
        self._limit = max_message_size
        self._lost_reason: str | None = None
        self._finished = False
        self._end_seen = False
        self._oversize: MessageTooLarge | None = None
        # One task may receive while another sends; _lose() must wake both.
        self._op_scopes: set[trio.CancelScope] = set()
        # grpclib's reads and writes of one message must not interleave with another's.
        self._receive_lock = trio.Lock()
        self._send_lock = trio.Lock()
        # Between a message's length prefix and the end of its body (see _op's cancellation).
        self._mid_message = False

    @property
    def mid_message(self) -> bool:
        """Whether a message has begun to arrive and is not whole yet. Cancelling a receive
        now resets the call; cancelling one that waits for a message's first byte does not
        (the handler may still end the call with a status of its own)."""
        return self._mid_message

    async def receive(self) -> AgentMessage:
        """Wait for the client's next message. Raises EndOfStream when the client finished its
        side, ConnectionLost when it reset the stream or the connection died, MessageTooLarge,
        ProtocolViolation, or StreamClosed after the handler's call is over."""
        if self._end_seen:
            raise EndOfStream("the client finished sending")
        if self._oversize is not None:
            raise _again(self._oversize)
        async with self._receive_lock:
            try:
                data = await self._op(self._aio_receive)
            except MessageTooLarge as exc:
                self._oversize = exc  # the rest of that message is unread: no way back
                raise
        if data is None:
            self._end_seen = True
            raise EndOfStream("the client finished sending")
        return _decode(data, decode_agent_message, self._limit)

    async def send(self, message: ServerMessage) -> None:
        """Send one message. Raises MessageTooLarge (nothing sent), ConnectionLost or
        StreamClosed."""
        data = _checked(encode_server_message(message), self._limit)
        async with self._send_lock:
            await self._op(self._grpc.send_message, data)

    async def _op(self, fn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        if self._lost_reason is not None:
            raise ConnectionLost(self._lost_reason)
        if self._finished:
            raise StreamClosed("the call is over; its stream cannot be used")
        with trio.CancelScope() as scope:
            self._op_scopes.add(scope)
            try:
                result: _T = await trio_asyncio.aio_as_trio(fn)(*args)
                return result
            except _BROKEN as exc:
                self._lost_reason = f"the client or the network broke the stream: {exc}"
                raise ConnectionLost(self._lost_reason) from exc
            except AttributeError as exc:
                if not _closed_under_grpclib(exc):
                    raise
                self._lost_reason = "the client or the network closed the connection"
                raise ConnectionLost(self._lost_reason) from exc
            except trio.Cancelled:
                idle_receive = fn == self._aio_receive and not self._mid_message
                if not scope.cancel_called and not idle_receive:
                    # The handler was cancelled: a message may be half-done, so reset the call.
                    # (A receive still waiting for a message's first byte leaves nothing half
                    # done: the handler may still end the call with its own status.)
                    self._finished = True
                    with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_SECONDS):
                        await trio_asyncio.aio_as_trio(self._aio_reset)()
                raise
            finally:
                self._op_scopes.discard(scope)
        # Only _lose() cancels this scope.
        raise ConnectionLost(self._lost_reason or "the stream was lost")

    async def _aio_receive(self) -> bytes | None:
        """grpclib's recv_message, but the gRPC length prefix is checked before the body is
        read: a client (not yet authenticated, maybe) cannot make the server buffer more than
        max_message_size. Uses grpclib's protocol stream (``Stream._stream``); connection loss
        reaches a pending read through _lose(), not through grpclib's wrapper."""
        protocol_stream = self._grpc._stream
        prefix = await protocol_stream.recv_data(5)
        if not prefix:
            return None
        self._mid_message = True
        if len(prefix) != 5 or prefix[0] != 0:
            raise ProtocolViolation("compressed or truncated gRPC message (compression is off)")
        size = int.from_bytes(prefix[1:5], "big")
        if size > self._limit:
            raise MessageTooLarge(size, self._limit, direction="incoming")
        data: bytes = await protocol_stream.recv_data(size)
        if len(data) != size:
            raise ProtocolViolation(f"gRPC message cut short: {len(data)} of {size} bytes")
        self._mid_message = False
        return data

    async def _aio_end_call(self, status: _GrpcStatus, message: str) -> None:
        try:
            await self._grpc.send_trailing_metadata(status=status, status_message=message)
        except (*_BROKEN, _GrpcProtocolError):
            pass  # the call is already over

    async def _aio_reset(self) -> None:
        try:
            await self._grpc.cancel()
        except (*_BROKEN, _GrpcProtocolError):
            pass  # already reset, or the connection is gone: either way the call is over

    def _lose(self, reason: str) -> None:
        """Called on the asyncio side when grpclib gives up on the call."""
        if self._lost_reason is None:
            self._lost_reason = reason
        for scope in self._op_scopes:
            scope.cancel()


class _HandlerCancelled:
    """Marks a handler that trio cancelled: its call is reset rather than ended with OK."""


_Outcome = BaseException | _HandlerCancelled | None


class _ConnectService:
    """grpclib's view of the service: one STREAM_STREAM method whose calls run trio handlers."""

    def __init__(self, handler: Handler, nursery: trio.Nursery, max_message_size: int) -> None:
        self._handler = handler
        self._nursery = nursery
        self._limit = max_message_size
        # Calls whose handler is done and whose status grpclib is still sending: a stop lets
        # them finish (a drained call's status must reach its client) before it closes.
        self.finishing: set[asyncio.Task[Any]] = set()

    def __mapping__(self) -> dict[str, _GrpcHandler]:
        return {CONNECT_METHOD: _GrpcHandler(self._handle, Cardinality.STREAM_STREAM, bytes, bytes)}

    async def _handle(self, grpc: _GrpcServerStream[bytes, bytes]) -> None:  # asyncio side
        peer = grpc.peer
        call = CallInfo(
            metadata={k: v for k, v in grpc.metadata.items() if isinstance(v, str)}
            if grpc.metadata is not None
            else {},
            peer_cert=peer.cert() if peer is not None else None,
            peer=peer.addr() if peer is not None else None,
        )
        stream = ServerStream(grpc, self._limit)
        done: asyncio.Future[_Outcome] = asyncio.get_running_loop().create_future()
        self._nursery.start_soon(self._run, stream, call, done)
        try:
            outcome = await asyncio.shield(done)
        except asyncio.CancelledError:
            stream._lose("the client reset the stream or the connection was lost")
            raise
        task = asyncio.current_task()
        if task is not None:
            self.finishing.add(task)
            task.add_done_callback(self.finishing.discard)
        if isinstance(outcome, _HandlerCancelled):
            await stream._aio_reset()  # RST_STREAM: the client sees ConnectionLost
        elif isinstance(outcome, Refuse):
            raise GRPCError(_GrpcStatus(outcome.status.value), outcome.message)
        elif isinstance(outcome, MessageTooLarge):
            raise GRPCError(_GrpcStatus.RESOURCE_EXHAUSTED, str(outcome))
        elif isinstance(outcome, ProtocolViolation | RecordError):
            raise GRPCError(_GrpcStatus.INVALID_ARGUMENT, str(outcome))
        elif outcome is not None:
            raise GRPCError(_GrpcStatus.INTERNAL, "internal server error")

    async def _run(
        self, stream: ServerStream, call: CallInfo, done: asyncio.Future[_Outcome]
    ) -> None:  # trio side, in serve()'s nursery
        outcome: _Outcome = _HandlerCancelled()
        try:
            await self._handler(stream, call)
            outcome = None
        except (Refuse, MessageTooLarge, ProtocolViolation, RecordError) as exc:
            outcome = exc  # the client is told why (see _handle)
        except WireError:
            outcome = None  # the call is already over (lost, ended, closed)
        except Exception as exc:
            # A bug in the handler: the call ends with INTERNAL and the error propagates out of
            # serve(), as trio's own serve_listeners does. The status is sent before raising:
            # the crash cancels serve(), which would close the connection first.
            outcome = exc
            with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_SECONDS):
                await trio_asyncio.aio_as_trio(stream._aio_end_call)(
                    _GrpcStatus.INTERNAL, "internal server error"
                )
            raise
        finally:
            stream._finished = True
            if not done.done():
                done.set_result(outcome)


class _Server(Server):
    """grpclib's Server with large HTTP/2 frames, also closing open connections when it closes
    (grpclib only cancels the calls, which would leave clients waiting on a silent connection)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()

    def _protocol_factory(self) -> H2Protocol:
        protocol = _with_large_frames(super()._protocol_factory())
        self._protocols.add(protocol)
        return protocol

    def close_connections(self) -> None:
        for protocol in list(self._protocols):
            connection = getattr(protocol, "connection", None)
            if connection is not None:
                connection.close()


#: How long a stop waits for the statuses of calls whose handlers are done to be sent.
_FINISH_SECONDS = 1.0


def _bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve(
    handler: Handler,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    keepalive: Keepalive | None = Keepalive(),
    stop_listening: trio.Event | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve Connect on ``host:port`` until cancelled; ``task_status.started(port)`` reports the
    bound port (useful with port 0).

    Each call runs ``await handler(stream, call)`` as a trio task owned by this function. The
    call ends with OK when the handler returns, with a handler's :class:`Refuse` status, with
    RESOURCE_EXHAUSTED / INVALID_ARGUMENT when the client's message was oversize / malformed
    (MessageTooLarge, ProtocolViolation, RecordError) and the handler let that error
    propagate; a cancelled handler resets the stream. Any other
    exception ends the call with INTERNAL and propagates out of serve(). ``ssl_context`` (a
    server context; set ``verify_mode = CERT_REQUIRED`` and load a CA for mTLS) enables TLS.
    On exit, listening stops, open calls are cancelled and connections are closed. When
    ``stop_listening`` is set, the listening socket closes (new connections are refused) while
    the open calls go on until they end or serve() is cancelled: a drain.
    """
    _require_loop("wire.serve")
    if ssl_context is not None:
        ssl_context.set_alpn_protocols(["h2"])
    sock = _bind(host, port)
    bound_port: int = sock.getsockname()[1]
    async with trio.open_nursery() as nursery:
        service = _ConnectService(handler, nursery, max_message_size)
        server = await trio_asyncio.aio_as_trio(_aio_start)(
            service, sock, ssl_context, _config(keepalive)
        )
        try:
            task_status.started(bound_port)
            if stop_listening is not None:
                await stop_listening.wait()
                await trio_asyncio.aio_as_trio(_aio_stop_listening)(server)
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_SECONDS):
                await trio_asyncio.aio_as_trio(_aio_stop)(server, service)


async def _aio_start(
    service: _ConnectService,
    sock: socket.socket,
    ssl_context: ssl.SSLContext | None,
    config: Configuration,
) -> _Server:
    server = _Server([service], codec=_RawCodec(), config=config)
    try:
        await server.start(sock=sock, ssl=ssl_context)
    except BaseException:
        sock.close()
        raise
    return server


async def _aio_stop_listening(server: _Server) -> None:
    listener = server._server  # asyncio's Server: closing it leaves open connections alone
    if listener is not None:
        listener.close()


async def _aio_stop(server: _Server, service: _ConnectService) -> None:
    if service.finishing:
        await asyncio.wait(set(service.finishing), timeout=_FINISH_SECONDS)
    server.close()
    server.close_connections()
    await server.wait_closed()
