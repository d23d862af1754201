"""Responses of the Kubernetes client, and the translation of httpx errors at this edge.

``KubeReply`` is a whole answer (status, headers, body bytes); ``KubeStream`` a response whose
body is read as it arrives (``HttpxStream`` over httpx, ``H2WatchStream`` over the agent's own
HTTP/2 watch connections). ``translated()`` maps httpx's exceptions into the agent's tree and
``status_error_from()`` turns an error answer into the KubeStatusError subclass for its code,
keeping the Kubernetes Status message.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx
import trio

from ._errors import (
    KubeClosedError,
    KubeConnectionError,
    KubeError,
    KubeStatusError,
    KubeTimeoutError,
    status_error,
)

if TYPE_CHECKING:
    from ._kube_h2 import H2Connection, StreamState

__all__ = [
    "MAX_ERROR_BODY_BYTES",
    "MAX_RESPONSE_BYTES",
    "H2WatchStream",
    "HttpxStream",
    "KubeReply",
    "KubeStream",
    "explain",
    "retry_after",
    "status_error_from",
    "translated",
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
        message or httpx.codes.get_reason_phrase(code),
        reason=reason,
        status=status,
        method=method,
        path=path,
        retry_after=retry_after(headers),
    )


@dataclass(frozen=True, slots=True)
class KubeReply:
    """A whole answer. Unpacks as ``status, headers, content = response``."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    method: str = ""
    path: str = ""

    def __iter__(self) -> Iterator[Any]:
        return iter((self.status_code, self.headers, self.content))

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300

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


def explain(exc: BaseException) -> str:
    """The messages along an error's cause chain: httpx's own is often empty, the ssl or
    socket error underneath says what happened (``CERTIFICATE_VERIFY_FAILED``)."""
    parts: list[str] = []
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            break
        text = str(current).strip()
        if text and text not in parts:
            parts.append(text)
        current = current.__cause__ or current.__context__
    return "; ".join(parts) or "no details"


@contextmanager
def translated(method: str, path: str, host: str) -> Iterator[None]:
    """Translate httpx's errors into the agent's tree at this one edge."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise KubeTimeoutError(
            f"{method} {path}: timeout talking to {host}: {explain(exc)}"
        ) from exc
    except httpx.RequestError as exc:
        raise KubeConnectionError(
            f"{method} {path}: {host}: {type(exc).__name__}: {explain(exc)}"
        ) from exc
    except httpx.StreamError as exc:  # read after close: our doing
        raise KubeClosedError(f"{method} {path}: the response was closed: {exc}") from exc


class KubeStream:
    """A response whose body is read as it arrives. Owned by ``KubeClient.stream()``.

    ``status_code``, ``headers`` (case-insensitive), ``http_version``; the body through
    ``receive_some()`` (raw chunks as they arrive), ``read(limit)`` or ``raise_for_status()``.
    """

    def __init__(
        self,
        status_code: int,
        headers: Mapping[str, str],
        http_version: str,
        method: str,
        path: str,
        host: str,
    ) -> None:
        self.status_code = status_code
        self.headers = headers
        self.http_version = http_version
        self._method = method
        self._path = path
        self._host = host

    async def receive_some(self) -> bytes:
        """The next body chunk as it came off the network; ``b""`` at the end.

        Raises KubeConnectionError when the body is cut, KubeClosedError after close.
        """
        raise NotImplementedError

    def peer_certificate(self) -> bytes | None:
        """The DER serving certificate of the connection that carried this response."""
        return None

    async def read(self, limit: int = MAX_RESPONSE_BYTES) -> bytes:
        """The rest of the body. Raises KubeError when it is longer than ``limit`` bytes."""
        body = bytearray()
        while chunk := await self.receive_some():
            body += chunk
            if len(body) > limit:
                raise KubeError(
                    f"{self._method} {self._path}: the answer is larger than {limit} bytes"
                )
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


class HttpxStream(KubeStream):
    """A KubeStream over an httpx streaming response."""

    def __init__(self, response: httpx.Response, method: str, path: str, host: str) -> None:
        super().__init__(
            response.status_code, response.headers, response.http_version, method, path, host
        )
        self._response = response
        # httpx's iterator is an async generator; kept to close it explicitly (no GC finalizer).
        self._chunks = cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
        self._finished = False  # the body's generators have run to their end

    async def receive_some(self) -> bytes:
        with translated(self._method, self._path, self._host):
            try:
                return await self._chunks.__anext__()
            except StopAsyncIteration:
                self._finished = True
                return b""
            except BaseException:
                self._finished = True  # an exception unwound (and finished) the generators
                raise

    def peer_certificate(self) -> bytes | None:
        stream = self._response.extensions.get("network_stream")
        ssl_object = stream.get_extra_info("ssl_object") if stream is not None else None
        if ssl_object is None:
            return None
        der: bytes | None = ssl_object.getpeercert(binary_form=True)
        return der

    async def close(self) -> None:
        # httpx reads the body through a chain of async generators (httpx and httpcore
        # layers); closing the outer one leaves the inner ones suspended, and trio warns when
        # they are garbage collected (encode/httpx#3686). So an unfinished body is ended by a
        # read inside an already-cancelled scope: Cancelled raised at the socket read unwinds
        # and finishes every generator of the chain; httpcore then drops the connection (or
        # resets the HTTP/2 stream) as aclose would.
        if not self._finished:
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    while await self._chunks.__anext__():
                        pass  # data already buffered: no checkpoint until the next read
                except StopAsyncIteration:
                    pass
                except (httpx.HTTPError, httpx.StreamError):
                    pass  # closing anyway
            self._finished = True
        await self._chunks.aclose()
        await self._response.aclose()


class H2WatchStream(KubeStream):
    """A KubeStream over a stream of the agent's own HTTP/2 connection (see _kube_h2)."""

    def __init__(
        self, connection: H2Connection, state: StreamState, method: str, path: str, host: str
    ) -> None:
        headers = state.headers if state.headers is not None else httpx.Headers()
        super().__init__(state.status_code, headers, "HTTP/2", method, path, host)
        self._connection = connection
        self._state = state

    async def receive_some(self) -> bytes:
        return await self._connection.receive_some(self._state)

    def peer_certificate(self) -> bytes | None:
        return self._connection.peer_certificate()

    async def close(self) -> None:
        await self._connection.close_stream(self._state)
