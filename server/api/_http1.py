"""A lean HTTP/1.1 server for the REST API; WebSocket upgrades go to Hypercorn.

Why. Under Orca-like load (issue 6, ``tests/bench/bench_ops.py``) Hypercorn cost ~1.5 ms of
CPU per request on this machine (h11 state machines, a task per request and one per idle
timer, a stream object, one socket write per ASGI message), more than everything the server
does for a deploy besides. Here a request costs one parse of the head, one ASGI call and,
for a response of one body message (every route but the feed), one socket write.

Theory of operation. One trio task per connection reads a request head (at most
``MAX_HEAD`` bytes, else 431), its body (Content-Length or chunked, at most ``max_body`` bytes,
else 413 and close; ``Expect: 100-continue`` answered first), runs the ASGI app, then reads the
next request (keep-alive; ``Connection: close`` or HTTP/1.0 ends it; an idle connection is
closed after ``KEEP_ALIVE_SECONDS``). Requests on one connection are answered in order. The
response head is held until the first body message, so head and body leave in one write; a
response with more than one body message and no Content-Length is sent chunked. After its
body the app's ``receive`` waits until the response is sent, then says ``http.disconnect``.
An app that fails before answering gets a 500 with an empty body and the connection closes;
a request refused here (malformed, too large, too slow) gets the API's JSON error body.
A request that asks to upgrade to WebSocket is handed, with the bytes read so far, to
Hypercorn's own connection handler, so the change feed keeps Hypercorn's WebSocket protocol.

Drain. When the server's ``drain`` event is set, the listeners close (new connections are
refused), a connection waiting for a request with nothing read is closed, and one in a
request answers it with ``connection: close`` and then closes; serve_http1 returns when no
connection is left (the caller bounds that with a cancel scope).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote_to_bytes

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from starlette.types import ASGIApp, Message

from ._errors import error_body

__all__ = ["serve_http1"]

log = logging.getLogger("server.api")

MAX_HEAD = 64 * 1024
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")  # under 2**60: a size, not a number game
KEEP_ALIVE_SECONDS = 5.0
BODY_SECONDS = 30.0
_REAP_SECONDS = 0.5  # how often idle connections are looked for
_READ = 65536
_NO_BODY = frozenset((204, 304))
_RAW_IO = os.name == "posix"  # os.read/os.write on a socket's descriptor (see _Connection._read)
_REASONS = {
    100: b"Continue",
    200: b"OK",
    201: b"Created",
    202: b"Accepted",
    204: b"No Content",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    409: b"Conflict",
    413: b"Content Too Large",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Date:
    """The Date header, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def value(self) -> bytes:
        now = trio.current_time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._value = formatdate(usegmt=True).encode()
        return self._value


class _Connection:
    """One client connection (see the module docstring)."""

    def __init__(
        self,
        stream: trio.SocketStream,
        app: ASGIApp,
        max_body: int,
        date: _Date,
        upgrade: Callable[[trio.SocketStream, bytes], Awaitable[None]],
        poll: Callable[[bytes], bytes | None] | None = None,
    ) -> None:
        self.stream = stream
        self.poll = poll
        self.app = app
        self.max_body = max_body
        self.date = date
        self.upgrade = upgrade
        self.buffer = bytearray()
        sock = stream.socket
        self.fd = sock.fileno() if _RAW_IO else -1
        # The trio time at which the read in progress gives up (a head after KEEP_ALIVE_SECONDS
        # idle, a body after BODY_SECONDS), None while no read waits on the client.
        self.read_deadline: float | None = None
        self.expired = False
        self.awaiting_head = False  # between requests: closed at once by a drain
        self.draining = False
        self.client = _address(sock.getpeername())
        self.server = _address(sock.getsockname())

    async def _fill(self) -> bool:
        if self.fd < 0:
            data = await self.stream.receive_some(_READ)
        else:
            data = await self._read()
        if not data:
            return False
        self.buffer += data
        return True

    # Raw reads and writes on the socket's descriptor. Why: trio's SocketStream checks for
    # concurrent use, translates errors through context managers and yields to the scheduler
    # on every successful send (checkpoint_if_cancelled, then a shielded checkpoint): under
    # Orca-like load that was a third of this server's cost per request. Here a request
    # costs one yield: the wait for its bytes (or one checkpoint when they were already
    # there, so a client that pipelines cannot starve the others). A response is written
    # without yielding unless the socket's buffer is full.

    async def _read(self) -> bytes:
        try:
            data = os.read(self.fd, _READ)
        except BlockingIOError:
            pass
        except OSError as exc:
            raise trio.BrokenResourceError(f"the connection failed: {exc}") from exc
        else:
            await trio.lowlevel.checkpoint()
            return data
        while True:
            if self.expired:
                raise trio.ClosedResourceError("idle for too long")
            await trio.lowlevel.wait_readable(self.fd)
            try:
                return os.read(self.fd, _READ)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(f"the connection failed: {exc}") from exc

    async def _send(self, data: bytes) -> None:
        if self.fd < 0:
            await self.stream.send_all(data)
            return
        view = memoryview(data)
        sent = 0
        while sent < len(view):
            try:
                sent += os.write(self.fd, view[sent:])
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.fd)
            except OSError as exc:
                raise trio.BrokenResourceError(f"the connection failed: {exc}") from exc

    async def serve(self) -> None:
        try:
            while True:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    end = await self._await_head()
                if end < 0:
                    if len(self.buffer) > MAX_HEAD:
                        await self._refuse(431, "request head too large")
                    return
                head = bytes(self.buffer[:end])
                del self.buffer[: end + 4]
                try:
                    keep = await self._request(head)
                except _BadRequest as exc:
                    await self._refuse(exc.status, str(exc))
                    return
                if not keep:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self.stream.aclose()

    async def _await_head(self) -> int:
        """Read until the buffer holds a whole head: its end, or -1 (the client closed, the
        head is too large, or it did not come within KEEP_ALIVE_SECONDS)."""
        if self.fd < 0:
            with trio.move_on_after(KEEP_ALIVE_SECONDS):
                return await self._read_head()
            return -1
        # The idle limit without a cancel scope per request (entering and leaving one was
        # ~10% of a request's cost): the server's _Reaper wakes a read that waited too long.
        self.read_deadline = trio.current_time() + KEEP_ALIVE_SECONDS
        self.expired = False
        self.awaiting_head = True
        try:
            return await self._read_head()
        except trio.ClosedResourceError:
            if self.expired:
                return -1
            raise
        finally:
            self.read_deadline = None
            self.awaiting_head = False

    async def _read_head(self) -> int:
        end = -1
        while end < 0:
            if len(self.buffer) > MAX_HEAD or not await self._fill():
                return -1
            end = self.buffer.find(b"\r\n\r\n")
        return end

    def drain(self) -> None:
        """The server drains: answer the request in progress with ``connection: close``; a
        connection waiting for its next request with nothing read is closed now."""
        self.draining = True
        if self.awaiting_head and not self.buffer and self.fd >= 0:
            self.expired = True
            trio.lowlevel.notify_closing(self.fd)

    def expire(self, now: float) -> None:
        """The reaper's call: end a read past its deadline (a head awaited KEEP_ALIVE_SECONDS,
        a body still incomplete BODY_SECONDS after its head). A read already woken by its
        bytes is not affected (notify_closing wakes only a waiting one), so a request that
        arrived in time is always served."""
        if self.read_deadline is not None and now >= self.read_deadline:
            self.expired = True
            trio.lowlevel.notify_closing(self.fd)

    async def _refuse(self, status: int, message: str) -> None:
        # The API's error shape (server/api/_errors.py), as the app's own refusals have.
        body = json.dumps(error_body(status, message)).encode()
        await self._send(
            self._head(status, [(b"content-type", b"application/json")], len(body), False) + body
        )

    def _head(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        length: int | None,
        keep: bool,
    ) -> bytes:
        lines = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Unknown"))]
        for name, value in headers:
            if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
                raise RuntimeError(f"a response header carries a line break: {name!r}")
            lines.append(name + b": " + value)
        if status in _NO_BODY:
            pass
        elif length is not None:
            lines.append(b"content-length: %d" % length)
        else:
            lines.append(b"transfer-encoding: chunked")
        lines.append(b"date: " + self.date.value())
        lines.append(b"server: kubesvc")
        if not keep:
            lines.append(b"connection: close")
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _request(self, head: bytes) -> bool:
        """Answer one request; whether the connection stays open."""
        lines = head.split(b"\r\n")
        try:
            method_b, target, version = lines[0].split(b" ")
        except ValueError:
            raise _BadRequest(400, "malformed request line") from None
        if version not in (b"HTTP/1.1", b"HTTP/1.0"):
            raise _BadRequest(400, "unsupported HTTP version")
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = None
        chunked = upgrade = close = keep_alive = expect = False
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise _BadRequest(400, "malformed header line")
            name, value = name.lower(), value.strip()
            headers.append((name, value))
            if name == b"content-length":
                if not value.isdigit() or (length is not None and int(value) != length):
                    raise _BadRequest(400, "bad content-length")
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value.lower() == b"chunked"
                if not chunked:
                    raise _BadRequest(400, "unsupported transfer-encoding")
            elif name == b"connection":
                tokens = {t.strip() for t in value.lower().split(b",")}
                close = close or b"close" in tokens
                keep_alive = keep_alive or b"keep-alive" in tokens
                upgrade = upgrade or b"upgrade" in tokens
            elif name == b"expect":
                expect = value.lower() == b"100-continue"
        if upgrade and any(n == b"upgrade" and v.lower() == b"websocket" for n, v in headers):
            rest, self.buffer = bytes(self.buffer), bytearray()
            await self.upgrade(self.stream, head + b"\r\n\r\n" + rest)
            return False
        keep = not close if version == b"HTTP/1.1" else keep_alive and not close
        if chunked and length is not None:
            raise _BadRequest(400, "both content-length and chunked")
        if (length or 0) > self.max_body:
            raise _BadRequest(413, self._too_large())
        if expect and (chunked or length):
            await self._send(b"HTTP/1.1 100 Continue\r\n\r\n")
        if chunked or length:
            body = await self._read_body(length)
        else:
            body = b""
        if method_b == b"GET" and self.poll is not None:
            answer = self.poll(target)
            if answer is not None:
                keep = keep and not self.draining
                await self._send(
                    self._head(200, [(b"content-type", b"application/json")], len(answer), keep)
                    + answer
                )
                return keep
        method = method_b.decode("ascii", "replace").upper()
        path, _, query = target.partition(b"?")
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": version[5:].decode(),
            "method": method,
            "scheme": "http",
            "path": _unquote(path),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": self.client,
            "server": self.server,
            "state": {},
            "extensions": {},
        }
        return await self._run_app(scope, body, keep, method == "HEAD")

    async def _read_body(self, length: int | None) -> bytes:
        """The request body (chunked when ``length`` is None); a client that does not send
        it within BODY_SECONDS gets 408 (a slow sender must not hold a connection forever)."""
        if self.fd < 0:
            with trio.move_on_after(BODY_SECONDS):
                return await (self._chunked() if length is None else self._body(length))
            raise _BadRequest(408, "the request body did not arrive in time")
        self.read_deadline = trio.current_time() + BODY_SECONDS
        self.expired = False
        try:
            return await (self._chunked() if length is None else self._body(length))
        except trio.ClosedResourceError:
            if self.expired:
                raise _BadRequest(408, "the request body did not arrive in time") from None
            raise
        finally:
            self.read_deadline = None

    def _too_large(self) -> str:
        return f"the request body is larger than the limit of {self.max_body} bytes"

    async def _body(self, length: int) -> bytes:
        while len(self.buffer) < length:
            if not await self._fill():
                raise trio.BrokenResourceError("the client closed mid-body")
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return body

    async def _chunked(self) -> bytes:
        parts: list[bytes] = []
        size_total = 0
        while True:
            size_text = (await self._line()).split(b";", 1)[0].strip()
            # Hex digits only: int(..., 16) also takes "-7", "+5", "0x5" and "1_0", and a
            # negative size would hand _body a slice of whatever is buffered.
            if not _CHUNK_SIZE.fullmatch(size_text):
                raise _BadRequest(400, "malformed chunk size")
            size = int(size_text, 16)
            if size == 0:
                while await self._line():  # trailers (ignored) up to the blank line
                    pass
                return b"".join(parts)
            size_total += size
            if size_total > self.max_body:
                raise _BadRequest(413, self._too_large())
            parts.append(await self._body(size))
            await self._body(2)  # the CRLF after the chunk

    async def _line(self) -> bytes:
        """One CRLF-ended line of a chunked body (a size line or a trailer), without its CRLF;
        400 when none ends within MAX_HEAD bytes or the client stops sending."""
        end = self.buffer.find(b"\r\n")
        while end < 0:
            if len(self.buffer) > MAX_HEAD or not await self._fill():
                raise _BadRequest(400, "malformed chunked body")
            end = self.buffer.find(b"\r\n")
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    async def _run_app(
        self, scope: dict[str, Any], body: bytes, keep: bool, head_only: bool
    ) -> bool:
        sent = trio.Event()
        delivered = False
        start: Message | None = None
        head_sent = chunked = finished = False

        async def receive() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await sent.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal start, head_sent, chunked, finished
            kind = message["type"]
            if kind == "http.response.start":
                if start is not None:
                    raise RuntimeError("http.response.start sent twice")
                start = message
                return
            if kind != "http.response.body" or start is None or finished:
                raise RuntimeError(f"unexpected ASGI message {kind!r}")
            data = bytes(message.get("body", b""))
            more = bool(message.get("more_body", False))
            status = int(start["status"])
            out = b""
            if not head_sent:
                head_sent = True
                headers: list[tuple[bytes, bytes]] = []
                length: int | None = None
                for n, v in start.get("headers", ()):
                    name = bytes(n).lower()
                    if name == b"content-length":
                        length = int(v)
                    else:
                        headers.append((name, bytes(v)))
                if length is None and not more:
                    length = len(data)
                chunked = length is None
                out = self._head(status, headers, length, keep and not self.draining)
            if head_only or status in _NO_BODY:
                data = b""
            if chunked and not head_only and status not in _NO_BODY:
                if data:
                    out += b"%x\r\n" % len(data) + data + b"\r\n"
                if not more:
                    out += b"0\r\n\r\n"
            else:
                out += data
            if not more:
                finished = True
            if out:
                await self._send(out)

        try:
            await self.app(scope, receive, send)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise  # the client went away: nothing to answer, nothing to log
        except Exception:
            log.exception("%s %s: the application failed", scope["method"], scope["path"])
            if not head_sent:
                await self._send(self._head(500, [], 0, False))
            return False
        finally:
            sent.set()
        if not finished:
            if start is None:
                await self._send(self._head(500, [], 0, False))
            return False
        return keep and not self.draining


def _unquote(path: bytes) -> str:
    if b"%" not in path:
        return path.decode("latin-1")
    return unquote_to_bytes(path).decode("utf-8", "replace")


def _address(raw: Any) -> tuple[str, int] | None:
    if isinstance(raw, tuple) and len(raw) >= 2:
        return str(raw[0]), int(raw[1])
    return None


class _Prefixed(trio.abc.Stream):
    """A socket stream whose first reads return bytes already read (for the handover)."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self.transport = stream
        self.socket = stream.socket
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            data, self._prefix = self._prefix, b""
            await trio.lowlevel.checkpoint()
            return data
        return await self.transport.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.transport.send_eof()

    async def aclose(self) -> None:
        await self.transport.aclose()


async def _reap(connections: set[_Connection]) -> None:
    """End the reads past their deadline (to within _REAP_SECONDS): see _Connection.expire."""
    while True:
        await trio.sleep(_REAP_SECONDS)
        now = trio.current_time()
        for connection in list(connections):
            connection.expire(now)


async def serve_http1(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    max_body: int,
    config: Config,
    poll: Callable[[bytes], bytes | None] | None = None,
    drain: trio.Event | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` until cancelled; ``task_status.started(port)`` with the
    bound port. WebSocket upgrades are served by Hypercorn with ``config``.

    ``poll(target)``, when given, may answer a GET without the app: the JSON body of a 200
    (sent with the headers the app's JSON answers carry), or None to let the app answer. It is
    for a poll answered from memory thousands of times a second (GET /task/{id}, see
    server/api/_hot.py); building the ASGI scope and the app's calls cost more than the
    answer. When ``drain`` is set, it drains (see the module docstring) and returns."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    date = _Date()
    wrapped = ASGIWrapper(app)  # type: ignore[arg-type]
    context = WorkerContext(None)

    async def upgrade(stream: trio.SocketStream, prefix: bytes) -> None:
        server = TCPServer(wrapped, config, context, ConnectionState({}), _Prefixed(stream, prefix))  # type: ignore[arg-type]
        await server.run()

    connections: set[_Connection] = set()
    changed = trio.Event()

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal changed
        connection = _Connection(stream, app, max_body, date, upgrade, poll)
        connection.draining = drain is not None and drain.is_set()
        connections.add(connection)
        try:
            await connection.serve()
        finally:
            connections.discard(connection)
            changed.set()
            changed = trio.Event()

    bound = listeners[0].socket.getsockname()[1]
    log.info("REST API on http://%s:%d", host, bound)
    async with trio.open_nursery() as nursery:
        if _RAW_IO:
            nursery.start_soon(_reap, connections)
        task_status.started(bound)
        if drain is None:
            await trio.serve_listeners(handle, listeners, handler_nursery=nursery)
        async with trio.open_nursery() as accepting:
            accepting.start_soon(
                functools.partial(trio.serve_listeners, handle, listeners, handler_nursery=nursery)
            )
            await drain.wait()
            accepting.cancel_scope.cancel()  # serve_listeners closes the listeners
        log.info("REST API: draining %d connection(s)", len(connections))
        for connection in list(connections):
            connection.drain()
        while connections:
            await changed.wait()
        nursery.cancel_scope.cancel()  # the reaper
