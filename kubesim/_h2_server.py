"""kubesim's HTTP/2 connections: :mod:`kubesim._h2_core` under one trio loop, ASGI to the app.

Theory of operation. One task reads the connection and feeds the core; every request head that
arrives starts a task running the ASGI app for it (a watch may run for hours; a GET ends at
once). The app's ``receive`` hands over the body the core holds (waiting while the client is
still sending); its ``send`` frames the answer into the core's output at once, as far as the
client's flow-control windows allow, and waits for a window update for the rest: a watch whose
client stops reading stops in its ``send``. One writer task sends what the output holds, all of
it in one TLS write per turn (an answer's HEADERS and DATA, and every other stream's answers
queued meanwhile). A sender waits while more than ``_MAX_QUEUED`` bytes are unsent; below that
its ``send`` returns without a schedule point, as a memory channel's ``send_nowait`` would (a
watch yields while it waits for the next event, a long list once the queue is full). Reading
waits only on what it queued itself (acks, window updates, resets) past ``_MAX_QUEUED``, never
on answers: a client that writes before it reads must not deadlock with a long answer.

A client that resets a stream (or goes away) ends that request: its ``receive`` answers
``http.disconnect`` and its ``send`` drops what it is given; when the connection ends, the
tasks of its requests are cancelled.
"""

from __future__ import annotations

import logging
import time
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote

import trio

from kubesim._h2_core import (
    CANCEL,
    INTERNAL_ERROR,
    MAX_STREAMS,
    NO_ERROR,
    REFUSED_STREAM,
    H2Error,
    H2ServerCore,
    Stream,
)
from kubesim._http import Message, Scope

__all__ = ["H2Connection", "serve_h2"]

_log = logging.getLogger("kubesim")

_READ = 65_536
_MAX_QUEUED = 256 * 1024  # bytes a sender may leave unsent before it waits for the writer
_GOAWAY_SECONDS = 5.0  # how long a GOAWAY after a protocol error may take to go out
_App = Any  # an ASGI app: await app(scope, receive, send)


class H2Connection:
    """One client's HTTP/2 connection (see the module's theory of operation)."""

    def __init__(
        self, stream: trio.abc.Stream, app: _App, client: tuple[str, int], server: tuple[str, int]
    ) -> None:
        self._stream = stream
        self._app = app
        self._client = client
        self._server = server
        self._core = H2ServerCore()
        self._wake_writer = trio.Event()
        self._window = trio.Event()  # set (and replaced) when a window opens or a stream resets
        self._bodies: dict[int, trio.Event] = {}  # streams whose handler waits for body bytes
        self._resets: dict[int, trio.Event] = {}  # ... or, body read, for the client to go
        self._taken = trio.Event()  # set (and replaced) each time the writer takes the output
        self._writing = False
        self._closed = False
        self._handlers = 0  # requests whose app is running (a reset stream's may still be)
        self._replies = 0  # bytes reading queued since the writer last took the output

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_loop)
            try:
                await self._read_loop(nursery)
            finally:
                self._closed = True
                self._wake_all()
                nursery.cancel_scope.cancel()

    async def flushed(self) -> None:
        """Return once what the handlers wrote so far has been sent (or the connection is
        gone); a stream held back by the client's window does not count."""
        while (self._core.has_output or self._writing) and not self._closed:
            await self._taken.wait()

    # -- reading ---------------------------------------------------------------------------

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        core = self._core
        while True:
            try:
                data = await self._stream.receive_some(_READ)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                return
            before = core.queued_bytes
            try:
                opened, woke = core.receive_data(data)
            except H2Error as exc:
                _log.debug("kubesim: HTTP/2 connection from %s ended: %s", self._client, exc)
                self._wake_writer.set()
                with trio.move_on_after(_GOAWAY_SECONDS):
                    await self.flushed()  # the GOAWAY
                return
            for stream in opened:
                if self._handlers >= MAX_STREAMS:  # streams reset early still count here
                    core.reset_stream(stream, REFUSED_STREAM)
                    continue
                self._handlers += 1
                nursery.start_soon(self._answer, stream)
            if woke:
                self._window.set()
                self._window = trio.Event()
            if self._bodies:
                for stream_id in [i for i in self._bodies if self._has_body(i)]:
                    self._bodies.pop(stream_id).set()
            if woke and self._resets:
                for stream_id in [i for i in self._resets if i not in core.streams]:
                    self._resets.pop(stream_id).set()
            if core.has_output:
                self._wake_writer.set()
            # What reading itself queues (acks of PINGs and SETTINGS, window updates, resets)
            # is bounded too: past _MAX_QUEUED of it unsent, reading waits for the writer.
            # Only that: answers are bounded by the client's windows, and a reader waiting
            # for them to drain could deadlock with a client that reads only between writes.
            self._replies += max(0, core.queued_bytes - before)
            while self._replies > _MAX_QUEUED and not self._closed:
                await self._taken.wait()

    def _has_body(self, stream_id: int) -> bool:
        stream = self._core.streams.get(stream_id)
        return stream is None or bool(stream.body) or stream.ended or stream.reset

    def _wake_all(self) -> None:
        self._window.set()
        self._taken.set()
        for waiters in (self._bodies, self._resets):
            for event in waiters.values():
                event.set()
            waiters.clear()

    # -- writing ---------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        core = self._core
        try:
            while True:
                if not core.has_output:
                    self._taken.set()
                    self._taken = trio.Event()
                    await self._wake_writer.wait()
                    self._wake_writer = trio.Event()
                    continue
                data = core.data_to_send()
                self._replies = 0
                self._writing = True
                self._taken.set()
                self._taken = trio.Event()
                await self._stream.send_all(data)
                self._writing = False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._closed = True
        finally:
            self._writing = False
            self._wake_all()

    async def _queued(self) -> None:
        """Have the writer send what the core holds; wait while too much is unsent."""
        self._wake_writer.set()
        while self._core.queued_bytes > _MAX_QUEUED and not self._closed:
            await self._taken.wait()

    async def _send_body(self, stream: Stream, body: bytes, end: bool) -> None:
        """Frame ``body`` (END_STREAM after it if ``end``), waiting for the client's windows
        as long as they hold it back; dropped if the stream or connection is gone."""
        if self._closed:
            return  # the writer is gone: nothing more may pile up for it
        core = self._core
        view = memoryview(body)
        sent = core.send_data(stream, view, end)
        try:
            while sent < len(view) and not stream.reset and not self._closed:
                self._wake_writer.set()
                await self._window.wait()
                sent += core.send_data(stream, view[sent:], end)
        except trio.Cancelled:
            if sent:  # part of a write is out: ending the stream cleanly would cut it short
                core.reset_stream(stream, CANCEL)
                self._wake_writer.set()
            raise
        await self._queued()

    # -- one request -----------------------------------------------------------------------

    async def _answer(self, stream: Stream) -> None:
        """Run the app for ``stream``'s request, and see the answer ended whatever it did."""
        scope = self._scope(stream)
        exchange = _Exchange(self, stream, head_only=scope["method"] == "HEAD")
        try:
            await self._app(scope, exchange.receive, exchange.send)
        except Exception:
            # A bug in a handler: the app logged it; the client gets a 500 or a reset.
            exchange.failed()
        else:
            exchange.finished()
        finally:
            self._handlers -= 1
            self._bodies.pop(stream.id, None)
            self._resets.pop(stream.id, None)
        if self._core.has_output:
            self._wake_writer.set()

    def _scope(self, stream: Stream) -> Scope:
        """The ASGI scope of ``stream``'s request, as Hypercorn builds it (``host`` first,
        from ``:authority``; no pseudo-headers)."""
        method = raw = b""
        authority: bytes | None = None
        host = b""
        headers: list[tuple[bytes, bytes]] = [(b"host", b"")]
        for name, value in stream.headers:
            if name[:1] == b":":
                if name == b":method":
                    method = value
                elif name == b":path":
                    raw = value
                elif name == b":authority":
                    authority = value
            elif name == b"host":
                host = value
            else:
                headers.append((name, value))
        headers[0] = (b"host", authority if authority is not None else host)
        path, _, query = raw.partition(b"?")
        return {
            "type": "http",
            "http_version": "2",
            "asgi": {"spec_version": "2.1", "version": "3.0"},
            "method": method.decode("ascii").upper(),
            "scheme": "https",
            "path": unquote(path.decode("ascii")),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": self._client,
            "server": self._server,
            "extensions": {},
        }


class _Exchange:
    """One request's ASGI ``receive`` and ``send`` on its stream."""

    __slots__ = ("_conn", "_done", "_head_only", "_started", "_stream")

    def __init__(self, conn: H2Connection, stream: Stream, *, head_only: bool) -> None:
        self._conn = conn
        self._stream = stream
        self._started = False
        self._done = False
        self._head_only = head_only  # HEAD: the answer's head goes out, its body does not

    async def receive(self) -> Message:
        conn, stream = self._conn, self._stream
        while True:
            if stream.reset or conn._closed or (self._done and stream.answered):
                return {"type": "http.disconnect"}  # (Hypercorn's too once the answer ended)
            if not self._done and (stream.body or stream.ended):
                body = conn._core.take_body(stream)
                if conn._core.has_output:
                    conn._wake_writer.set()
                more = not stream.ended
                self._done = not more  # then the next receive waits for the client to go
                return {"type": "http.request", "body": body, "more_body": more}
            waiters = conn._resets if self._done else conn._bodies
            event = waiters.get(stream.id)
            if event is None:
                event = waiters[stream.id] = trio.Event()
            await event.wait()

    async def send(self, message: Message) -> None:
        conn, stream = self._conn, self._stream
        kind = message["type"]
        if kind == "http.response.start":
            if self._started:
                raise RuntimeError("kubesim: http.response.start sent twice")
            self._started = True
            headers = [*message.get("headers", ()), (b"date", _date())]
            conn._core.send_headers(stream, int(message["status"]), headers, end=False)
            conn._wake_writer.set()  # the body usually follows before the writer runs
        elif kind == "http.response.body":
            if not self._started or stream.answered:
                raise RuntimeError("kubesim: http.response.body without an open answer")
            body = b"" if self._head_only else message.get("body", b"")
            await conn._send_body(stream, body, not message.get("more_body", False))

    def finished(self) -> None:
        """The app returned: an answer it left open is ended (500 if it never began)."""
        core, stream = self._conn._core, self._stream
        if stream.reset:
            return
        if not self._started:
            core.send_headers(stream, 500, [(b"content-length", b"0")], end=True)
        elif not stream.answered:
            core.send_data(stream, memoryview(b""), True)
        if not stream.ended:  # answered before the client finished sending: stop it
            core.reset_stream(stream, NO_ERROR)

    def failed(self) -> None:
        core, stream = self._conn._core, self._stream
        if stream.reset:
            return
        if stream.answered:  # answered in full, then failed: only stop an unfinished upload
            if not stream.ended:
                core.reset_stream(stream, NO_ERROR)
            return
        if self._started:
            core.reset_stream(stream, INTERNAL_ERROR)
        else:
            core.send_headers(stream, 500, [(b"content-length", b"0")], end=True)
            if not stream.ended:
                core.reset_stream(stream, NO_ERROR)


_dated: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    """The ``date`` header's value (as Hypercorn and the API server send it), made once a
    second."""
    global _dated
    now = int(time.time())
    if _dated[0] != now:
        _dated = (now, formatdate(now, usegmt=True).encode())
    return _dated[1]


async def serve_h2(
    stream: trio.abc.Stream,
    app: _App,
    client: tuple[str, int],
    server: tuple[str, int],
    *,
    task_status: trio.TaskStatus[H2Connection] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve HTTP/2 on ``stream`` (TLS already negotiated "h2") until the client goes; the
    caller closes ``stream``. ``task_status.started`` gets the connection (for ``flushed``)."""
    connection = H2Connection(stream, app, client, server)
    task_status.started(connection)
    await connection.run()
