"""The Kubernetes API client: httpx on trio, HTTP/2 first, errors translated at this edge.

One :class:`KubeClient` per account owns one ``httpx.AsyncClient``. With HTTP/2 (offered by
every API server over TLS) all watches of the cluster are streams of one TCP connection; over
HTTP/1.1 each watch holds its own connection, so the pool allows many (``max_connections``).

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

import email.utils
import hashlib
import json
import logging
import os
import ssl
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import trio

from ._config_schema import AccountConfig, KubernetesConfig, RetriesConfig
from ._errors import (
    KubeClosedError,
    KubeConnectionError,
    KubeError,
    KubeStatusError,
    KubeTimeoutError,
    status_error,
)
from ._kube_auth import Credential, KubeAuth, credential_source
from ._kube_proxy import select_proxy
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
MAX_RESPONSE_BYTES = 256 * 2**20  # request() bodies: a 500-object list page is a few MB
MAX_ERROR_BODY_BYTES = 64 * 1024  # a Status is small; do not read a huge error page
MAX_RETRY_AFTER = 60.0
STREAMS_PER_CONNECTION = 100  # httpcore's h2 cap per connection (see KubeClient)
_DEFAULT_RETRIES = RetriesConfig()
_DEFAULT_KUBERNETES = KubernetesConfig()
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    """What the server is told about the cluster: host, serving-cert fingerprint, version.

    ``cert_fingerprint`` is the lowercase hex SHA-256 of the DER certificate ("" over http).
    """

    host: str
    cert_fingerprint: str
    version: Mapping[str, Any]


def _retry_after(headers: Mapping[str, str]) -> float | None:
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


def _status_error(
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
        retry_after=_retry_after(headers),
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
            raise _status_error(
                self.status_code, self.headers, self.content, self.method, self.path
            )

    def json(self) -> Any:
        """The body decoded as JSON. Raises KubeError when it is not JSON."""
        try:
            return json.loads(self.content)
        except ValueError as exc:
            raise KubeError(f"{self.method} {self.path}: the answer is not JSON: {exc}") from exc


def _explain(exc: BaseException) -> str:
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
def _translated(method: str, path: str, host: str) -> Iterator[None]:
    """Translate httpx's errors into the agent's tree at this one edge."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise KubeTimeoutError(
            f"{method} {path}: timeout talking to {host}: {_explain(exc)}"
        ) from exc
    except httpx.RequestError as exc:
        raise KubeConnectionError(
            f"{method} {path}: {host}: {type(exc).__name__}: {_explain(exc)}"
        ) from exc
    except httpx.StreamError as exc:  # read after close: our doing
        raise KubeClosedError(f"{method} {path}: the response was closed: {exc}") from exc


class KubeStream:
    """A response whose body is read as it arrives. Owned by ``KubeClient.stream()``."""

    def __init__(self, response: httpx.Response, method: str, path: str, host: str) -> None:
        self._response = response
        # httpx's iterator is an async generator; kept to close it explicitly (no GC finalizer).
        self._chunks = cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
        self._method = method
        self._path = path
        self._host = host
        self.status_code = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self.http_version = response.http_version
        self._finished = False  # the body's generators have run to their end

    async def receive_some(self) -> bytes:
        """The next body chunk as it came off the network (decompressed); ``b""`` at the end.

        Raises KubeConnectionError when the body is cut, KubeClosedError after close.
        """
        with _translated(self._method, self._path, self._host):
            try:
                return await self._chunks.__anext__()
            except StopAsyncIteration:
                self._finished = True
                return b""
            except BaseException:
                self._finished = True  # an exception unwound (and finished) the generators
                raise

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
        raise _status_error(self.status_code, self.headers, bytes(body), self._method, self._path)

    def peer_certificate(self) -> bytes | None:
        """The DER serving certificate of the connection that carried this response."""
        stream = self._response.extensions.get("network_stream")
        ssl_object = stream.get_extra_info("ssl_object") if stream is not None else None
        if ssl_object is None:
            return None
        der: bytes | None = ssl_object.getpeercert(binary_form=True)
        return der

    async def _close(self) -> None:
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


def _ssl_context(access: ClusterAccess) -> ssl.SSLContext:
    if access.ca_pem:
        try:
            context = ssl.create_default_context(cadata=access.ca_pem.decode())
        except (ssl.SSLError, ValueError) as exc:
            raise KubeError(f"{access.source}: the cluster CA is not valid PEM: {exc}") from exc
    else:
        context = ssl.create_default_context()
    if access.insecure_skip_tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_client_certificate(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Install a client certificate from memory (ssl only loads files: a private temp dir)."""
    with tempfile.TemporaryDirectory(prefix="kubesvc-cert-") as folder:
        cert_path = Path(folder) / "tls.crt"
        key_path = Path(folder) / "tls.key"
        cert_path.write_bytes(cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key_pem)
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            raise KubeError(f"the client certificate or key is not valid: {exc}") from exc


@dataclass(slots=True)
class _Lane:
    """One httpx client (connection pool) and how many requests it carries now."""

    client: httpx.AsyncClient
    active: int = 0


class KubeClient:
    """An HTTP client for one API server, with auth, retries and error translation.

    HTTP/2 and watches. Short requests (lists, discovery, operations) share one HTTP/2
    connection. Watches (``watch=1``) go over HTTP/1.1, one connection each, by default:
    httpcore 1.0 reads an HTTP/2 connection under one lock, handed out first come first
    served, and the holder blocks in the socket read until *any* frame arrives -- so with
    quiet watches open, a response that already arrived for another stream waits until some
    other data comes (measured: a request behind 10 idle watches never completed). With
    ``watch_http2=True`` watches share HTTP/2 connections anyway ("lanes" of
    ``streams_per_connection``, since httpcore also caps a connection at 100 concurrent
    streams and parks the 101st); fine when every watch is busy.

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
    ) -> None:
        self.access = access
        self.base_url = access.server
        self.host = urlsplit(access.server).netloc
        self.retries = retries
        self.timeout_seconds = timeout_seconds
        # One SSLContext per pool: httpcore sets the ALPN protocols on the context it is given
        # (["http/1.1"] for an HTTP/1.1 pool), so a shared one would turn HTTP/2 off for all.
        _ssl_context(access)  # fail early on a bad CA
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

    def _new_context(self, *, keep: bool = True) -> ssl.SSLContext:
        """A context with the CA, TLS options and current client certificate. Kept ones get
        new certificates when an exec plugin hands out one."""
        context = _ssl_context(self.access)
        if self._installed_cert is not None:
            _load_client_certificate(context, *self._installed_cert)
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
                _load_client_certificate(context, *pair)
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
            with _translated(method, path, self.host):
                try:
                    with trio.fail_after(self.timeout_seconds or float("inf")):
                        response = await lane.client.send(request, stream=True)
                except trio.TooSlowError as exc:
                    raise KubeTimeoutError(
                        f"{method} {path}: timeout: no answer from {self.host} within "
                        f"{self.timeout_seconds} s"
                    ) from exc
            stream = KubeStream(response, method, path, self.host)
            try:
                yield stream
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await stream._close()
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
                hint = _retry_after(response.headers)
                if hint is not None:
                    delay = max(delay, min(hint, MAX_RETRY_AFTER))
            return delay if retry else None
        assert error is not None
        not_sent = isinstance(error.__cause__, httpx.ConnectError | httpx.ConnectTimeout)
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
        with _translated("CONNECT", "/", self.host):
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
    client = KubeClient(
        access,
        retries=kube.retries,
        timeout_seconds=timeout_seconds,
        no_proxy=account.no_proxy or kube.no_proxy,
        environ=environ,
        http2=http2,
    )
    async with client:
        yield client
