"""Hypercorn's per-connection server for kubesim's HTTP/1.1 (no global patch).

kubesim serves HTTP/1.1 (plain, or TLS without ALPN "h2") through Hypercorn with two changes:
a sized answer's head goes out in one write with its body (:class:`_CoalescingH11Protocol`),
and the keep-alive timeout is one task per connection, not one per request
(:class:`ConnectionServer`). HTTP/2 is kubesim's own (kubesim/_h2_server.py).

This leans on Hypercorn internals (``TCPServer.run``, ``ProtocolWrapper``, ``H11Protocol``);
pyproject pins Hypercorn below 0.20, and the HTTP/1.1 tests exercise this path.
"""

from __future__ import annotations

import math
from typing import Any

import h11
import trio
from hypercorn.events import Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.typing import ConnectionState, H11SendableEvent
from hypercorn.utils import parse_socket_addr

__all__ = ["ConnectionServer"]


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
        if type(self.protocol) is H11Protocol:
            self.protocol = _CoalescingH11Protocol(
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

    def _idle_deadline(self) -> float:
        return trio.current_time() + self.config.keep_alive_timeout

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            self._idle_scope.deadline = self._idle_deadline() if event.idle else math.inf
            return
        await super().protocol_send(event)

    async def flushed(self) -> None:
        """Return once what the app wrote so far has been sent: at once, since HTTP/1.1
        writes go to the socket in the app's own send."""

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
                await self.protocol.initiate()
                try:
                    await self._read_data()
                finally:
                    # The client is gone (or we are): the idle task must not hold the
                    # connection's task group open until the keep-alive timeout.
                    self._ended = True
                    self._idle_scope.cancel()
        except OSError:
            pass
        finally:
            await self._close()
