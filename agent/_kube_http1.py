"""A small HTTP/1.1 client for the short requests of one plain-HTTP API server (operations,
discovery, ``get_json``): one keep-alive pool, whole answers, no streaming.

Why not httpx here: an operation's GET or POST through httpx/httpcore cost the agent ~3 ms
of CPU at 64 concurrent operations, most of it in httpcore's pool, which scans every pooled
connection (``is_idle``, ``has_expired``) for every request it queues or finishes (quadratic
in the number of connections), then in the layered response streams. Here idle connections
are a stack: a request pops one (or dials), writes the request in one ``send_all``, reads
until the answer is whole and pushes the connection back.

Theory of operation. :class:`ResponseReader` is the sans-I/O core: bytes in (``feed``), the
head and then the whole body out (``head()``, ``body()``), framing by Content-Length, chunked
transfer coding or the end of the connection; heads are capped (``MAX_HEAD_BYTES``), bodies by
the caller's ``max_bytes``. :class:`Http1Pool` moves bytes. A connection goes back to the
pool only after a complete answer with nothing extra read and keep-alive allowed; anything
else (an error, a cancellation, ``Connection: close``) closes it. A pooled connection is
checked before reuse (the server may have closed it while idle: readable means EOF or junk,
so it is dropped), is dropped after ``IDLE_SECONDS`` unused, and at most ``max_idle`` wait.
If a reused connection still breaks before any byte of the answer, an idempotent request is
sent once more on a new connection (what Go's client does); anything else is reported.

Errors: :class:`Http1Error` with ``stage`` "connect" (nothing was sent: safe to retry
anything), "receive" (the peer or network broke the exchange, while it was sent or read) or
"protocol" (a malformed answer).
The client (``_kube_client.py``) turns them into its KubeError tree.
"""

from __future__ import annotations

import select
from collections.abc import Mapping
from dataclasses import dataclass

import trio

__all__ = ["MAX_HEAD_BYTES", "BodyTooLarge", "Http1Error", "Http1Pool", "ResponseReader"]

MAX_HEAD_BYTES = 64 * 1024  # an API server's response head is well under 1 KiB
READ_SIZE = 256 * 1024
IDLE_SECONDS = 30.0  # idle keep-alive connections older than this are closed, not reused
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_NO_BODY_STATUS = frozenset({204, 304})


class Http1Error(Exception):
    """A request failed below HTTP: ``stage`` is connect, receive or protocol."""

    def __init__(self, stage: str, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.stage = stage
        self.timeout = timeout


class BodyTooLarge(Exception):
    """The answer's body is larger than the caller's ``max_bytes``."""


@dataclass(frozen=True, slots=True)
class Head:
    """A response head: status, headers (names lowercased; repeats joined by ", ")."""

    status_code: int
    headers: Mapping[str, str]
    keep_alive: bool


class ResponseReader:
    """Parses one HTTP/1.1 response (sans I/O). ``feed`` bytes, then ask ``head()`` (None
    until the head is whole) and ``body()`` (None until the body is whole); ``feed_eof()``
    when the peer closed. Raises Http1Error("protocol") for a malformed answer and
    BodyTooLarge past ``max_body``. Interim 1xx answers are skipped."""

    def __init__(self, *, head_request: bool = False, max_body: int) -> None:
        self._buf = bytearray()
        self._pos = 0  # where unparsed bytes start
        self._head_request = head_request
        self._max_body = max_body
        self._head: Head | None = None
        self._mode = ""  # "length", "chunked", "close", "none"
        self._remaining = 0  # bytes left of the body ("length") or of the current chunk
        self._chunk_state = "size"  # "size", "data", "crlf", "trailer"
        self._body = bytearray()
        self._done = False
        self._eof = False
        self.received_any = False

    @property
    def extra(self) -> bool:
        """Bytes came after the answer (the connection cannot be reused)."""
        return self._done and self._pos < len(self._buf)

    def feed(self, data: bytes) -> None:
        if data:
            self.received_any = True
            if self._pos and self._pos == len(self._buf):
                self._buf.clear()
                self._pos = 0
            self._buf += data

    def feed_eof(self) -> None:
        self._eof = True

    def head(self) -> Head | None:
        while self._head is None:
            end = self._buf.find(b"\r\n\r\n", self._pos)
            if end < 0:
                if len(self._buf) - self._pos > MAX_HEAD_BYTES:
                    raise Http1Error("protocol", "the response head is too large")
                if self._eof:
                    raise Http1Error("protocol", "the server closed the connection mid-head")
                return None
            head = self._parse_head(bytes(self._buf[self._pos : end]))
            self._pos = end + 4
            if 100 <= head.status_code < 200:
                continue  # an interim answer (100 Continue): the real one follows
            self._head = head
            self._frame(head)
        return self._head

    def _parse_head(self, raw: bytes) -> Head:
        lines = raw.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise Http1Error("protocol", f"not an HTTP/1.x status line: {lines[0][:100]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise Http1Error("protocol", f"malformed header line: {line[:100]!r}")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        connection = headers.get("connection", "").lower()
        keep_alive = "close" not in connection and (
            version == "HTTP/1.1" or "keep-alive" in connection
        )
        return Head(int(code), headers, keep_alive)

    def _frame(self, head: Head) -> None:
        headers = head.headers
        if self._head_request or head.status_code in _NO_BODY_STATUS:
            self._mode = "none"
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in headers:
            value = headers["content-length"].split(",")[0].strip()
            if not value.isdigit():
                raise Http1Error("protocol", f"bad Content-Length {value!r}")
            self._remaining = int(value)
            if self._remaining > self._max_body:
                raise BodyTooLarge()
            self._mode = "length"
        else:
            self._mode = "close"

    @property
    def keep_alive(self) -> bool:
        return self._head is not None and self._head.keep_alive and self._mode != "close"

    def body(self) -> bytes | None:
        """The whole body once it is complete, else None."""
        if self._done:
            return bytes(self._body)
        if self._head is None and self.head() is None:
            return None
        mode = self._mode
        if mode == "none":
            self._done = True
        elif mode == "length":
            n = min(self._remaining - len(self._body), len(self._buf) - self._pos)
            if n > 0:
                self._body += self._buf[self._pos : self._pos + n]
                self._pos += n
            self._done = len(self._body) == self._remaining
        elif mode == "chunked":
            self._chunks()
        else:  # "close": everything until the peer closes
            n = len(self._buf) - self._pos
            if len(self._body) + n > self._max_body:
                raise BodyTooLarge()
            self._body += self._buf[self._pos :]
            self._pos += n
            self._done = self._eof
        if not self._done and self._eof:
            raise Http1Error("protocol", "the server closed the connection mid-body")
        return bytes(self._body) if self._done else None

    def _chunks(self) -> None:
        buf = self._buf
        while not self._done:
            state = self._chunk_state
            if state == "data":
                if self._remaining:
                    available = min(self._remaining, len(buf) - self._pos)
                    if available <= 0:
                        return
                    if len(self._body) + available > self._max_body:
                        raise BodyTooLarge()
                    self._body += buf[self._pos : self._pos + available]
                    self._pos += available
                    self._remaining -= available
                    if self._remaining:
                        return
                self._chunk_state = "crlf"
                continue
            end = buf.find(b"\r\n", self._pos)
            if end < 0:
                if len(buf) - self._pos > MAX_HEAD_BYTES:
                    raise Http1Error("protocol", "a chunk line is too long")
                return
            line = bytes(buf[self._pos : end])
            self._pos = end + 2
            if state == "crlf":
                if line:
                    raise Http1Error("protocol", "a chunk does not end with CRLF")
                self._chunk_state = "size"
            elif state == "size":
                size = line.split(b";", 1)[0].strip()
                try:
                    self._remaining = int(size, 16)
                except ValueError:
                    raise Http1Error("protocol", f"bad chunk size {size[:20]!r}") from None
                self._chunk_state = "data" if self._remaining else "trailer"
            elif not line:  # the empty line after the (ignored) trailers ends the body
                self._done = True


@dataclass(slots=True, eq=False)
class _Connection:
    stream: trio.SocketStream
    idle_since: float = 0.0

    def looks_alive(self) -> bool:
        """An idle connection has nothing to read; readable means the peer closed it (EOF)
        or sent something unasked for. Either way it must not carry a request."""
        # poll, not select: select refuses descriptors past 1024 (an agent with many
        # HTTP/1.1 watches open has that many), which would drop every kept connection.
        poller = select.poll()
        try:
            poller.register(self.stream.socket.fileno(), select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False


class Http1Pool:
    """Keep-alive HTTP/1.1 connections to one plain-HTTP server; see the module docstring.

    ``request`` sends one request and returns (status, headers, body). The pool owns its
    connections; ``aclose()`` closes the idle ones (busy ones close when their request ends).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int = 1024,
        max_idle: int = 64,
        connect_timeout: float = 30.0,
    ) -> None:
        self._host = host
        self._port = port
        self._authority = (f"[{host}]" if ":" in host else host) + f":{port}"
        self._idle: list[_Connection] = []  # a stack: the warmest connection first
        self._max_idle = max_idle
        # Requests in flight (each holds one connection); more wait for a free one.
        self._slots = trio.Semaphore(max_connections)
        self._connect_timeout = connect_timeout
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await trio.aclose_forcefully(connection.stream)

    def _pop_idle(self) -> _Connection | None:
        now = trio.current_time()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < IDLE_SECONDS and connection.looks_alive():
                return connection
            connection.stream.socket.close()  # no await: trio allows a sync close here
        return None

    async def _dial(self) -> _Connection:
        try:
            with trio.fail_after(self._connect_timeout):
                stream = await trio.open_tcp_stream(self._host, self._port)
        except trio.TooSlowError as exc:
            raise Http1Error(
                "connect",
                f"ConnectTimeout: no connection within {self._connect_timeout} s",
                timeout=True,
            ) from exc
        except OSError as exc:
            raise Http1Error("connect", f"ConnectError: {exc}") from exc
        stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, True)
        return _Connection(stream)

    async def request(
        self, method: str, head: bytes, content: bytes | None, *, max_bytes: int
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Send ``head`` (the request line and headers, from :meth:`encode_head`) and
        ``content``; return the whole answer. At most ``max_connections`` requests are in
        flight; more wait here. Raises Http1Error, or BodyTooLarge (the connection is
        closed) when the body is longer than ``max_bytes``."""
        try:
            self._slots.acquire_nowait()  # the usual case: no wait, no scheduler pass
        except trio.WouldBlock:
            await self._slots.acquire()
        try:
            return await self._request(method, head + content if content else head, max_bytes)
        finally:
            self._slots.release()

    async def _request(
        self, method: str, data: bytes, max_bytes: int
    ) -> tuple[int, Mapping[str, str], bytes]:
        while True:
            connection = self._pop_idle()
            reused = connection is not None
            if connection is None:
                connection = await self._dial()
            try:
                return await self._exchange(connection, method, data, max_bytes)
            except _Stale:
                if not (reused and method in _IDEMPOTENT):
                    raise Http1Error(
                        "receive",
                        "RemoteProtocolError: the server closed the connection without answering",
                    ) from None
                # The server dropped a kept-alive connection as we reused it: send once more
                # on a fresh one (no answer came back, and the method may be repeated).

    async def _exchange(
        self, connection: _Connection, method: str, data: bytes, max_bytes: int
    ) -> tuple[int, Mapping[str, str], bytes]:
        stream = connection.stream
        reader = ResponseReader(head_request=method == "HEAD", max_body=max_bytes)
        done = False
        try:
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise _Stale() from exc
            while True:
                try:
                    chunk = await stream.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    if not reader.received_any:
                        raise _Stale() from exc
                    raise Http1Error("receive", f"ReadError: {exc}") from exc
                if not chunk:
                    if not reader.received_any:
                        raise _Stale()
                    reader.feed_eof()
                else:
                    reader.feed(chunk)
                body = reader.body()
                if body is not None:
                    head = reader.head()
                    assert head is not None
                    done = reader.keep_alive and not reader.extra and not self._closed
                    return head.status_code, head.headers, body
        finally:
            if done and len(self._idle) < self._max_idle:
                connection.idle_since = trio.current_time()
                self._idle.append(connection)
            else:
                stream.socket.close()

    def encode_head(
        self, method: str, target: str, headers: Mapping[str, str], content_length: int | None
    ) -> bytes:
        """The request line and headers. ``headers`` names are lowercase and must not hold
        CR or LF (the caller builds them)."""
        lines = [f"{method} {target} HTTP/1.1\r\nhost: {self._authority}\r\n"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise Http1Error("protocol", f"the {name} header holds a line break")
            lines.append(f"{name}: {value}\r\n")
        if content_length is not None:
            lines.append(f"content-length: {content_length}\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")


class _Stale(Exception):
    """The connection broke before any byte of the answer."""
