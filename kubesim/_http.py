"""The raw-ASGI plumbing every handler shares: the request, answers, content negotiation.

Handlers answer with :func:`respond` (one body) or stream with :class:`BodyWriter`; errors are
:class:`~kubesim._errors.ApiError` raised anywhere and answered once, by the app, as Status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from kubesim._auth import User
from kubesim._errors import ApiError

__all__ = [
    "JSON",
    "META_CT",
    "META_LIST_CT",
    "BodyWriter",
    "Receive",
    "Request",
    "Scope",
    "Send",
    "negotiate_metadata",
    "respond",
    "respond_error",
    "respond_json",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = "application/json"
META_CT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
META_LIST_CT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
MAX_BODY = 3 * 2**20  # the API server's own request body limit
_encode = msgspec.json.Encoder().encode


@dataclass(slots=True)
class Request:
    """One HTTP request, parsed just enough."""

    scope: Scope
    receive: Receive
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    user: User | None = None
    verb: str = ""
    resource: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    _body: bytes | None = None

    @classmethod
    def from_scope(cls, scope: Scope, receive: Receive) -> Request:
        headers: dict[str, str] = {}
        for name, value in scope.get("headers", ()):
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]},{text}" if key in headers else text
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        # ASGI's "path" is already percent-decoded.
        return cls(scope, receive, scope["method"], scope["path"], query, headers)

    def flag(self, name: str) -> bool:
        return self.query.get(name, "").lower() in ("true", "1")

    def int_param(self, name: str, default: int = 0) -> int:
        text = self.query.get(name)
        if text in (None, ""):
            return default
        try:
            return int(text)
        except ValueError:
            raise ApiError(400, "BadRequest", f"{name}: invalid integer {text!r}") from None

    @property
    def body_read(self) -> bytes:
        """What ``body()`` has read so far (b"" before it is called)."""
        return self._body or b""

    async def body(self, limit: int = MAX_BODY) -> bytes:
        """The whole request body (read once, then kept); raises ApiError 413 past ``limit``
        bytes."""
        if self._body is not None:
            return self._body
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise ApiError(413, "RequestEntityTooLarge", "the request body is too large")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        self._body = b"".join(chunks)
        return self._body


def _headers(content_type: str, extra: list[tuple[str, str]] | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", content_type.encode()), (b"cache-control", b"no-cache, private")]
    for name, value in extra or ():
        headers.append((name.encode(), value.encode()))
    return headers


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str = JSON,
    extra: list[tuple[str, str]] | None = None,
) -> None:
    headers = _headers(content_type, extra)
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, obj: Any, content_type: str = JSON) -> None:
    await respond(send, status, _encode(obj), content_type)


async def respond_error(send: Send, error: ApiError, retry_after: int | None = None) -> None:
    extra = [("retry-after", str(retry_after))] if retry_after else None
    await respond(send, error.code, _encode(error.status()), JSON, extra)


class BodyWriter:
    """A streamed (chunked) response: ``start`` once, ``write`` chunks, ``end``."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.bytes_sent = 0

    async def start(self, status: int, content_type: str = JSON) -> None:
        headers = _headers(content_type, None)
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def write(self, data: bytes) -> None:
        self.bytes_sent += len(data)
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self) -> None:
        await self._send({"type": "http.response.body", "body": b""})


def negotiate_metadata(accept: str | None, *, as_list: bool) -> bool:
    """True when the client asked for PartialObjectMetadata(List) as its first choice we serve.

    Raises ApiError 406 when every media type offered is one kubesim cannot produce (protobuf,
    Table, CBOR), like the API server does.
    """
    if not accept:
        return False
    wanted = "partialobjectmetadatalist" if as_list else "partialobjectmetadata"
    for media in accept.split(","):
        parts = [p.strip() for p in media.split(";")]
        base = parts[0].lower()
        params = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        params = {k.strip().lower(): v.strip().lower() for k, v in params.items()}
        if base not in ("application/json", "application/*", "*/*", "*"):
            continue
        as_ = params.get("as")
        if as_ is None:
            return False
        if (
            as_ == wanted
            and params.get("g") == "meta.k8s.io"
            and params.get("v")
            in (
                "v1",
                "v1beta1",
            )
        ):
            return True
    raise ApiError(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, "
        + (META_LIST_CT if as_list else META_CT),
    )
