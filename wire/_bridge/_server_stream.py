"""The server's end of one Connect call: a trio :class:`ServerStream` over grpclib's stream.

Theory of operation. The handler (trio, in serve()'s nursery) calls ``receive``/``send``;
each crosses into asyncio once. ``receive`` reads the gRPC length prefix itself and refuses a
message over the cap before reading its body (a client, maybe not yet authenticated, cannot
make the server buffer more than max_message_size), then reads exactly the body: HTTP/2
credit goes back as it is read, so a handler that does not read stops its client at the
window (backpressure reaches the socket). When grpclib gives up on the call (the client
reset it, the connection died), serve's asyncio side calls :meth:`ServerStream._lose`, which
cancels whatever the handler is waiting on: it surfaces as ConnectionLost. A handler
cancelled mid-message resets the call; one cancelled while waiting for a message's first
byte leaves the call usable, so it can still end it with a status of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import trio
from grpclib.const import Status as GrpcStatus
from grpclib.exceptions import ProtocolError as GrpcProtocolError
from grpclib.server import Stream as GrpcStream

from .._envelope import decode_agent_message, encode_server_message
from .._errors import (
    ConnectionLost,
    EndOfStream,
    MessageTooLarge,
    ProtocolViolation,
    StreamClosed,
)
from ..messages import AgentMessage, ServerMessage
from ._crossing import cross
from ._failures import BROKEN, again, closed_under_grpclib
from ._grpclib import protocol_stream
from ._options import GRPC_PREFIX, checked, decoded

__all__ = ["CLEANUP_SECONDS", "ServerStream"]

#: Cleanup after cancellation is shielded; this bounds how long it may take.
CLEANUP_SECONDS = 5.0
_T = TypeVar("_T")


class ServerStream:
    """The server's end of one Connect call, given to the handler. The bridge owns it."""

    def __init__(self, grpc: GrpcStream[bytes, bytes], max_message_size: int) -> None:
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
            raise again(self._oversize)
        async with self._receive_lock:
            try:
                data = await self._op(self._aio_receive)
            except MessageTooLarge as exc:
                self._oversize = exc  # the rest of that message is unread: no way back
                raise
        if data is None:
            self._end_seen = True
            raise EndOfStream("the client finished sending")
        return decoded(data, decode_agent_message, self._limit)

    async def send(self, message: ServerMessage) -> None:
        """Send one message. Raises MessageTooLarge (nothing sent), ConnectionLost or
        StreamClosed."""
        data = checked(encode_server_message(message), self._limit)
        async with self._send_lock:
            await self._op(self._grpc.send_message, data)

    async def _op(self, fn: Callable[..., Coroutine[Any, Any, _T]], *args: Any) -> _T:
        if self._lost_reason is not None:
            raise ConnectionLost(self._lost_reason)
        if self._finished:
            raise StreamClosed("the call is over; its stream cannot be used")
        with trio.CancelScope() as scope:
            self._op_scopes.add(scope)
            try:
                result: _T = await cross(fn(*args))
                return result
            except BROKEN as exc:
                self._lost_reason = f"the client or the network broke the stream: {exc}"
                raise ConnectionLost(self._lost_reason) from exc
            except AttributeError as exc:
                if not closed_under_grpclib(exc):
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
                    with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_SECONDS):
                        await cross(self._aio_reset())
                raise
            finally:
                self._op_scopes.discard(scope)
        # Only _lose() cancels this scope.
        raise ConnectionLost(self._lost_reason or "the stream was lost")

    # ---- the asyncio side: each method below runs on the bridge's loop ----

    async def _aio_receive(self) -> bytes | None:
        """grpclib's recv_message, but the gRPC length prefix is checked before the body is
        read. Connection loss reaches a pending read through _lose(), not through grpclib's
        wrapper."""
        stream = protocol_stream(self._grpc)
        prefix = await stream.recv_data(GRPC_PREFIX)
        if not prefix:
            return None
        self._mid_message = True
        if len(prefix) != GRPC_PREFIX or prefix[0] != 0:
            raise ProtocolViolation("compressed or truncated gRPC message (compression is off)")
        size = int.from_bytes(prefix[1:GRPC_PREFIX], "big")
        if size > self._limit:
            raise MessageTooLarge(size, self._limit, direction="incoming")
        data: bytes = await stream.recv_data(size)
        if len(data) != size:
            raise ProtocolViolation(f"gRPC message cut short: {len(data)} of {size} bytes")
        self._mid_message = False
        return data

    async def _aio_end_call(self, status: GrpcStatus, message: str) -> None:
        try:
            await self._grpc.send_trailing_metadata(status=status, status_message=message)
        except (*BROKEN, GrpcProtocolError):
            pass  # the call is already over

    async def _aio_reset(self) -> None:
        try:
            await self._grpc.cancel()
        except (*BROKEN, GrpcProtocolError):
            pass  # already reset, or the connection is gone: either way the call is over

    def _lose(self, reason: str) -> None:
        """Called on the asyncio side when grpclib gives up on the call."""
        if self._lost_reason is None:
            self._lost_reason = reason
        for scope in self._op_scopes:
            scope.cancel()
