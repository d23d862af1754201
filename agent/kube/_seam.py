"""The seams of the Kubernetes client: what the data path needs, and what a transport gives.

Two levels, each a Protocol:

- :class:`KubeTransport` / :class:`KubeResponse`: a streamed request, all the reflector, the
  paged list and discovery need from the client. agent/kube/_client.py's ``KubeClient``
  satisfies it; tests use that same client against kubesim on loopback. Promises: ``stream()``
  returns the response for every HTTP status (a 410 or 403 is not raised: the caller reads the
  Status body itself) and applies the account's authentication; ``receive_some()`` returns the
  next raw body bytes as they came off the network, ``b""`` at the end (bytes already received
  come back at once; it waits, cancellably, only when there are none); a network or peer
  failure raises ``agent._errors.KubeConnectionError``.

- :class:`HttpTransport` / :class:`Exchange`: one HTTP version's connections to one API
  server (agent/kube/_h2.py for HTTP/2 over TLS, agent/kube/_http1.py for HTTP/1.1: plain
  http, proxies, servers without h2). ``open(request)`` sends a request and returns once the
  response head arrived; the body is read from the exchange, which is closed after (an
  unfinished body resets the stream or drops the connection). A transport knows no
  credentials, deadlines, retries or KubeError: it raises :class:`TransportError`, which says
  what the server may have seen, and ``KubeClient`` decides and translates above it, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "Exchange",
    "HttpTransport",
    "KubeResponse",
    "KubeTransport",
    "Request",
    "TransportError",
]


class KubeResponse(Protocol):
    """An HTTP response whose body has not been read yet."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def receive_some(self) -> bytes: ...


class KubeTransport(Protocol):
    """Something that opens streamed requests against one API server."""

    def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[KubeResponse]: ...


@dataclass(frozen=True, slots=True)
class Request:
    """What a transport sends: ``target`` is the path with its query, already encoded;
    ``headers`` have lowercase names and include the credentials."""

    method: str
    target: str
    headers: Mapping[str, str]
    body: bytes | None = None


class Exchange(Protocol):
    """A request whose response head arrived. Owned by whoever opened it: ``aclose()`` it."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The response's header fields, names lowercase."""
        ...

    @property
    def http_version(self) -> str: ...

    async def receive_some(self) -> bytes:
        """The next body bytes; ``b""`` at the end. Raises TransportError."""
        ...

    def peer_certificate(self) -> bytes | None:
        """The DER serving certificate of the connection (None without TLS)."""
        ...

    async def aclose(self) -> None:
        """Release the exchange: the connection goes back to its pool when the body was read
        to its end, else the stream is reset (HTTP/2) or the connection closed (HTTP/1.1).
        Never waits (no checkpoint): safe in a cancelled scope, needs no shield."""
        ...


class HttpTransport(Protocol):
    """One HTTP version's connections to one API server."""

    async def open(self, request: Request) -> Exchange:
        """Send ``request``; return once the response head arrived. Raises TransportError."""
        ...

    async def aclose(self) -> None: ...


class TransportError(Exception):
    """A request failed below HTTP: the connection, TLS, or the peer's framing.

    Raised by transports and translated by ``KubeClient`` only (into KubeConnectionError or
    KubeTimeoutError); never leaves the client. What the server may have seen decides whether
    the client may send the request again:

    - ``stage``: ``"connect"`` (TCP, proxy tunnel, TLS: nothing of the request was sent),
      ``"send"``, ``"head"`` (waiting for the response head), ``"body"`` or ``"protocol"``;
    - ``unprocessed``: the server surely did not process it (nothing was sent, or it said so:
      a GOAWAY that did not cover it, REFUSED_STREAM): any method may go again;
    - ``unanswered``: the server closed or reset the connection before any byte of the
      response (a pooled connection it dropped): a safe method (GET, HEAD, OPTIONS) may go
      again, anything else may have been processed;
    - ``timeout``: the connect deadline passed;
    - ``ours``: we closed the connection (the client was closed), the peer did nothing.
    """

    def __init__(
        self,
        message: str,
        *,
        stage: str,
        unprocessed: bool = False,
        unanswered: bool = False,
        timeout: bool = False,
        ours: bool = False,
    ) -> None:
        super().__init__(message)
        self.stage = stage
        self.unprocessed = unprocessed or stage == "connect"
        self.unanswered = unanswered
        self.timeout = timeout
        self.ours = ours
