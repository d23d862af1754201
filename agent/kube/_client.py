"""The Kubernetes API client: one transport seam, and above it each concern once.

One :class:`KubeClient` per account. Below the seam (agent/kube/_seam.py) there are two
transports: HTTP/2 over TLS (agent/kube/_h2.py; every request and watch of a cluster over as
few TCP connections as the server allows) and HTTP/1.1 (agent/kube/_http1.py; plain http,
proxies in front of http, servers that offer no h2). An https server gets HTTP/2 when its
TLS handshake chooses it (through a proxy's CONNECT tunnel too), HTTP/1.1 otherwise.

Above the seam, in this module, each in one place:

- credentials: the Authorization header of every request, and after a 401 with a
  refreshable credential (token file, exec plugin) the request once more with a fresh one
  (``_send``);
- sending again what the server surely did not process (GOAWAY, REFUSED_STREAM: any method),
  and safe requests (GET, HEAD, OPTIONS: discovery, lists, reads) on a connection the server
  closed before answering, as Go's client does (``_send``);
- deadlines: ``timeoutSeconds`` as a trio cancel scope around a request (``_deadline``);
- error translation: transport errors into the KubeError tree
  (``agent.kube._response.translate``, also for body reads);
- the ``kubernetes.retries`` policy of ``request()`` (connection failures, timeouts, 429 and,
  when asked, 5xx), waiting ``backOffMs`` or the server's ``Retry-After``.

Two ways to talk:

* ``await client.request(method, path, ...)`` -> :class:`KubeReply` (status, headers, body
  bytes, capped): for lists, discovery, operations. Any status is returned.
* ``async with client.stream(method, path, ...) as response`` -> :class:`KubeStream`: the body
  as raw chunks as they arrive (``receive_some()``), for watches. Not retried by the policy:
  the reflector resumes from its resourceVersion.

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
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import trio

from .._errors import KubeClosedError, KubeConnectionError, KubeError, KubeTimeoutError
from ..config import AccountConfig, KubernetesConfig, RetriesConfig
from ._auth import Credential, KubeAuth, credential_source
from ._dial import Dialer, parse_proxy
from ._h2 import H2Pool, H2Unsupported
from ._http1 import Http1Pool
from ._kubeconfig import (
    SERVICE_ACCOUNT_DIR,
    ClusterAccess,
    load_kubeconfig,
    parse_kubeconfig,
    service_account_access,
)
from ._proxy import select_proxy
from ._response import (
    MAX_ERROR_BODY_BYTES,
    MAX_RESPONSE_BYTES,
    KubeReply,
    KubeStream,
    retry_after,
    translate,
)
from ._seam import Exchange, Request, TransportError
from ._tls import load_client_certificate, shared_ssl_context, ssl_context

__all__ = [
    "ClusterIdentity",
    "KubeClient",
    "KubeReply",
    "KubeStream",
    "access_for_account",
    "open_kube_client",
]

log = logging.getLogger("agent.kube")

CONNECT_TIMEOUT = 30.0  # seconds for TCP + tunnel + TLS; a silent network otherwise hangs a dial
MAX_RETRY_AFTER = 60.0
_DEFAULT_RETRIES = RetriesConfig()
_DEFAULT_KUBERNETES = KubernetesConfig()
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})  # repeating them changes nothing (RFC 9110 9.2.1)
MAX_RESENDS = 3  # sends of a request the server did not process, or closed unanswered
_PATH_SAFE = "/:@!$&'()*+,;=~%-._"


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    """What the server is told about the cluster: host, serving-cert fingerprint, version.

    ``host`` is the server URL's ``host:port`` followed by its path, if any
    (``proxy:443/k8s/clusters/c1``). ``cert_fingerprint`` is the lowercase hex SHA-256 of
    the DER certificate ("" over http).
    """

    host: str
    cert_fingerprint: str
    version: Mapping[str, Any]


class KubeClient:
    """An HTTP client for one API server, with auth, resends, deadlines and error
    translation above its two transports (see the module docstring).

    The HTTP/2 connections' reader tasks run in ``nursery`` (as ``open_kube_client`` gives
    it) or, when none is given, in one the client opens itself in ``async with``. Use as
    ``async with KubeClient(access, ...) as client`` (or ``open_kube_client``); closing
    closes every connection. Requests after closing raise KubeClosedError. ``account`` names
    the client's connections in the log.
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
        nursery: trio.Nursery | None = None,
        account: str = "",
    ) -> None:
        self.access = access
        parts = urlsplit(access.server)
        self.host = parts.netloc
        self.retries = retries
        self.timeout_seconds = timeout_seconds
        self._label = f"account {account}: {self.host}" if account else self.host
        ssl_context(access)  # fail early on a bad CA
        # TLS contexts: shared with other clients of the same CA while this one presents no
        # client certificate (_kube_tls.shared_ssl_context); its own, in _contexts, from the
        # first certificate on (installed now, or later by an exec plugin).
        self._contexts: list[ssl.SSLContext] = []
        self._dialers: list[tuple[Dialer, list[str] | None]] = []
        self._installed_cert: tuple[bytes, bytes] | None = None
        if access.client_cert_pem and access.client_key_pem:
            self._install_cert(Credential(None, access.client_cert_pem, access.client_key_pem))
        basic = (access.username, access.password or "") if access.username else None
        self._auth = KubeAuth(
            credential_source(access, environ=environ),
            basic=basic,
            on_credential=self._install_cert,
        )
        self.proxy = select_proxy(
            access.server, environ, ignore_environment=no_proxy, proxy_url=access.proxy_url
        )
        try:
            proxy = parse_proxy(self.proxy) if self.proxy else None
        except ValueError as exc:
            raise KubeError(f"{access.source}: {exc}") from exc
        self._base_path = parts.path.rstrip("/")
        https = parts.scheme == "https"
        host, port = parts.hostname or "", parts.port or (443 if https else 80)
        server_name = access.tls_server_name or host

        def dialer(alpn: list[str] | None) -> Dialer:
            made = Dialer(
                host,
                port,
                tls=self._context_for(alpn) if https else None,
                server_hostname=server_name,
                proxy=proxy,
                tunnel=https,  # http through a proxy: requests in absolute form instead
                connect_timeout=CONNECT_TIMEOUT,
            )
            if https:
                self._dialers.append((made, alpn))
            return made

        absolute = f"http://{self.host}" if proxy is not None and not https else ""
        self._http1 = Http1Pool(
            dialer(["http/1.1"]),
            host=self.host,
            absolute=absolute,
            proxy_authorization=proxy.authorization if absolute and proxy else None,
            max_connections=max_connections,
        )
        self._h2_dialer = dialer(["h2", "http/1.1"]) if https and http2 else None
        self._h2: H2Pool | None = None
        self._nursery = nursery
        self._own_nursery: AsyncExitStack | None = None
        self._closed = False
        if nursery is not None:
            self._start_h2(nursery)

    def _start_h2(self, nursery: trio.Nursery) -> None:
        if self._h2_dialer is not None:
            self._h2 = H2Pool(self._h2_dialer, nursery=nursery, label=self._label)

    def _context_for(self, alpn: list[str] | None) -> ssl.SSLContext:
        """The TLS context of new connections offering ``alpn``: a shared one while no
        client certificate is installed, else this client's own."""
        if self._installed_cert is None:
            return shared_ssl_context(self.access, alpn or ())
        context = ssl_context(self.access)
        if alpn:
            context.set_alpn_protocols(alpn)
        load_client_certificate(context, *self._installed_cert)
        self._contexts.append(context)
        return context

    def _install_cert(self, credential: Credential) -> None:
        if not (credential.client_cert_pem and credential.client_key_pem):
            return
        pair = (credential.client_cert_pem, credential.client_key_pem)
        if pair == self._installed_cert:
            return
        # New connections present the new certificate; open ones keep theirs.
        first = self._installed_cert is None
        self._installed_cert = pair
        if first:
            # The dialers used shared contexts, which must never hold a certificate.
            for dialer, alpn in self._dialers:
                dialer.tls = self._context_for(alpn)
        else:
            for context in self._contexts:
                load_client_certificate(context, *pair)

    async def __aenter__(self) -> KubeClient:
        if self._nursery is None and self._h2_dialer is not None:
            stack = AsyncExitStack()
            self._nursery = await stack.enter_async_context(trio.open_nursery())
            self._own_nursery = stack
            self._start_h2(self._nursery)
        return self

    async def __aexit__(self, *exc_info: Any) -> bool:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await self.aclose()
        stack, self._own_nursery = self._own_nursery, None
        if stack is None:
            return False
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
        try:
            return bool(await stack.__aexit__(*exc_info))
        except BaseExceptionGroup as group:
            # The readers never raise: the group holds the block's own error, let through
            # as it was (not wrapped).
            if len(group.exceptions) == 1 and group.exceptions[0] is exc_info[1]:
                return False
            raise

    async def aclose(self) -> None:
        """Close every connection. Idempotent."""
        self._closed = True
        await self._http1.aclose()
        if self._h2 is not None:
            await self._h2.aclose()

    @property
    def watch_connections(self) -> int:
        """How many HTTP/2 connections are open now (every watch and request shares them)."""
        return self._h2.connections if self._h2 is not None else 0

    def _check_open(self, method: str, path: str) -> None:
        if self._closed:
            raise KubeClosedError(f"{method} {path}: the client for {self.host} is closed")

    def _target(self, path: str, params: Mapping[str, str] | None) -> str:
        target = quote(self._base_path + path, safe=_PATH_SAFE)
        return f"{target}?{urlencode(params)}" if params else target

    # --- the layers above the seam -------------------------------------------------------

    async def _open(self, request: Request) -> Exchange:
        """The transport for this server: HTTP/2 unless the server turned it down."""
        if self._h2 is not None and not self._h2.unsupported:
            try:
                return await self._h2.open(request)
            except H2Unsupported as exc:
                if exc.dialed is not None:
                    log.debug("%s: no HTTP/2 offered; using HTTP/1.1", self._label)
                    self._http1.adopt(exc.dialed)
        elif self._h2_dialer is not None and self._h2 is None:
            raise KubeError(
                f"the client for {self.host} has no nursery for its HTTP/2 connections: "
                "use it as `async with KubeClient(...)` or give it one"
            )
        return await self._http1.open(request)

    async def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
        content: bytes | None,
    ) -> Exchange:
        """One request through the seam, with credentials and the resends the module
        docstring lists. Returns the open exchange (the caller closes it). Raises
        KubeConnectionError, KubeTimeoutError, KubeClosedError, KubeCredentialError."""
        self._check_open(method, path)
        target = self._target(path, params)
        fields = {"user-agent": "kubesvc-agent", "accept": "application/json"}
        if headers:
            fields.update({k.lower(): v for k, v in headers.items()})
        # Credentials first: an exec plugin's client certificate must be in the TLS context
        # before a connection is made.
        auth_headers, credential = await self._auth.headers()
        refreshed = False
        resends = 0
        while True:
            request = Request(method, target, {**fields, **auth_headers}, content or None)
            try:
                exchange = await self._open(request)
            except TransportError as exc:
                if self._closed:
                    raise KubeClosedError(f"{method} {path}: the client was closed") from exc
                if resends < MAX_RESENDS and (
                    (exc.unprocessed and exc.stage != "connect")
                    or (exc.unanswered and method in SAFE)
                ):
                    resends += 1
                    log.debug("%s: %s %s: %s; sending it again", self._label, method, path, exc)
                    continue
                raise translate(exc, method, path, self.host) from exc
            if exchange.status_code != 401 or refreshed:
                return exchange
            refreshed = True
            try:
                fresh = await self._auth.refresh(credential, self.host)
            except BaseException:
                await exchange.aclose()  # never waits (see Exchange.aclose)
                raise
            if fresh is None:
                return exchange
            await exchange.aclose()
            auth_headers, credential = fresh

    @contextmanager
    def _deadline(self, method: str, path: str) -> Iterator[None]:
        """``timeoutSeconds`` for what runs inside, as KubeTimeoutError."""
        try:
            with trio.fail_after(self.timeout_seconds):
                yield
        except trio.TooSlowError as exc:
            raise KubeTimeoutError(
                f"{method} {path}: timeout: {self.host} did not answer within "
                f"{self.timeout_seconds} s"
            ) from exc

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

        ``timeoutSeconds`` bounds the wait for the response head only: a watch's body
        lasts as long as the watch. Raises KubeConnectionError / KubeTimeoutError /
        KubeClosedError / KubeCredentialError; the response is closed when the block exits.
        """
        if self.timeout_seconds:
            with self._deadline(method, path):
                exchange = await self._send(method, path, params, headers, content)
        else:
            exchange = await self._send(method, path, params, headers, content)
        stream = KubeStream(exchange, method, path, self.host)
        try:
            yield stream
        finally:
            await stream.close()  # never waits (see Exchange.aclose): safe when cancelled

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
                if self.timeout_seconds:
                    with self._deadline(method, path):
                        response = await self._read(
                            method, path, params, headers, content, max_bytes
                        )
                else:  # no cancel scope at all: it costs ~5 % of a request's CPU
                    response = await self._read(method, path, params, headers, content, max_bytes)
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

    async def _read(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str] | None,
        content: bytes | None,
        max_bytes: int,
    ) -> KubeReply:
        """One attempt of ``request()``: send, read the whole answer, release."""
        exchange = await self._send(method, path, params, headers, content)
        stream = KubeStream(exchange, method, path, self.host)
        try:
            body = await stream.read(max_bytes)
        finally:
            await stream.close()  # never waits (see Exchange.aclose): safe when cancelled
        return KubeReply(stream.status_code, stream.headers, body, method, path)

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
        not_sent = isinstance(cause, TransportError) and cause.stage == "connect"
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
        fingerprint = hashlib.sha256(der).hexdigest() if der else ""
        # The path too: clusters behind one proxy (https://proxy/clusters/17) share its host
        # and certificate, and only the path tells them apart.
        host = self.host + self._base_path
        return ClusterIdentity(host, fingerprint, version if isinstance(version, dict) else {})


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
    # The nursery runs the reader tasks of the client's HTTP/2 connections. An error of the
    # caller's block comes back wrapped in an exception group by the nursery; the readers
    # never raise, so the group holds that one error, re-raised as it was.
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
                account=account.name,
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
