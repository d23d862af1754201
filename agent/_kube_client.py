"""The Kubernetes API client: HTTP/2 first, credentials applied, errors translated here.

One :class:`KubeClient` per account. Watches go through the agent's own HTTP/2 connections
(agent/_kube_h2.py), up to 250 per TCP connection, or HTTP/1.1 connections when h2 is not
available -- see the class docstring for why httpx's HTTP/2 cannot carry watches. Short
requests (``request()``) take the cheapest path the server allows: the same own HTTP/2
connections over https with h2, the agent's own HTTP/1.1 keep-alive pool
(agent/_kube_http1.py) over plain http, and httpx otherwise (a proxy, no h2 over TLS, no
nursery, or a body larger than the HTTP/2 window open now).

Two ways to talk:

* ``await client.request(method, path, ...)`` -> :class:`KubeReply` (status, headers, body
  bytes, capped): for lists, discovery, operations. Any status is returned; retries follow
  ``kubernetes.retries`` (connection failures, timeouts, 429/5xx when asked to), waiting
  ``backOffMs`` or the server's ``Retry-After``.
* ``async with client.stream(method, path, ...) as response`` -> :class:`KubeStream`: the body
  as raw chunks as they arrive (``receive_some()``), for watches. Never retried here: the
  reflector resumes from its resourceVersion.

Errors: ``KubeConnectionError`` (the network or the peer broke it; ``KubeTimeoutError`` for
``timeoutSeconds``), ``KubeClosedError`` (we closed the client), and ``KubeStatusError``
subclasses, raised by ``raise_for_status()``, with the Kubernetes Status kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import trio

from ._config_schema import AccountConfig, KubernetesConfig, RetriesConfig
from ._errors import KubeClosedError, KubeConnectionError, KubeError, KubeTimeoutError
from ._kube_auth import Credential, KubeAuth, credential_source
from ._kube_h2 import H2Connection, H2Pool
from ._kube_http1 import BodyTooLarge, Http1Error, Http1Pool
from ._kube_proxy import select_proxy
from ._kube_response import (
    MAX_ERROR_BODY_BYTES,
    MAX_RESPONSE_BYTES,
    H2WatchStream,
    HttpxStream,
    KubeReply,
    KubeStream,
    explain,
    retry_after,
    translated,
)
from ._kube_tls import load_client_certificate, ssl_context
from ._kubeconfig import (
    SERVICE_ACCOUNT_DIR,
    ClusterAccess,
    load_kubeconfig,
    parse_kubeconfig,
    service_account_access,
)

__all__ = [
    "ClusterIdentity",
    "KubeClient",
    "KubeReply",
    "KubeStream",
    "access_for_account",
    "open_kube_client",
]

log = logging.getLogger("agent.kube")

CONNECT_TIMEOUT = 30.0  # seconds for TCP + TLS; a silent network otherwise hangs a dial forever
MAX_RETRY_AFTER = 60.0
STREAMS_PER_CONNECTION = 100  # httpcore's h2 cap per connection (see KubeClient)
_DEFAULT_RETRIES = RetriesConfig()
_DEFAULT_KUBERNETES = KubernetesConfig()
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
MAX_UNPROCESSED_RESENDS = 3  # a request refused unprocessed (GOAWAY) is sent again this often


class _ConnectFailed(Exception):
    """The cause of a KubeConnectionError raised before anything was sent (safe to retry)."""


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    """What the server is told about the cluster: host, serving-cert fingerprint, version.

    ``cert_fingerprint`` is the lowercase hex SHA-256 of the DER certificate ("" over http).
    """

    host: str
    cert_fingerprint: str
    version: Mapping[str, Any]


@dataclass(slots=True)
class _Lane:
    """One httpx client (connection pool) and how many requests it carries now."""

    client: httpx.AsyncClient
    active: int = 0


class KubeClient:
    """An HTTP client for one API server, with auth, retries and error translation.

    HTTP/2 and watches. Short requests (lists, discovery, operations) go as the module
    docstring says; through httpx they share one HTTP/2 connection. Watches (``watch=1``)
    cannot go there: httpcore 1.0 reads an HTTP/2 connection under one lock handed out
    first come first served, whose holder blocks in the socket read until *any* frame
    arrives, so with quiet watches open a response that already arrived waits until some
    other data comes (measured: a request behind 10 idle watches never completed); it also
    parks the 101st stream of a connection. So watches use the agent's own HTTP/2
    connections (agent/_kube_h2.py: one reader task each, up to 250 watches per TCP
    connection) when the client has a ``nursery`` for those reader tasks (as
    ``open_kube_client`` gives it) and the server speaks h2 without a proxy in between;
    otherwise HTTP/1.1, one connection per watch. ``watch_http2=True`` forces watches onto
    httpx's HTTP/2 instead ("lanes" of ``streams_per_connection`` streams), for comparison.

    Use as ``async with KubeClient(access, ...) as client`` (or ``open_kube_client``); closing
    closes the connection pool. Requests after closing raise KubeClosedError.
    """

    def __init__(
        self,
        access: ClusterAccess,
        *,
        retries: RetriesConfig = _DEFAULT_RETRIES,
        timeout_seconds: float = 0.0,
        no_proxy: bool = False,
        environ: Mapping[str, str] = os.environ,
        http2: bool = True,
        max_connections: int = 1024,
        watch_http2: bool = False,
        streams_per_connection: int = STREAMS_PER_CONNECTION,
        nursery: trio.Nursery | None = None,
    ) -> None:
        self.access = access
        self.base_url = access.server
        self.host = urlsplit(access.server).netloc
        self.retries = retries
        self.timeout_seconds = timeout_seconds
        # One SSLContext per pool: httpcore sets the ALPN protocols on the context it is given
        # (["http/1.1"] for an HTTP/1.1 pool), so a shared one would turn HTTP/2 off for all.
        ssl_context(access)  # fail early on a bad CA
        self._contexts: list[ssl.SSLContext] = []
        self._installed_cert: tuple[bytes, bytes] | None = None
        if access.client_cert_pem and access.client_key_pem:
            self._install_cert(Credential(None, access.client_cert_pem, access.client_key_pem))
        basic = (access.username, access.password or "") if access.username else None
        self.proxy = select_proxy(
            access.server, environ, ignore_environment=no_proxy, proxy_url=access.proxy_url
        )
        self._extensions = (
            {"sni_hostname": access.tls_server_name} if access.tls_server_name else {}
        )
        self._auth = KubeAuth(
            credential_source(access, environ=environ),
            basic=basic,
            on_credential=self._install_cert,
        )
        self._http2 = http2
        self._watch_http2 = http2 and watch_http2
        self._http1_lane: _Lane | None = None
        self._max_connections = max_connections
        self.streams_per_connection = streams_per_connection
        self._lanes: list[_Lane] = []
        self._closed = False
        self._h2_pool: H2Pool | None = None
        parts = urlsplit(access.server)
        # Plain HTTP with no proxy: short requests take the agent's own HTTP/1.1 pool
        # (agent/_kube_http1.py), ~4x less CPU per request than httpx at 64 in flight.
        self._http1: Http1Pool | None = None
        self._base_path = parts.path.rstrip("/")
        if parts.scheme == "http" and self.proxy is None:
            self._http1 = Http1Pool(
                parts.hostname or "",
                parts.port or 80,
                max_connections=max_connections,
                connect_timeout=CONNECT_TIMEOUT,
            )
        if nursery is not None and http2 and parts.scheme == "https" and self.proxy is None:
            self._h2_pool = H2Pool(
                parts.hostname or "",
                parts.port or 443,
                ssl_context=self._new_context(),
                server_hostname=access.tls_server_name or parts.hostname or "",
                nursery=nursery,
            )

    def _new_context(self, *, keep: bool = True) -> ssl.SSLContext:
        """A context with the CA, TLS options and current client certificate. Kept ones get
        new certificates when an exec plugin hands out one."""
        context = ssl_context(self.access)
        if self._installed_cert is not None:
            load_client_certificate(context, *self._installed_cert)
        if keep:
            self._contexts.append(context)
        return context

    def _new_lane(self, *, http2: bool) -> _Lane:
        client = httpx.AsyncClient(
            base_url=self.base_url,
            http2=http2,
            verify=self._new_context(),
            auth=self._auth,
            proxy=self.proxy,
            trust_env=False,  # proxies are chosen above, with the noProxy options
            limits=httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=self._max_connections,
                keepalive_expiry=60.0,
            ),
            timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT),
            headers={"User-Agent": "kubesvc-agent", "Accept": "application/json"},
        )
        lane = _Lane(client)
        self._lanes.append(lane)
        return lane

    def _lane(self, params: Mapping[str, str] | None) -> _Lane:
        """Where a request goes: watches to HTTP/1.1 (see the class docstring), the rest to
        the first HTTP/2 pool with a free stream slot (a new pool when all are full)."""
        watch = params is not None and str(params.get("watch", "")).lower() in ("1", "true")
        if not self._http2 or (watch and not self._watch_http2):
            if self._http1_lane is None:
                self._http1_lane = self._new_lane(http2=False)
            return self._http1_lane
        for lane in self._lanes:
            if lane is not self._http1_lane and lane.active < self.streams_per_connection:
                return lane
        return self._new_lane(http2=True)

    @property
    def connection_pools(self) -> int:
        """How many httpx pools the client has opened (an HTTP/2 pool is one connection)."""
        return len(self._lanes)

    def _install_cert(self, credential: Credential) -> None:
        if not (credential.client_cert_pem and credential.client_key_pem):
            return
        pair = (credential.client_cert_pem, credential.client_key_pem)
        if pair != self._installed_cert:
            # New connections present the new certificate; open ones keep theirs.
            for context in self._contexts:
                load_client_certificate(context, *pair)
            self._installed_cert = pair

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection. Idempotent."""
        self._closed = True
        for lane in self._lanes:
            await lane.client.aclose()
        if self._http1 is not None:
            await self._http1.aclose()
        if self._h2_pool is not None:
            await self._h2_pool.aclose()

    @property
    def watch_connections(self) -> int:
        """How many of the agent's own HTTP/2 connections carry watches now."""
        return self._h2_pool.connections if self._h2_pool is not None else 0

    async def _open_h2_watch(
        self,
        method: str,
        path: str,
        params: Mapping[str, str],
        headers: Mapping[str, str] | None,
    ) -> H2WatchStream | None:
        """A watch on the agent's HTTP/2 connections, or None when the server has no h2."""
        assert self._h2_pool is not None
        target = self._target(path, params)  # with the server URL's path, as requests have
        for attempt in range(2):
            # Credentials first: an exec plugin's client certificate must be in the TLS
            # context before the connection is made.
            auth_headers, credential = await self._auth.headers()
            connection = await self._h2_connection(self._h2_pool, method, path)
            if connection is None:
                return None
            merged = _short_request_headers(headers)
            merged.update({k.lower(): v for k, v in auth_headers.items()})
            state = connection.begin(target, merged)
            try:
                await connection.wait_response(state)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await connection.close_stream(state)
                raise
            if state.status_code == 401 and attempt == 0 and self._auth.refused(credential):
                await connection.close_stream(state)
                continue
            return H2WatchStream(connection, state, method, path, self.host)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_open(self, method: str, path: str) -> None:
        if self._closed:
            raise KubeClosedError(f"{method} {path}: the client for {self.host} is closed")

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
    ) -> AsyncIterator[KubeStream]:
        """Send a request and give its response with the body unread (any status).

        ``timeoutSeconds`` bounds the wait for the response headers only: a watch's body
        lasts as long as the watch. Raises KubeConnectionError / KubeTimeoutError /
        KubeClosedError / KubeCredentialError; the response is closed when the block exits.
        """
        self._check_open(method, path)
        watch = params is not None and str(params.get("watch", "")).lower() in ("1", "true")
        if (
            watch
            and method == "GET"
            and content is None
            and self._h2_pool is not None
            and not self._h2_pool.unsupported
        ):
            assert params is not None
            try:
                with trio.fail_after(self.timeout_seconds or float("inf")):
                    h2_stream = await self._open_h2_watch(method, path, params, headers)
            except trio.TooSlowError as exc:
                raise KubeTimeoutError(
                    f"{method} {path}: timeout: no answer from {self.host} within "
                    f"{self.timeout_seconds} s"
                ) from exc
            if h2_stream is not None:
                try:
                    yield h2_stream
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(5):
                        await h2_stream.close()
                return
        lane = self._lane(params)
        request = lane.client.build_request(
            method,
            path,
            params=params,
            headers=headers,
            content=content,
            extensions=self._extensions,
        )
        lane.active += 1
        try:
            with translated(method, path, self.host):
                try:
                    with trio.fail_after(self.timeout_seconds or float("inf")):
                        response = await lane.client.send(request, stream=True)
                except trio.TooSlowError as exc:
                    raise KubeTimeoutError(
                        f"{method} {path}: timeout: no answer from {self.host} within "
                        f"{self.timeout_seconds} s"
                    ) from exc
            stream = HttpxStream(response, method, path, self.host)
            try:
                yield stream
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await stream.close()
        finally:
            lane.active -= 1

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> KubeReply:
        """Send a request and read the whole answer (any status), retrying per the retries
        config. Raises KubeConnectionError/KubeTimeoutError when the last attempt failed on
        the network, KubeClosedError, KubeCredentialError, or KubeError for a body larger
        than ``max_bytes``."""
        attempt = 0
        while True:
            try:
                response = await self._request_once(
                    method,
                    path,
                    params=params,
                    headers=headers,
                    content=content,
                    max_bytes=max_bytes,
                )
            except KubeConnectionError as exc:
                delay = self._retry_delay(method, exc, None, attempt)
                if delay is None:
                    raise
                log.info("%s; retrying in %.1f s", exc, delay)
            else:
                delay = self._retry_delay(method, None, response, attempt)
                if delay is None:
                    return response
                log.info(
                    "%s %s: %s from %s; retrying in %.1f s",
                    method,
                    path,
                    response.status_code,
                    self.host,
                    delay,
                )
            attempt += 1
            await trio.sleep(delay)

    async def _request_once(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
        content: bytes | None,
        max_bytes: int,
    ) -> KubeReply:
        try:
            with trio.fail_after(self.timeout_seconds or float("inf")):
                if self._http1 is not None:
                    return await self._request_http1(
                        self._http1, method, path, params, headers, content, max_bytes
                    )
                if self._h2_pool is not None and not self._h2_pool.unsupported:
                    reply = await self._request_h2(
                        self._h2_pool, method, path, params, headers, content, max_bytes
                    )
                    if reply is not None:
                        return reply
                async with self.stream(
                    method, path, params=params, headers=headers, content=content
                ) as stream:
                    body = await stream.read(max_bytes)
                    return KubeReply(stream.status_code, stream.headers, body, method, path)
        except trio.TooSlowError as exc:
            raise KubeTimeoutError(
                f"{method} {path}: timeout: {self.host} did not answer within "
                f"{self.timeout_seconds} s"
            ) from exc

    async def _request_http1(
        self,
        pool: Http1Pool,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
        content: bytes | None,
        max_bytes: int,
    ) -> KubeReply:
        """One request on the HTTP/1.1 pool, with the credential's header; a 401 with a
        refreshable credential is sent once more with the fresh one (as KubeAuth does)."""
        self._check_open(method, path)
        target = self._target(path, params)
        merged = _short_request_headers(headers)
        length = len(content) if content is not None else None
        if length is None and method in ("POST", "PUT", "PATCH"):
            length = 0
        auth_headers, credential = await self._auth.headers()
        for attempt in range(2):
            merged.update({k.lower(): v for k, v in auth_headers.items()})
            try:
                head = pool.encode_head(method, target, merged, length)
                status, reply_headers, body = await pool.request(
                    method, head, content, max_bytes=max_bytes
                )
            except Http1Error as exc:
                error = KubeTimeoutError if exc.timeout else KubeConnectionError
                raise error(f"{method} {path}: {self.host}: {exc}") from exc
            except BodyTooLarge as exc:
                raise KubeError(
                    f"{method} {path}: the answer is larger than {max_bytes} bytes"
                ) from exc
            if status == 401 and attempt == 0:
                fresh = await self._refreshed_credential(credential)
                if fresh is not None:
                    auth_headers, credential = fresh
                    continue
            return KubeReply(status, reply_headers, body, method, path)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _refreshed_credential(
        self, credential: Credential
    ) -> tuple[dict[str, str], Credential] | None:
        """After a 401: the headers and credential to send once more with, or None when the
        credential cannot be refreshed or came back the same (as KubeAuth does for httpx)."""
        if not self._auth.refused(credential):
            return None
        log.info("401 from %s: refreshing the credential", self.host)
        fresh_headers, fresh = await self._auth.headers()
        return None if fresh == credential else (fresh_headers, fresh)

    def _target(self, path: str, params: Mapping[str, str] | None) -> str:
        target = quote(self._base_path + path, safe="/:@!$&'()*+,;=~%-._")
        return f"{target}?{httpx.QueryParams(params)}" if params else target

    async def _h2_connection(self, pool: H2Pool, method: str, path: str) -> H2Connection | None:
        """A connection of the agent's own HTTP/2 pool with a slot reserved, or None when the
        server does not speak h2. Raises KubeTimeoutError / KubeConnectionError (nothing was
        sent: the cause is _ConnectFailed)."""
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                return await pool.acquire()
        except trio.TooSlowError as exc:
            raise KubeTimeoutError(
                f"{method} {path}: timeout connecting to {self.host}"
            ) from _ConnectFailed(str(exc))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            failed = _ConnectFailed(explain(exc))
            failed.__cause__ = exc
            raise KubeConnectionError(
                f"{method} {path}: {self.host}: cannot connect: {explain(exc)}"
            ) from failed

    async def _request_h2(
        self,
        pool: H2Pool,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
        content: bytes | None,
        max_bytes: int,
    ) -> KubeReply | None:
        """One request on the agent's own HTTP/2 connections (the watches' pool), or None
        when it must go through httpx (no h2, or a body larger than the flow-control window
        open now). A 401 with a refreshable credential is sent once more with the fresh one;
        a request the server says it never processed (GOAWAY, REFUSED_STREAM) is sent again
        on another connection, whatever its method.

        Why: httpx's HTTP/2 cost ~4.5 ms of CPU per request at 64 in flight, and it failed the
        requests above a GOAWAY's last stream instead of sending them again."""
        self._check_open(method, path)
        target = self._target(path, params)
        merged = _short_request_headers(headers)
        if content:
            merged["content-length"] = str(len(content))
        auth_headers, credential = await self._auth.headers()
        refreshed = False
        for _ in range(MAX_UNPROCESSED_RESENDS + 2):
            merged.update({k.lower(): v for k, v in auth_headers.items()})
            connection = await self._h2_connection(pool, method, path)
            if connection is None:
                return None
            state = connection.begin_request(method, target, merged, content)
            if state is None:
                return None
            body = bytearray()
            try:
                await connection.wait_response(state)
                while chunk := await connection.receive_some(state):
                    body += chunk
                    if len(body) > max_bytes:
                        raise KubeError(
                            f"{method} {path}: the answer is larger than {max_bytes} bytes"
                        )
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise KubeConnectionError(
                    f"{method} {path}: {self.host}: the HTTP/2 connection broke: {exc!r}"
                ) from exc
            except KubeConnectionError:
                # Unprocessed (above a GOAWAY's last stream, or refused): send it again. A
                # connection that said GOAWAY and then broke may have lost an answer to a
                # request it took: sent again only when repeating it is harmless (as Go's
                # client does).
                if state.unprocessed or (connection.closed and method in IDEMPOTENT):
                    log.info(
                        "%s %s: %s did not process it; sending it again", method, path, self.host
                    )
                    continue
                raise
            finally:
                with trio.CancelScope(shield=True):
                    await connection.close_stream(state)
            if state.status_code == 401 and not refreshed:
                refreshed = True
                fresh = await self._refreshed_credential(credential)
                if fresh is not None:
                    auth_headers, credential = fresh
                    continue
            reply_headers = state.headers if state.headers is not None else httpx.Headers()
            return KubeReply(state.status_code, reply_headers, bytes(body), method, path)
        raise KubeConnectionError(
            f"{method} {path}: {self.host} did not process the request "
            f"{MAX_UNPROCESSED_RESENDS + 1} times (GOAWAY or REFUSED_STREAM)"
        )

    def _retry_delay(
        self,
        method: str,
        error: KubeConnectionError | None,
        response: KubeReply | None,
        attempt: int,
    ) -> float | None:
        """Seconds to wait before another attempt, or None to stop.

        Retried: errors whose message contains one of ``retryableErrors`` (``timeout`` matches
        timeouts), any network error or 5xx with ``retryAnyError``, and 429 (the server asked
        to come back). Non-idempotent requests (POST, PATCH) are retried only when they
        surely were not processed: a failed connect, or a 429.
        """
        policy = self.retries
        if not policy.enabled or attempt >= policy.max_retries:
            return None
        delay = policy.back_off_ms / 1000.0
        if response is not None:
            code = response.status_code
            if code == 429:
                retry = True
            elif code >= 500 and method in IDEMPOTENT:
                text = response.content[:2000].decode(errors="replace").lower()
                retry = policy.retry_any_error or any(
                    fragment.lower() in text for fragment in policy.retryable_errors
                )
            else:
                retry = False
            if retry:
                hint = retry_after(response.headers)
                if hint is not None:
                    delay = max(delay, min(hint, MAX_RETRY_AFTER))
            return delay if retry else None
        assert error is not None
        cause = error.__cause__
        not_sent = isinstance(
            cause, httpx.ConnectError | httpx.ConnectTimeout | _ConnectFailed
        ) or (isinstance(cause, Http1Error) and cause.stage == "connect")
        if method not in IDEMPOTENT and not not_sent:
            return None
        text = str(error).lower()
        matched = any(fragment.lower() in text for fragment in policy.retryable_errors)
        return delay if matched or policy.retry_any_error or not_sent else None

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET and decode JSON. Raises KubeStatusError subclasses for >= 400."""
        response = await self.request("GET", path, params=params)
        response.raise_for_status()
        return response.json()

    async def identity(self) -> ClusterIdentity:
        """API host, SHA-256 of the serving certificate, and ``/version``. Raises KubeError."""
        async with self.stream("GET", "/version") as stream:
            der = stream.peer_certificate()
            await stream.raise_for_status()
            body = await stream.read(MAX_ERROR_BODY_BYTES)
        try:
            version = json.loads(body)
        except ValueError as exc:
            raise KubeError(f"GET /version: the answer is not JSON: {exc}") from exc
        if der is None and self.base_url.startswith("https://"):
            der = await self._fetch_certificate()
        fingerprint = hashlib.sha256(der).hexdigest() if der else ""
        return ClusterIdentity(self.host, fingerprint, version if isinstance(version, dict) else {})

    async def _fetch_certificate(self) -> bytes | None:
        """Connect once, directly, and read the serving certificate (when httpx hid it)."""
        parts = urlsplit(self.base_url)
        host, port = parts.hostname or "", parts.port or 443
        with translated("CONNECT", "/", self.host):
            try:
                with trio.fail_after(CONNECT_TIMEOUT):
                    tcp = await trio.open_tcp_stream(host, port)
                    stream = trio.SSLStream(
                        tcp,
                        self._new_context(keep=False),
                        server_hostname=self.access.tls_server_name or host,
                        https_compatible=True,
                    )
                    try:
                        await stream.do_handshake()
                        der: bytes | None = stream.getpeercert(binary_form=True)
                    finally:
                        await trio.aclose_forcefully(stream)
            except (OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
                raise KubeConnectionError(
                    f"cannot read the serving certificate of {self.host}: {exc!r}"
                ) from exc
        return der


def access_for_account(
    account: AccountConfig,
    *,
    environ: Mapping[str, str] = os.environ,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> ClusterAccess:
    """The ClusterAccess an account's config names (blocking file I/O). Raises ConfigError."""
    if account.service_account:
        access = service_account_access(service_account_dir, environ)
    elif account.kubeconfig_contents is not None:
        access = parse_kubeconfig(
            account.kubeconfig_contents,
            source=f"account {account.name} kubeconfigContents",
            context=account.context,
        )
    else:
        access = load_kubeconfig(account.kube_config_file, context=account.context, environ=environ)
    if account.insecure:
        access = replace(access, insecure_skip_tls_verify=True)
    return access


@asynccontextmanager
async def open_kube_client(
    account: AccountConfig,
    kube: KubernetesConfig = _DEFAULT_KUBERNETES,
    *,
    timeout_seconds: float = 0.0,
    environ: Mapping[str, str] = os.environ,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    http2: bool = True,
) -> AsyncIterator[KubeClient]:
    """A KubeClient for ``account`` (config errors raise ConfigError), closed on exit."""
    access = await trio.to_thread.run_sync(
        lambda: access_for_account(
            account, environ=environ, service_account_dir=service_account_dir
        )
    )
    # The nursery runs the reader tasks of the client's own HTTP/2 watch connections. An
    # error of the caller's block comes back wrapped in an exception group by the nursery;
    # the readers never raise, so the group holds that one error, re-raised as it was.
    try:
        async with trio.open_nursery() as nursery:
            client = KubeClient(
                access,
                retries=kube.retries,
                timeout_seconds=timeout_seconds,
                no_proxy=account.no_proxy or kube.no_proxy,
                environ=environ,
                http2=http2,
                nursery=nursery,
            )
            try:
                yield client
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await client.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0]  # noqa: B904 - keeps the error's own __cause__
        raise


def _short_request_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The headers of a short request on our own pools (names lowercased), the caller's last."""
    merged = {"user-agent": "kubesvc-agent", "accept": "application/json"}
    if headers:
        merged.update({k.lower(): v for k, v in headers.items()})
    return merged
