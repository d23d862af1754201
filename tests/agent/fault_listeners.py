"""Loopback listeners that accept a connection and then fail to be a server, each in one way.

What a Service, a load balancer or a proxy does while the server behind it restarts, or what
another program on the server's port does. Each listener counts the connections it took, so a
test can wait for the agent's attempts (events, not sleeps), and closes every socket it holds
when its scope is cancelled, so that the real server can then bind the same port.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Sequence

import trio

# What an HTTP/1.1 server (or a proxy's error page) answers: not HTTP/2, not TLS. Read as an
# HTTP/2 frame header it announces a 4.7 MB frame, so h2 waits for the rest: a silent server.
HTTP1_ANSWER = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"
# Binary garbage that h2 refuses at once (a DATA frame header on stream 0).
BINARY_GARBAGE = bytes(9) + b"\x17\x03\x03 not HTTP/2"

Behaviour = Callable[[trio.socket.SocketType], Awaitable[None]]


async def reset_at_once(conn: trio.socket.SocketType) -> None:
    """Accept, then reset: SO_LINGER 0 makes close() send RST instead of FIN."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def reset_after(delays: Sequence[float]) -> Behaviour:
    """Accept, wait the next of ``delays`` (in turn), then reset. The agent's connect is
    complete before the accept; a reset a fraction of a millisecond later lands in a
    different step of its connection setup each time (the defect hid in one of them)."""
    turns = itertools.cycle(delays)

    async def reset(conn: trio.socket.SocketType) -> None:
        with conn:  # closed also when the listener closes during the wait
            await trio.sleep(next(turns))
            await reset_at_once(conn)

    return reset


async def stay_silent(conn: trio.socket.SocketType) -> None:
    """Accept, read nothing, say nothing, keep it open (until the listener closes)."""
    with conn:
        await trio.sleep_forever()


def send_garbage(answer: bytes) -> Behaviour:
    """Accept, send ``answer`` (bytes that are not what the agent expects), keep it open."""

    async def garbage(conn: trio.socket.SocketType) -> None:
        with conn:
            await conn.send(answer)
            await trio.sleep_forever()

    return garbage


def tls_with(context: ssl.SSLContext) -> Behaviour:
    """Accept, run a TLS handshake with ``context`` (a certificate the agent does not trust),
    then close: the handshake fails on the agent's side."""

    async def handshake(conn: trio.socket.SocketType) -> None:
        stream = trio.SSLStream(trio.SocketStream(conn), context, server_side=True)
        try:
            await stream.do_handshake()
            await stream.receive_some()  # the client gives up; nothing comes
        except trio.BrokenResourceError:
            pass  # the agent refused our certificate: the point of this listener
        finally:
            await trio.aclose_forcefully(stream)

    return handshake


class FaultListener:
    """Serves ``behaviour`` to every connection on a loopback port (``port``, or 0 for any)."""

    def __init__(self, behaviour: Behaviour, port: int = 0) -> None:
        self._behaviour = behaviour
        self.port = port
        self.connections = 0
        self._changed = trio.Event()

    async def wait_connections(self, count: int) -> None:
        """Return once ``count`` connections have been accepted in all."""
        while self.connections < count:
            await self._changed.wait()

    async def serve(self, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        """Listen until the reported scope is cancelled; every socket is closed on return."""
        with trio.CancelScope() as scope, trio.socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            await listener.bind(("127.0.0.1", self.port))
            listener.listen(16)
            self.port = listener.getsockname()[1]
            async with trio.open_nursery() as nursery:
                task_status.started(scope)
                while True:
                    conn, _ = await listener.accept()
                    self.connections += 1
                    self._changed.set()
                    self._changed = trio.Event()
                    nursery.start_soon(self._behaviour, conn)
