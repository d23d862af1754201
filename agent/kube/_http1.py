"""The HTTP/1.1 transport of the Kubernetes client: plain ``http://`` servers, servers that do
not offer h2 over TLS, and http servers behind a proxy. One keep-alive pool per server.

Why not httpx: at 50 requests in flight its pool cost 4-9 ms of client CPU per request
(most of it in httpcore's pool, which scans every pooled connection, ``is_idle`` and
``has_expired``, for every request it queues or finishes: quadratic in the connections), this
pool 0.3-0.5 ms (``tests/bench/bench_kube_client.py``, BENCHMARKS.md session 7). Here idle
connections are a stack: a request pops one (or dials one, agent/kube/_dial.py: TCP, a
proxy's tunnel, TLS), writes its head and body in one ``send_all`` and reads the answer with
the sans-I/O parser of agent/kube/_http1_parse.py; the body is handed out as it arrives
(watches, streamed lists) or read whole by the caller.

A connection goes back to the pool only after a complete answer with nothing extra read and
keep-alive allowed; anything else (an error, a cancellation, ``Connection: close``, a body
left unread) closes it. A pooled connection is checked before reuse (the server may have
closed it while idle: readable means EOF or junk, so it is dropped), is dropped after
``IDLE_SECONDS`` unused, and at most ``max_idle`` wait. A connection that still breaks before
any byte of the answer raises TransportError with ``unanswered`` set: the client above sends
a safe request again, anything else is reported (it may have been processed).
"""

from __future__ import annotations

import select
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from ._dial import Dialed, Dialer
from ._http1_parse import Head, Http1Error, ResponseReader, encode_head
from ._seam import Request, TransportError

__all__ = ["Http1Exchange", "Http1Pool"]

READ_SIZE = 256 * 1024
IDLE_SECONDS = 30.0  # idle keep-alive connections older than this are closed, not reused
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(slots=True, eq=False)
class _Connection:
    dialed: Dialed
    idle_since: float = 0.0
    reused: bool = False

    def looks_alive(self) -> bool:
        """An idle connection has nothing to read; readable means the peer closed it (EOF)
        or sent something unasked for. Either way it must not carry a request."""
        sock = self.dialed.socket()
        if sock is None:
            return False
        # poll, not select: select refuses descriptors past 1024 (an agent with many
        # HTTP/1.1 watches open has that many), which would drop every kept connection.
        poller = select.poll()
        try:
            poller.register(sock.fileno(), select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        sock = self.dialed.socket()
        if sock is not None:
            sock.close()  # no await: trio allows a synchronous close of a socket


class Http1Pool:
    """Keep-alive HTTP/1.1 connections to one server; see the module docstring.

    ``host`` is the Host header; ``absolute`` the scheme and authority to put before each
    target (absolute form, for a proxy in front of a plain http server) with
    ``proxy_authorization`` sent along. The pool owns its connections: ``aclose()`` closes
    the idle ones (busy ones close when their exchange does).
    """

    def __init__(
        self,
        dialer: Dialer,
        *,
        host: str = "",
        absolute: str = "",
        proxy_authorization: str | None = None,
        max_connections: int = 1024,
        max_idle: int = 64,
    ) -> None:
        self._dialer = dialer
        self._host = host or dialer.authority
        self._absolute = absolute
        self._proxy_authorization = proxy_authorization
        self._idle: list[_Connection] = []  # a stack: the warmest connection first
        self._max_idle = max_idle
        # Exchanges open (each holds one connection); more wait for a free one.
        self._slots = trio.Semaphore(max_connections)
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def adopt(self, dialed: Dialed) -> None:
        """Keep a connection dialed elsewhere (TLS whose ALPN chose HTTP/1.1) for reuse."""
        if self._closed or len(self._idle) >= self._max_idle:
            _Connection(dialed).close()
            return
        self._idle.append(_Connection(dialed, trio.current_time()))

    def _pop_idle(self) -> _Connection | None:
        now = trio.current_time()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < IDLE_SECONDS and connection.looks_alive():
                connection.reused = True
                return connection
            connection.close()
        return None

    def encode(self, request: Request) -> bytes:
        """The bytes of ``request`` on the wire: head (and body)."""
        headers: Mapping[str, str] = request.headers
        if self._proxy_authorization is not None:
            headers = {**headers, "proxy-authorization": self._proxy_authorization}
        body = request.body
        length = len(body) if body is not None else (0 if request.method in _BODY_METHODS else None)
        head = encode_head(
            request.method, self._absolute + request.target, self._host, headers, length
        )
        return head + body if body else head

    async def open(self, request: Request) -> Http1Exchange:
        """Send ``request`` and read the response head. At most ``max_connections``
        exchanges are open; more wait here. Raises TransportError."""
        data = self.encode(request)
        try:
            self._slots.acquire_nowait()  # the usual case: no wait, no scheduler pass
        except trio.WouldBlock:
            await self._slots.acquire()
        connection: _Connection | None = None
        try:
            connection = self._pop_idle() or _Connection(await self._dialer.dial())
            reader = ResponseReader(head_request=request.method == "HEAD")
            head = await self._exchange(connection, reader, data)
        except BaseException:
            if connection is not None:
                connection.close()
            self._slots.release()
            raise
        return Http1Exchange(self, connection, reader, head)

    async def _exchange(self, connection: _Connection, reader: ResponseReader, data: bytes) -> Head:
        stream = connection.dialed.stream
        try:
            await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _unanswered(exc) from exc
        while (head := reader.head()) is None:
            try:
                chunk = await stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                if not reader.received_any:
                    raise _unanswered(exc) from exc
                raise Http1Error("head", f"ReadError: {exc}") from exc
            if not chunk:
                if not reader.received_any:
                    raise _unanswered(None)
                reader.feed_eof()
            else:
                reader.feed(chunk)
        return head

    def _release(self, connection: _Connection, reusable: bool) -> None:
        self._slots.release()
        if reusable and not self._closed and len(self._idle) < self._max_idle:
            connection.idle_since = trio.current_time()
            self._idle.append(connection)
        else:
            connection.close()


def _unanswered(cause: BaseException | None) -> Http1Error:
    detail = f": {cause}" if cause is not None and str(cause) else ""
    return Http1Error(
        "head",
        f"RemoteProtocolError: the server closed the connection without answering{detail}",
        unanswered=True,
    )


class Http1Exchange:
    """An answer being read from one pooled connection (see Exchange in agent/kube/_seam.py)."""

    http_version = "HTTP/1.1"

    def __init__(
        self, pool: Http1Pool, connection: _Connection, reader: ResponseReader, head: Head
    ) -> None:
        self._pool = pool
        self._connection = connection
        self._reader = reader
        self.status_code = head.status_code
        self.headers = head.headers
        self._open = True

    def peer_certificate(self) -> bytes | None:
        return self._connection.dialed.peer_certificate()

    async def receive_some(self) -> bytes:
        reader = self._reader
        data = reader.take()
        if data or reader.done:
            return data
        if not self._open:
            raise TransportError("the response was closed", stage="body")
        stream = self._connection.dialed.stream
        while True:
            try:
                chunk = await stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise Http1Error("body", f"ReadError: {exc}") from exc
            if chunk:
                reader.feed(chunk)
            else:
                reader.feed_eof()
            data = reader.take()
            if data or reader.done:
                return data

    async def aclose(self) -> None:
        if not self._open:
            return
        self._open = False
        reader = self._reader
        self._pool._release(
            self._connection, reader.done and reader.keep_alive and not reader.extra
        )
