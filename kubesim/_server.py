"""The network edge: Hypercorn's HTTP/1.1 + HTTP/2 protocol machinery on our own trio listener.

Why our own listener: Hypercorn does not tell the ASGI app which client certificate a TLS
connection presented. We accept connections ourselves, finish the TLS handshake, note the
peer certificate's common name under the client's (host, port), then hand the stream to
Hypercorn's per-connection ``TCPServer``; the app looks the name up by ``scope["client"]``.
"""

from __future__ import annotations

import base64
import socket
import ssl
import struct
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState

from kubesim._app import ApiApp
from kubesim._auth import User, Users
from kubesim._certs import CertificateAuthority, KeyPair
from kubesim._cluster import Cluster
from kubesim._errors import KubesimError
from kubesim._faults import Faults, RequestCounters, WriteLog
from kubesim._h2_server import H2Connection, serve_h2
from kubesim._http import Receive, Scope, Send, respond_error
from kubesim._hypercorn import ConnectionServer
from kubesim._member import PREFIX, Member, split_member_path, write_kubeconfig
from kubesim._status import path_not_found

__all__ = ["Server", "open_server"]


def _hypercorn_config() -> HypercornConfig:
    config = HypercornConfig()
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = 3600
    config.read_timeout = None
    # One agent runs one watch per kind over one HTTP/2 connection: allow many streams.
    config.h2_max_concurrent_streams = 1000
    config.h2_max_inbound_frame_size = 2**20
    # A real API server (Go's HTTP/2 server) takes any number of requests on one connection;
    # Hypercorn's default cap (1,000) sends GOAWAY naming the request that crossed it and then
    # never answers that request, on a connection it leaves open.
    config.keep_alive_max_requests = 2**62
    config.include_server_header = False
    return config


class Server:
    """A running kubesim API server (from :func:`open_server`)."""

    def __init__(self, cluster: Cluster, users: Users, tls: bool, host: str) -> None:
        self.cluster = cluster
        self.users = users
        self.faults = Faults()
        self.requests = RequestCounters()
        self.writes = WriteLog()  # the last write requests, bodies included
        self.tls = tls
        self.host = host
        self.port = 0
        self._peer_names: dict[tuple[str, int], str] = {}
        self._sockets: dict[tuple[str, int], trio.socket.SocketType] = {}
        self._servers: dict[tuple[str, int], ConnectionServer | H2Connection] = {}
        self.members: dict[str, Member] = {}  # clusters under /clusters/{name}
        self.app = ApiApp(
            cluster,
            users,
            self.faults,
            self.requests,
            self._peer_names,
            self._cut_connection,
            self._flush_connection,
            self.writes,
        )
        self.ca = CertificateAuthority() if tls else None
        self._serving: KeyPair | None = None
        self._ssl_context: ssl.SSLContext | None = None
        if self.ca is not None:
            self._serving = self.ca.issue_server([host, "localhost", "127.0.0.1"])
            self._ssl_context = self._make_ssl_context(self.ca, self._serving)

    @property
    def open_connections(self) -> int:
        """Client connections being served now (one ends when its client hangs up)."""
        return len(self._sockets)

    @staticmethod
    def _make_ssl_context(ca: CertificateAuthority, serving: KeyPair) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(serving.cert_pem)
            key.write_bytes(serving.key_pem)
            context.load_cert_chain(cert, key)
        context.load_verify_locations(cadata=ca.cert_pem.decode())
        context.verify_mode = ssl.CERT_OPTIONAL  # a client cert is one way to log in, not the only
        context.set_alpn_protocols(["h2", "http/1.1"])
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def ca_pem(self) -> bytes | None:
        """The CA certificate that signed the serving certificate (None without TLS)."""
        return self.ca.cert_pem if self.ca else None

    def add_user(
        self,
        name: str,
        grants: dict[str, Any] | None = None,
        *,
        token: str | None = None,
        expires_at: float | None = None,
    ) -> User:
        """Register a user (every verb on everything unless ``grants`` says otherwise), with
        a random token unless ``token`` is given, refused from ``expires_at`` (epoch
        seconds) on."""
        user = User(name, expires_at=expires_at)
        if grants is not None:
            user = replace(user, grants=grants)
        if token is not None:
            user = replace(user, token=token)
        return self.users.add(user)

    def set_grants(self, name: str, grants: dict[str, Any]) -> User:
        """Change what ``name`` may do, keeping its token (RBAC edited while it works); see
        ``kubesim._auth``. Raises KeyError for an unknown user."""
        return self.users.set_grants(name, grants)

    def client_certificate(self, user: str) -> KeyPair:
        """A client certificate for ``user`` signed by the server's CA (TLS servers only)."""
        if self.ca is None:
            raise RuntimeError("client certificates need a server opened with tls=True")
        return self.ca.issue_client(user)

    def kubeconfig(self, path: str | Path, user: str = "admin", *, auth: str = "token") -> Path:
        """Write a kubeconfig for ``user`` (``auth`` "token" or "cert"); returns its path.

        Raises KeyError for an unknown user and ValueError for "cert" without TLS.
        """
        known = self.users[user]
        credentials: dict[str, Any]
        if auth == "token":
            credentials = {"token": known.token}
        elif auth == "cert":
            if self.ca is None:
                raise ValueError("client-certificate auth needs a server opened with tls=True")
            pair = self.ca.issue_client(user)
            credentials = {
                "client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
                "client-key-data": base64.b64encode(pair.key_pem).decode(),
            }
        else:
            raise ValueError(f'auth must be "token" or "cert", got {auth!r}')
        return write_kubeconfig(path, self.url, self.ca_pem, credentials, user)

    # -- more clusters under /clusters/{name} ----------------------------------------------

    def add_cluster(self, name: str, cluster: Cluster, users: list[User] | None = None) -> Member:
        """Serve ``cluster`` under ``/clusters/{name}`` as well (see ``kubesim._member``),
        now or while serving. ``users`` defaults to one user "admin" allowed everything,
        with a token of its own. Raises ValueError for a name already served or not one
        path segment."""
        if not name or "/" in name or name in self.members:
            raise ValueError(f"cluster name {name!r} is empty, has a '/' or is taken")
        member = Member(
            name,
            cluster,
            Users(users),
            base_url=lambda: self.url,
            ca_pem=self.ca_pem,
            peer_names=self._peer_names,
            cut_connection=self._cut_connection,
            flush_connection=self._flush_connection,
        )
        member.app.server_address = self.app.server_address
        self.members[name] = member
        return member

    def remove_cluster(self, name: str) -> None:
        """Stop serving the member ``name`` (its next requests get 404). Raises KeyError."""
        self.members.pop(name).unsubscribe()

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app Hypercorn calls: a member's path to its app (the prefix moved from
        ``path`` to ``root_path``), any other path to the server's own cluster."""
        split = split_member_path(scope.get("path", "")) if scope["type"] == "http" else None
        if split is None:
            await self.app(scope, receive, send)
            return
        name, rest = split
        member = self.members.get(name)
        if member is None:
            await respond_error(send, path_not_found(scope["path"]))
            return
        prefix = PREFIX + name
        inner = dict(scope)
        inner["path"] = rest
        inner["raw_path"] = rest.encode()
        inner["root_path"] = scope.get("root_path", "") + prefix
        await member.app(inner, receive, send)

    async def serve(
        self, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections until cancelled; ``task_status.started(port)`` once listening.

        Raises KubesimError when the address cannot be bound (in use, not local, ...).
        """
        try:
            listeners = await trio.open_tcp_listeners(port, host=self.host)
        except OSError as exc:
            raise KubesimError(f"cannot listen on {self.host}:{port}: {exc.strerror}") from exc
        self.port = listeners[0].socket.getsockname()[1]
        self.app.server_address = f"{self.host}:{self.port}"
        for member in self.members.values():
            member.app.server_address = self.app.server_address
        config = _hypercorn_config()
        context = WorkerContext(None)
        wrapped = ASGIWrapper(self._route)  # type: ignore[arg-type]
        handler = partial(self._connection, wrapped, config, context)
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(handler, listeners, handler_nursery=nursery)

    async def _connection(
        self,
        app: ASGIWrapper,
        config: HypercornConfig,
        context: WorkerContext,
        stream: trio.SocketStream,
    ) -> None:
        if self.faults.refusing(trio.current_time()):
            _reset(stream)  # the link is cut (Server.cut): the client sees a reset at once
            return
        connection: Any = stream
        address = stream.socket.getpeername()
        peer = (str(address[0]), int(address[1]))
        if self._ssl_context is not None:
            tls = trio.SSLStream(stream, self._ssl_context, server_side=True, https_compatible=True)
            try:
                with trio.fail_after(10):
                    await tls.do_handshake()
            except (trio.BrokenResourceError, trio.TooSlowError):
                await stream.aclose()
                return
            cert = tls.getpeercert()
            name = _common_name(cert) if cert else None
            if name:
                self._peer_names[peer] = name
            connection = tls
        self._sockets[peer] = stream.socket
        try:
            if (
                isinstance(connection, trio.SSLStream)
                and connection.selected_alpn_protocol() == "h2"
            ):
                await self._serve_h2(connection, peer, stream)
                return
            server = self._servers[peer] = ConnectionServer(
                app, config, context, ConnectionState({}), connection
            )
            await server
        finally:
            self._peer_names.pop(peer, None)
            self._sockets.pop(peer, None)
            self._servers.pop(peer, None)

    async def _serve_h2(
        self, tls: trio.SSLStream[trio.SocketStream], peer: tuple[str, int], raw: trio.SocketStream
    ) -> None:
        """HTTP/2 (ALPN "h2"): kubesim's own (kubesim._h2_server), not Hypercorn's."""
        local = raw.socket.getsockname()
        try:
            async with trio.open_nursery() as nursery:
                self._servers[peer] = await nursery.start(
                    serve_h2, tls, self._route, peer, (str(local[0]), int(local[1]))
                )
        finally:
            await trio.aclose_forcefully(tls)

    def cut(self, seconds: float = 0.0) -> None:
        """Cut the link: reset every open client connection now, and every connection
        accepted in the next ``seconds`` as soon as it is accepted (what a client sees of an
        API server behind a network that drops and comes back). Call from the server's trio
        run (the cut is timed on its clock)."""
        self.faults.refuse_connections(trio.current_time(), seconds)
        for peer in list(self._sockets):
            self._cut_connection(peer)

    async def _flush_connection(self, peer: tuple[str, int]) -> None:
        """Wait until what was written to the client's connection so far has been sent (an
        injected fault cuts it after what it let through)."""
        server = self._servers.get(peer)
        if server is not None:
            await server.flushed()

    def _cut_connection(self, peer: tuple[str, int]) -> None:
        """Shut the client's TCP connection down under everyone's feet (an injected fault)."""
        sock = self._sockets.get(peer)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already gone: the fault happened anyway


def _reset(stream: trio.SocketStream) -> None:
    """Close ``stream`` with a TCP reset (SO_LINGER 0), not an orderly FIN."""
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # already gone: the client sees the connection end anyway
    stream.socket.close()


def _common_name(cert: dict[str, Any]) -> str | None:
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


@asynccontextmanager
async def open_server(
    cluster: Cluster,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: bool = False,
    users: list[User] | None = None,
) -> AsyncIterator[Server]:
    """Serve ``cluster`` on ``host:port`` (0 picks a free port) until the block exits.

    ``users`` defaults to one user "admin" allowed everything (token random; see
    ``server.users["admin"].token`` or write a kubeconfig). The server owns its tasks.
    """
    server = Server(cluster, Users(users), tls, host)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, port)
            try:
                yield server
            finally:
                nursery.cancel_scope.cancel()
    finally:
        server.app.unsubscribe()
        for member in server.members.values():
            member.unsubscribe()
