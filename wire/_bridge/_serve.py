"""The server: :func:`serve` runs grpclib's server and one trio handler per Connect call.

Theory of operation. grpclib runs each call in an asyncio task (:meth:`_ConnectService._handle`),
which starts the trio handler as a task in serve()'s own nursery (so serve owns every
handler) and waits for its outcome on an asyncio future. The outcome decides how the call
ends: OK when the handler returns, the status of a :class:`Refuse` it raised,
RESOURCE_EXHAUSTED / INVALID_ARGUMENT for a client message it could not take, an RST_STREAM
when trio cancelled it, INTERNAL for a bug (which also propagates out of serve, as trio's
serve_listeners does). When the client resets the stream or the connection dies, grpclib
cancels the asyncio task; the stream is then marked lost, which wakes the handler with
ConnectionLost.

Stopping: ``stop_listening`` closes the listening socket while open calls go on (a drain);
leaving serve() cancels the handlers, lets the statuses of calls whose handlers are done go
out (up to _FINISH_SECONDS), then closes every connection.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import trio
from grpclib.config import Configuration
from grpclib.const import Cardinality
from grpclib.const import Handler as GrpcHandler
from grpclib.const import Status as GrpcStatus
from grpclib.exceptions import GRPCError
from grpclib.server import Stream as GrpcStream

from .._errors import MessageTooLarge, ProtocolViolation, RecordError, Refuse, WireError
from ..messages import CONNECT_METHOD
from ._crossing import cross
from ._grpclib import Server, close_listener
from ._loop import require_loop
from ._options import (
    DEFAULT_KEEPALIVE,
    DEFAULT_MAX_MESSAGE_SIZE,
    Keepalive,
    RawCodec,
    configuration,
    offer_h2,
)
from ._server_stream import CLEANUP_SECONDS, ServerStream

__all__ = ["CallInfo", "Handler", "serve"]

#: How long a stop waits for the statuses of calls whose handlers are done to be sent.
_FINISH_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What the server knows about a call: its metadata (``authorization`` carries the bearer
    token), the client's TLS certificate (``ssl.getpeercert()`` form, None without mTLS) and
    its address."""

    metadata: dict[str, str]
    peer_cert: dict[str, Any] | None
    peer: tuple[str, int] | None


Handler = Callable[[ServerStream, CallInfo], Awaitable[None]]


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

    def __mapping__(self) -> dict[str, GrpcHandler]:
        return {CONNECT_METHOD: GrpcHandler(self._handle, Cardinality.STREAM_STREAM, bytes, bytes)}

    async def _handle(self, grpc: GrpcStream[bytes, bytes]) -> None:  # asyncio side
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
            raise GRPCError(GrpcStatus(outcome.status.value), outcome.message)
        elif isinstance(outcome, MessageTooLarge):
            raise GRPCError(GrpcStatus.RESOURCE_EXHAUSTED, str(outcome))
        elif isinstance(outcome, ProtocolViolation | RecordError):
            raise GRPCError(GrpcStatus.INVALID_ARGUMENT, str(outcome))
        elif outcome is not None:
            raise GRPCError(GrpcStatus.INTERNAL, "internal server error")

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
            with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_SECONDS):
                await cross(stream._aio_end_call(GrpcStatus.INTERNAL, "internal server error"))
            raise
        finally:
            stream._finished = True
            if not done.done():
                done.set_result(outcome)


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
    keepalive: Keepalive | None = DEFAULT_KEEPALIVE,
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
    require_loop("wire.serve")
    offer_h2(ssl_context)
    sock = _bind(host, port)
    bound_port: int = sock.getsockname()[1]
    async with trio.open_nursery() as nursery:
        service = _ConnectService(handler, nursery, max_message_size)
        server = await cross(_aio_start(service, sock, ssl_context, configuration(keepalive)))
        try:
            task_status.started(bound_port)
            if stop_listening is not None:
                await stop_listening.wait()
                await cross(_aio_stop_listening(server))
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_SECONDS):
                await cross(_aio_stop(server, service))


async def _aio_start(
    service: _ConnectService,
    sock: socket.socket,
    ssl_context: ssl.SSLContext | None,
    config: Configuration,
) -> Server:
    server = Server([service], codec=RawCodec(), config=config)
    try:
        await server.start(sock=sock, ssl=ssl_context)
    except BaseException:
        sock.close()
        raise
    return server


async def _aio_stop_listening(server: Server) -> None:
    close_listener(server)


async def _aio_stop(server: Server, service: _ConnectService) -> None:
    if service.finishing:
        await asyncio.wait(set(service.finishing), timeout=_FINISH_SECONDS)
    server.close()
    server.close_connections()
    await server.wait_closed()
