"""bench_ops' REST client: Orca's side of a deploy, JSON over keep-alive HTTP/1.1.

Why a client of its own. Orca runs on another machine in real life; here it shares the two
cores with the server, the agent and kubesim, so every bit of CPU it spends is taken from
what is measured. httpx cost ~2 ms of CPU per request at 50 concurrent clients (session 2);
the agent's HTTP/1.1 pool (agent/kube/_http1.py), used until session 8, ~0.2 ms, most of it
in trio's SocketStream (a checkpoint and an error-translating context manager per send and
receive), a ``select.poll`` object built per request to check the reused connection, and the
stdlib JSON decoder. Here a request is one ``os.write`` and, usually, one ``os.read`` after
one ``wait_readable`` on a raw non-blocking socket, and the answer is decoded by msgspec.

What it takes: the server's answers to these routes always carry a Content-Length (kubesvc's
HTTP/1.1 server, server/api/_http1.py, sends one for every single-message response); any
other shape raises. Idle connections are a stack; one idle longer than ``IDLE_SECONDS``
(under the server's 5 s keep-alive) is closed rather than reused, so a request never races
the server's reaper; a GET whose reused connection closes before any answer is sent again.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import msgspec
import trio

__all__ = ["Rest"]

IDLE_SECONDS = 2.0  # the server closes a keep-alive connection idle for 5 s
_READ = 65536
_encode = msgspec.json.encode
_decode = msgspec.json.decode


class _Closed(Exception):
    """The connection ended before a whole answer; ``answered``: some of it had come."""

    def __init__(self, answered: bool) -> None:
        super().__init__("the server closed the connection")
        self.answered = answered


class _Connection:
    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.idle_since = 0.0
        self.reused = False

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        view = memoryview(request)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.fd)
            except OSError:
                raise _Closed(False) from None
        # A bytearray: a large answer (a page of /v1/objects, MBs) comes in many reads, and
        # bytes += would copy all that came before at each one.
        buffer = bytearray()
        end = -1
        length = 0
        while True:
            try:
                chunk = os.read(self.fd, _READ)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.fd)
                continue
            except OSError:
                raise _Closed(bool(buffer)) from None
            if not chunk:
                raise _Closed(bool(buffer))
            buffer += chunk
            if end < 0:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    continue
                length = _content_length(buffer[:end])
            if len(buffer) >= end + 4 + length:
                status = int(buffer[9:12])
                return status, bytes(buffer[end + 4 : end + 4 + length])

    def close(self) -> None:
        self.sock.close()


def _content_length(head: bytes | bytearray) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
        if name.strip().lower() == b"transfer-encoding":
            break
    raise RuntimeError(f"an answer without Content-Length: {head[:300]!r}")


class Rest:
    """``await rest.call(method, path, body)`` -> the decoded JSON answer (HTTP 200 only)."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._idle: list[_Connection] = []
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def _connection(self) -> _Connection:
        now = trio.current_time()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < IDLE_SECONDS:
                connection.reused = True
                return connection
            connection.close()
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        await sock.connect(("127.0.0.1", self._port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(sock)

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = await self.exchange(method, path, body)
        if status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {answer[:300]!r}")
        return _decode(answer)

    async def exchange(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """One request: the answer's status and its body's bytes, undecoded."""
        head = f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: application/json\r\n"
        if body is None:
            request = (head + "\r\n").encode()
        else:
            content = _encode(body)
            head += f"content-type: application/json\r\ncontent-length: {len(content)}\r\n\r\n"
            request = head.encode() + content
        for attempt in range(3):
            connection = await self._connection()
            try:
                status, answer = await connection.exchange(request)
            except _Closed as exc:
                connection.close()
                # A reused connection closed under the request: a GET may go again.
                if attempt == 2 or method != "GET" or exc.answered or not connection.reused:
                    raise RuntimeError(f"{method} {path}: {exc}") from None
                continue
            except BaseException:
                connection.close()  # cancelled mid-answer: not reusable
                raise
            break
        if self._closed:
            connection.close()
        else:
            connection.idle_since = trio.current_time()
            self._idle.append(connection)
        return status, answer
