"""The agent's end of the Connect call: a trio :class:`ClientStream` over grpclib's client.

Theory of operation. :func:`open_connection` opens one HTTP/2 connection and one Connect
call on it, and owns both until its block exits. Each operation crosses into asyncio once:
``send`` encodes the message on the trio side and hands grpclib its bytes (a batch is one
crossing; so are up to 32 operation results, one ``send_message`` each on the asyncio side);
``receive`` gets a message's bytes and decodes them on the trio side. HTTP/2 credit goes back
to the server when grpclib's read consumes the data, i.e. when the trio side calls
``receive()``: backpressure reaches the socket. One task may send while another receives;
two sends (or two receives) are serialized, so their frames never interleave.

How a call ends: the first failure or end of stream seen on the asyncio side is settled once
(:meth:`ClientStream._aio_finish`) into EndOfStream (the server said OK), RemoteRefused (any
other status) or ConnectionLost, and every later operation raises it again. Cancelling a
``send`` or ``receive`` from trio resets the call (a half-done message would corrupt the
stream); later operations raise StreamClosed.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn, TypeVar

import trio
from grpclib.client import Stream as GrpcStream
from grpclib.config import Configuration
from grpclib.const import Cardinality
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.exceptions import ProtocolError as GrpcProtocolError

from .._envelope import (
    decode_ack,
    decode_server_message,
    encode_agent_message,
    encode_event_batch,
    encode_operation_result,
)
from .._errors import ConnectionLost, EndOfStream, StreamClosed, WireError
from ..messages import CONNECT_METHOD, AgentMessage, OperationResult, ServerMessage
from ._crossing import cross
from ._failures import BROKEN, CLOSED_AT_ONCE, again, closed_under_grpclib, lost, refused
from ._grpclib import Channel, connect_first
from ._loop import require_loop
from ._options import (
    DEFAULT_KEEPALIVE,
    DEFAULT_MAX_MESSAGE_SIZE,
    Keepalive,
    RawCodec,
    checked,
    configuration,
    decoded,
    offer_h2,
)

__all__ = ["ClientStream", "open_connection"]

# Cleanup after cancellation is shielded; this bounds how long it may take.
_CLEANUP_SECONDS = 5.0
_T = TypeVar("_T")


class ClientStream:
    """The agent's end of one Connect call. Made by :func:`open_connection`, which owns it."""

    def __init__(self, max_message_size: int) -> None:
        self._limit = max_message_size
        self._channel: Channel | None = None
        self._grpc: GrpcStream[bytes, bytes] | None = None
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
        await self._send([checked(encode_agent_message(message), self._limit)])

    async def send_event_batch(self, seq: int, records: bytes, count: int) -> None:
        """Send ``AgentMessage{event_batch{seq, records, count}}``, as ``send`` would, without
        building the betterproto objects (~0.1 ms each, once per batch). Raises what ``send``
        raises, and ValueError for a seq or count out of its field's range."""
        data = encode_event_batch(seq, records, count)
        if data is None:
            raise ValueError(f"EventBatch seq {seq} or count {count} is out of range")
        await self._send([checked(data, self._limit)])

    async def send_operation_results(self, results: Sequence[OperationResult]) -> None:
        """Send ``AgentMessage{operation_result}`` for each of ``results``, in order, as
        ``send`` would, with one crossing into asyncio for all of them (a crossing costs more
        than a small message) and no envelope object built. Raises what ``send`` raises;
        MessageTooLarge when any of them is too large (then none is sent)."""
        messages = [checked(encode_operation_result(result), self._limit) for result in results]
        if messages:
            await self._send(messages)

    async def _send(self, messages: Sequence[bytes]) -> None:
        async with self._send_lock:
            if self._ended and self._terminal is None:
                raise StreamClosed("cannot send after end()")
            await self._op(self._aio_send, messages)

    async def receive(self) -> ServerMessage:
        """Wait for the server's next message. Raises EndOfStream when the server ended the call
        with OK, RemoteRefused(status, message) for any other status, ConnectionLost,
        MessageTooLarge, ProtocolViolation or StreamClosed."""
        async with self._receive_lock:
            data = await self._op(self._aio_receive)
        return decoded(data, decode_server_message, self._limit)

    async def receive_ack_or_message(self) -> int | ServerMessage:
        """``receive``, except that a plain Ack comes back as its seq (an int), with no
        betterproto object built: one comes for every batch. Raises what ``receive`` raises."""
        async with self._receive_lock:
            data = await self._op(self._aio_receive)
        if len(data) <= self._limit:
            seq = decode_ack(data)
            if seq is not None:
                return seq
        return decoded(data, decode_server_message, self._limit)

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
            await cross(self._aio_teardown())
        # Past the bound the teardown may not even have begun (a process too busy to run it
        # in time: bench_agents' hosts, 250 agents losing their server at once). The
        # connection is closed here all the same: a grpclib Channel left open reports itself
        # from its __del__ through the loop's exception handler, which trio-asyncio raises
        # into the whole process (every agent in it ended on "Unclosed connection").
        self._close_channel()

    def _close_channel(self) -> None:
        """Close the connection (synchronous in grpclib; idempotent)."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    async def _op(self, fn: Callable[..., Coroutine[Any, Any, _T]], *args: Any) -> _T:
        if self._terminal is not None:
            raise again(self._terminal)
        try:
            result: _T = await cross(fn(*args))
            return result
        except trio.Cancelled:
            # A message may be half-sent or half-read: the stream cannot be used any more.
            self._terminal = StreamClosed("an operation on the stream was cancelled")
            await self.aclose()
            raise
        except WireError as exc:
            self._terminal = exc
            raise

    # ---- the asyncio side: each method below runs on the bridge's loop ----

    async def _aio_open(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        metadata: Mapping[str, str],
        config: Configuration,
    ) -> None:
        where = f"cannot open a Connect call to {host}:{port}"
        channel = self._channel = Channel(
            host, port, ssl=ssl_context, codec=RawCodec(), config=config
        )
        grpc = channel.request(
            CONNECT_METHOD, Cardinality.STREAM_STREAM, bytes, bytes, metadata=dict(metadata)
        )
        await grpc.__aenter__()
        self._grpc = grpc
        try:
            if not await connect_first(channel):
                raise ConnectionLost(f"{where}: {CLOSED_AT_ONCE}")
            # Send the headers now, so a refused connection shows at open.
            await grpc.send_request()
        except BROKEN as exc:
            raise lost(exc, where) from exc
        except AttributeError as exc:
            if not closed_under_grpclib(exc):
                raise
            raise ConnectionLost(f"{where}: {CLOSED_AT_ONCE}") from exc

    async def _aio_send(self, messages: Sequence[bytes]) -> None:
        grpc = self._grpc
        assert grpc is not None
        try:
            for message in messages:
                await grpc.send_message(message)
        except BROKEN as exc:
            await self._aio_finish(exc)
        except AttributeError as exc:
            if not closed_under_grpclib(exc):
                raise
            await self._aio_finish(ConnectionResetError("the connection closed under a send"))

    async def _aio_receive(self) -> bytes:
        assert self._grpc is not None
        try:
            data = await self._grpc.recv_message()
        except GRPCError as exc:  # a trailers-only response: refused before any message
            raise refused(exc) from exc
        except BROKEN as exc:
            await self._aio_finish(exc)
        except AttributeError as exc:
            if not closed_under_grpclib(exc):
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
        except BROKEN as exc:
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
            raise again(self._finish_error or ConnectionLost("the stream broke"))
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
            except (*BROKEN, GrpcProtocolError) as end_exc:
                exc = end_exc
        terminated = StreamTerminatedError(str(exc)) if exc is not None else None
        try:
            # With a StreamTerminatedError, grpclib raises the status the trailers carried.
            await grpc.__aexit__(type(terminated) if terminated else None, terminated, None)
        except GRPCError as status_exc:
            raise refused(status_exc) from status_exc
        except BROKEN as broken:
            raise lost(broken, "the connection broke") from broken
        if exc is not None:
            raise lost(exc, "the server or the network broke the stream") from exc
        raise EndOfStream("the server ended the call")

    async def _aio_teardown(self) -> None:
        grpc, self._grpc = self._grpc, None
        try:
            if grpc is not None:
                closed = StreamClosed("closed")
                try:
                    await grpc.__aexit__(StreamClosed, closed, None)  # resets the HTTP/2 stream
                except Exception:  # the call is being thrown away; its errors mean nothing now
                    pass
        finally:  # also when cancelled at the bound
            self._close_channel()


@asynccontextmanager
async def open_connection(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    metadata: Mapping[str, str] | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    keepalive: Keepalive | None = DEFAULT_KEEPALIVE,
) -> AsyncIterator[ClientStream]:
    """Open one Connect call over its own HTTP/2 connection; yield its :class:`ClientStream`.

    ``ssl_context`` enables TLS (add a client certificate to it for mTLS); ALPN is set to h2 on
    it. ``server_hostname`` overrides the name the server certificate must match. ``metadata``
    is sent as call headers (lower-case keys), e.g. ``{"authorization": "Bearer ..."}``.
    Raises ConnectionLost when the server cannot be reached, RuntimeError outside
    :func:`open_loop`. The call is reset and the connection closed when the block exits.
    """
    require_loop("wire.open_connection")
    offer_h2(ssl_context)
    stream = ClientStream(max_message_size)
    try:
        await cross(
            stream._aio_open(
                host, port, ssl_context, metadata or {}, configuration(keepalive, server_hostname)
            )
        )
        yield stream
    finally:
        await stream.aclose()
