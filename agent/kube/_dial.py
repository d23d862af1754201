"""Opening connections to an API server: TCP, an HTTP proxy's CONNECT tunnel, TLS with ALPN.

A :class:`Dialer` opens one kind of connection to one server, the way client-go's transport
does: straight to the server, or to a proxy (``proxy-url`` in the kubeconfig, or
``HTTPS_PROXY``/``HTTP_PROXY`` as agent/kube/_proxy.py chooses) that is either asked to
``CONNECT`` to the server (an https server: TLS then runs end to end through the tunnel, so
the server's certificate is checked and HTTP/2 is still negotiated) or, for a plain http
server, sent requests in absolute form by the HTTP/1.1 transport (the dialer then only
connects to the proxy). Proxy credentials come from the proxy URL's user info
(``http://user:pass@proxy:3128``) as ``Proxy-Authorization: Basic``. A proxy reached over
https is supported (TLS to the proxy, checked against the system's CAs); socks5 is not.

Everything up to a usable connection runs under one deadline (``connect_timeout``); failures
raise TransportError with stage "connect" (nothing of a request was sent).
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import trio

from ._http1_parse import ResponseReader
from ._seam import TransportError
from ._tls import TlsStream

__all__ = ["Dialed", "Dialer", "Proxy", "parse_proxy"]

READ_SIZE = 64 * 1024


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy: where it listens, whether over TLS, and its credentials (a header)."""

    host: str
    port: int
    tls: bool = False
    authorization: str | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{_authority(self.host, self.port)}"


def parse_proxy(url: str) -> Proxy:
    """A proxy URL (``http://[user:pass@]host[:port]``, or https). Raises ValueError."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"proxy {url!r}: only http:// and https:// proxies are supported")
    if not parts.hostname:
        raise ValueError(f"proxy {url!r} names no host")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode()
    port = parts.port or (443 if scheme == "https" else 80)
    return Proxy(parts.hostname, port, scheme == "https", authorization)


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(slots=True, eq=False)
class Dialed:
    """An open connection: its byte stream, the protocol ALPN chose (None without TLS)."""

    stream: trio.abc.Stream
    alpn: str | None

    def peer_certificate(self) -> bytes | None:
        if isinstance(self.stream, TlsStream):
            return self.stream.getpeercert(binary_form=True)
        return None

    def socket(self) -> trio.socket.SocketType | None:
        """The TCP socket underneath (to check an idle connection for EOF)."""
        stream: object = self.stream
        while isinstance(stream, TlsStream):
            stream = stream.transport
        return stream.socket if isinstance(stream, trio.SocketStream) else None


class Dialer:
    """Opens connections to ``host:port``: directly or through ``proxy`` (tunnelled with
    CONNECT when ``tunnel`` is true, else to the proxy itself), then TLS with ``tls`` (whose
    ALPN protocols the caller set) when given. See the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        server_hostname: str = "",
        proxy: Proxy | None = None,
        tunnel: bool = True,
        connect_timeout: float = 30.0,
    ) -> None:
        self.host = host
        self.port = port
        self.tls = tls
        self._server_hostname = server_hostname or host
        self.proxy = proxy
        self._tunnel = tunnel and proxy is not None
        self.connect_timeout = connect_timeout

    @property
    def authority(self) -> str:
        return _authority(self.host, self.port)

    async def dial(self) -> Dialed:
        """A new connection. Raises TransportError (stage "connect")."""
        stream: trio.abc.Stream | None = None
        try:
            with trio.fail_after(self.connect_timeout):
                stream = await self._open_tcp()
                if self.proxy is not None and self.proxy.tls:
                    stream = await self._tls(stream, ssl.create_default_context(), self.proxy.host)
                if self._tunnel:
                    await self._connect_tunnel(stream)
                alpn = None
                if self.tls is not None:
                    stream = await self._tls(stream, self.tls, self._server_hostname)
                    alpn = stream.selected_alpn_protocol()
                return Dialed(stream, alpn)
        except trio.TooSlowError as exc:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise TransportError(
                f"ConnectTimeout: no connection to {self._where()} within {self.connect_timeout} s",
                stage="connect",
                timeout=True,
            ) from exc
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise TransportError(
                f"ConnectError: cannot connect to {self._where()}: {_explain(exc)}",
                stage="connect",
            ) from exc
        except BaseException:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise

    def _where(self) -> str:
        if self.proxy is None:
            return self.authority
        return f"{self.authority} through the proxy {self.proxy.url}"

    async def _open_tcp(self) -> trio.SocketStream:
        host, port = (self.proxy.host, self.proxy.port) if self.proxy else (self.host, self.port)
        stream = await trio.open_tcp_stream(host, port)
        stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, True)
        return stream

    @staticmethod
    async def _tls(stream: trio.abc.Stream, context: ssl.SSLContext, hostname: str) -> TlsStream:
        secured = TlsStream(stream, context, hostname)
        await secured.do_handshake()
        return secured

    async def _connect_tunnel(self, stream: trio.abc.Stream) -> None:
        """Ask the proxy for a tunnel to the server; raise OSError when it says no."""
        assert self.proxy is not None
        lines = [f"CONNECT {self.authority} HTTP/1.1", f"host: {self.authority}"]
        if self.proxy.authorization:
            lines.append(f"proxy-authorization: {self.proxy.authorization}")
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        reader = ResponseReader(head_request=True, max_body=0)
        try:
            while (head := reader.head()) is None:
                data = await stream.receive_some(READ_SIZE)
                if data:
                    reader.feed(data)
                else:
                    reader.feed_eof()
        except TransportError as exc:  # the head is capped (MAX_HEAD_BYTES) and checked
            raise OSError(f"the proxy {self.proxy.url} answered CONNECT badly: {exc}") from exc
        if not 200 <= head.status_code < 300:
            raise OSError(f"the proxy {self.proxy.url} refused the tunnel: {head.status_code}")
        if reader.has_unread():
            # A proxy that sent bytes past its answer before the TLS handshake began: they
            # cannot belong to the server (which has not heard from us yet).
            raise OSError(f"the proxy {self.proxy.url} sent data after accepting the tunnel")


def _explain(exc: BaseException) -> str:
    """The messages along an error's cause chain (the ssl or socket error underneath says
    what happened: ``CERTIFICATE_VERIFY_FAILED``)."""
    parts: list[str] = []
    current: BaseException | None = exc
    for _ in range(8):
        if current is None:
            break
        text = str(current).strip()
        if text and text not in parts:
            parts.append(text)
        current = current.__cause__ or current.__context__
    return "; ".join(parts) or type(exc).__name__
