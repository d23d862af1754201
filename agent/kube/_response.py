"""Responses of the Kubernetes client, and its one translation of errors into KubeError.

``KubeReply`` is a whole answer (status, headers, body bytes); ``KubeStream`` a response whose
body is read as it arrives, over any transport's Exchange (agent/kube/_seam.py).
``translate()`` turns a transport's TransportError into KubeConnectionError / KubeTimeoutError
(the one place that does), and ``status_error_from()`` an error answer into the
KubeStatusError subclass for its code, keeping the Kubernetes Status message.
"""

from __future__ import annotations

import email.utils
import http
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import (
    KubeClosedError,
    KubeConnectionError,
    KubeError,
    KubeStatusError,
    KubeTimeoutError,
    status_error,
)
from ._seam import Exchange, TransportError

__all__ = [
    "MAX_ERROR_BODY_BYTES",
    "MAX_RESPONSE_BYTES",
    "KubeReply",
    "KubeStream",
    "retry_after",
    "status_error_from",
    "translate",
]

MAX_RESPONSE_BYTES = 256 * 2**20  # request() bodies: a 500-object list page is a few MB
MAX_ERROR_BODY_BYTES = 64 * 1024  # a Status is small; do not read a huge error page


def retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def translate(
    exc: TransportError, method: str, path: str, host: str
) -> KubeConnectionError | KubeClosedError:
    """The KubeError for a transport's failure (the cause is kept by the caller's ``from``)."""
    if exc.ours:
        return KubeClosedError(f"{method} {path}: {exc}")
    error = KubeTimeoutError if exc.timeout else KubeConnectionError
    return error(f"{method} {path}: {host}: {exc}")


def _reason_phrase(code: int) -> str:
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return ""


def status_error_from(
    code: int, headers: Mapping[str, str], body: bytes, method: str, path: str
) -> KubeStatusError:
    """The KubeStatusError for an error answer, keeping the Status message when there is one."""
    status: dict[str, Any] | None = None
    try:
        decoded = json.loads(body)
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            status = decoded
    except ValueError:
        pass
    if status is not None:
        message = str(status.get("message") or "")
        reason = str(status.get("reason") or "")
    else:
        message = body[:500].decode(errors="replace").strip()
        reason = ""
    return status_error(
        code,
        message or _reason_phrase(code),
        reason=reason,
        status=status,
        method=method,
        path=path,
        retry_after=retry_after(headers),
    )


@dataclass(frozen=True, slots=True)
class KubeReply:
    """A whole answer: status, headers (names lowercase), body, and the request it answers."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    method: str = ""
    path: str = ""

    def raise_for_status(self) -> None:
        """Raise the KubeStatusError subclass for a status >= 400."""
        if self.status_code >= 400:
            raise status_error_from(
                self.status_code, self.headers, self.content, self.method, self.path
            )

    def json(self) -> Any:
        """The body decoded as JSON. Raises KubeError when it is not JSON."""
        try:
            return json.loads(self.content)
        except ValueError as exc:
            raise KubeError(f"{self.method} {self.path}: the answer is not JSON: {exc}") from exc


class KubeStream:
    """A response whose body is read as it arrives. Owned by ``KubeClient.stream()``.

    ``status_code``, ``headers`` (names lowercase), ``http_version`` ("HTTP/2" or
    "HTTP/1.1"); the body through ``receive_some()`` (raw chunks as they arrive),
    ``read(limit)`` or ``raise_for_status()``.
    """

    def __init__(self, exchange: Exchange, method: str, path: str, host: str) -> None:
        self._exchange = exchange
        self.status_code = exchange.status_code
        self.headers = exchange.headers
        self.http_version = exchange.http_version
        self._method = method
        self._path = path
        self._host = host
        self._closed = False

    async def receive_some(self) -> bytes:
        """The next body chunk as it came off the network; ``b""`` at the end.

        Raises KubeConnectionError when the body is cut, KubeClosedError after close.
        """
        if self._closed:
            raise KubeClosedError(f"{self._method} {self._path}: the response was closed")
        try:
            return await self._exchange.receive_some()
        except TransportError as exc:
            raise translate(exc, self._method, self._path, self._host) from exc

    def peer_certificate(self) -> bytes | None:
        """The DER serving certificate of the connection that carried this response."""
        return self._exchange.peer_certificate()

    async def read(self, limit: int = MAX_RESPONSE_BYTES) -> bytes:
        """The rest of the body. Raises KubeError when it is longer than ``limit`` bytes."""
        first = await self.receive_some()
        second = await self.receive_some() if first and len(first) <= limit else b""
        if not second and len(first) <= limit:
            return first  # the usual short answer: one chunk, no copy
        body = bytearray(first)
        body += second
        while len(body) <= limit and (chunk := await self.receive_some()):
            body += chunk
        if len(body) > limit:
            raise KubeError(f"{self._method} {self._path}: the answer is larger than {limit} bytes")
        return bytes(body)

    async def raise_for_status(self) -> None:
        """For a status >= 400: read (at most 64 KiB of) the body and raise KubeStatusError."""
        if self.status_code < 400:
            return
        body = bytearray()
        while len(body) < MAX_ERROR_BODY_BYTES and (chunk := await self.receive_some()):
            body += chunk
        raise status_error_from(
            self.status_code, self.headers, bytes(body), self._method, self._path
        )

    async def close(self) -> None:
        """Release the response (the client does this when the ``stream()`` block exits)."""
        if not self._closed:
            self._closed = True
            await self._exchange.aclose()
