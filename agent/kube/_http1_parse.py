"""HTTP/1.1 responses without I/O: :class:`ResponseReader` parses one answer from the bytes it
is fed; :func:`encode_head` writes a request's head.

Framing by Content-Length, the chunked transfer coding or the end of the connection; heads
are capped (``MAX_HEAD_BYTES``), bodies by ``max_body``. The body comes out whole
(``body()``, once complete) or piece by piece as it arrives (``take()``, for watches and
streamed lists); the two are not mixed on one reader.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ._seam import TransportError

__all__ = ["MAX_HEAD_BYTES", "BodyTooLarge", "Head", "Http1Error", "ResponseReader", "encode_head"]

MAX_HEAD_BYTES = 64 * 1024  # an API server's response head is well under 1 KiB
_NO_BODY_STATUS = frozenset({204, 304})


class Http1Error(TransportError):
    """A malformed answer, or a failure below HTTP/1.1: ``stage`` says where (see
    TransportError)."""

    def __init__(self, stage: str, message: str, *, unanswered: bool = False) -> None:
        super().__init__(message, stage=stage, unanswered=unanswered)


class BodyTooLarge(Exception):
    """The answer's body is larger than the caller's ``max_body``."""


@dataclass(frozen=True, slots=True)
class Head:
    """A response head: status, headers (names lowercased; repeats joined by ", ")."""

    status_code: int
    headers: Mapping[str, str]
    keep_alive: bool


class ResponseReader:
    """Parses one HTTP/1.1 response (sans I/O). ``feed`` bytes, then ask ``head()`` (None
    until the head is whole) and ``body()`` (None until the body is whole) or ``take()``
    (the body bytes decoded so far); ``feed_eof()`` when the peer closed. Raises
    Http1Error("protocol") for a malformed answer and BodyTooLarge past ``max_body``.
    Interim 1xx answers are skipped."""

    def __init__(self, *, head_request: bool = False, max_body: float = math.inf) -> None:
        self._buf = bytearray()
        self._pos = 0  # where unparsed bytes start
        self._head_request = head_request
        self._max_body = max_body
        self._head: Head | None = None
        self._mode = ""  # "length", "chunked", "close", "none"
        self._remaining = 0  # bytes left of the body ("length") or of the current chunk
        self._chunk_state = "size"  # "size", "data", "crlf", "trailer"
        self._body = bytearray()  # decoded body bytes not yet handed out
        self._total = 0  # decoded body bytes in all
        self._done = False
        self._eof = False
        self.received_any = False

    @property
    def extra(self) -> bool:
        """Bytes came after the answer (the connection cannot be reused)."""
        return self._done and self._pos < len(self._buf)

    @property
    def done(self) -> bool:
        """The whole body has been decoded."""
        return self._done

    def has_unread(self) -> bool:
        """Bytes were fed past what has been parsed."""
        return self._pos < len(self._buf)

    def feed(self, data: bytes | bytearray) -> None:
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
                    raise Http1Error(
                        "protocol", "RemoteProtocolError: the server closed the connection mid-head"
                    )
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
        if not self._advance():
            return None
        return bytes(self._body)

    def take(self) -> bytes:
        """The body bytes decoded since the last call (``b""`` when none; see ``done``)."""
        self._advance()
        if not self._body:
            return b""
        data = bytes(self._body)
        self._body.clear()
        return data

    def _advance(self) -> bool:
        """Decode what the buffer holds; True once the body is complete."""
        if self._done:
            return True
        if self._head is None and self.head() is None:
            return False
        mode = self._mode
        if mode == "none":
            self._done = True
        elif mode == "length":
            n = min(self._remaining, len(self._buf) - self._pos)
            if n > 0:
                self._body += self._buf[self._pos : self._pos + n]
                self._pos += n
                self._remaining -= n
                self._total += n
            self._done = self._remaining == 0
        elif mode == "chunked":
            self._chunks()
        else:  # "close": everything until the peer closes
            n = len(self._buf) - self._pos
            if self._total + n > self._max_body:
                raise BodyTooLarge()
            self._body += self._buf[self._pos :]
            self._pos += n
            self._total += n
            self._done = self._eof
        if not self._done and self._eof:
            raise Http1Error(
                "body", "RemoteProtocolError: the server closed the connection mid-body"
            )
        return self._done

    def _chunks(self) -> None:
        buf = self._buf
        while not self._done:
            state = self._chunk_state
            if state == "data":
                if self._remaining:
                    available = min(self._remaining, len(buf) - self._pos)
                    if available <= 0:
                        return
                    if self._total + available > self._max_body:
                        raise BodyTooLarge()
                    self._body += buf[self._pos : self._pos + available]
                    self._pos += available
                    self._remaining -= available
                    self._total += available
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


def encode_head(
    method: str,
    target: str,
    host: str,
    headers: Mapping[str, str],
    content_length: int | None,
) -> bytes:
    """The request line and headers. ``headers`` names are lowercase; a value holding CR or
    LF raises Http1Error."""
    lines = [f"{method} {target} HTTP/1.1\r\nhost: {host}\r\n"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            raise Http1Error("protocol", f"the {name} header holds a line break")
        lines.append(f"{name}: {value}\r\n")
    if content_length is not None:
        lines.append(f"content-length: {content_length}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")
