"""The client through an HTTP proxy, against kubesim: https through the proxy's CONNECT tunnel
(TLS end to end, so the server's certificate is checked and HTTP/2 still negotiated), proxy
credentials from the proxy URL, a proxy that refuses, and plain http in absolute form."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import pytest
import trio

import kubesim
from agent import KubeConnectionError
from agent.config._schema import RetriesConfig
from agent.kube._client import KubeClient
from agent.kube._kubeconfig import ClusterAccess, load_kubeconfig

NO_RETRIES = RetriesConfig(enabled=False)


@dataclass
class TunnelProxy:
    """A CONNECT proxy on loopback that wants ``user:secret`` (a fake network peer)."""

    heads: list[bytes] = field(default_factory=list)

    async def handle(self, client: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await client.receive_some(4096)
            if not chunk:
                return
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0]
        self.heads.append(head)
        lines = head.decode().split("\r\n")
        method, target, _ = lines[0].split(" ")
        fields = dict(line.lower().split(": ", 1) for line in lines[1:])
        wanted = "basic " + base64.b64encode(b"user:secret").decode().lower()
        if method != "CONNECT" or fields.get("proxy-authorization") != wanted:
            await client.send_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
            await client.aclose()
            return
        host, port = target.rsplit(":", 1)
        upstream = await trio.open_tcp_stream(host, int(port))
        await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(source: trio.SocketStream, sink: trio.SocketStream) -> None:
            try:
                while chunk := await source.receive_some(65536):
                    await sink.send_all(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                await trio.aclose_forcefully(sink)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pipe, client, upstream)
            nursery.start_soon(pipe, upstream, client)


async def test_https_goes_through_a_connect_tunnel_with_the_urls_credentials(
    tmp_path: Path,
) -> None:
    proxy = TunnelProxy()
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server, trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_tcp, proxy.handle, 0, host="127.0.0.1")
            )
            port = listeners[0].socket.getsockname()[1]
            access = load_kubeconfig(server.kubeconfig(tmp_path / "kubeconfig"))
            through = replace(access, proxy_url=f"http://user:secret@127.0.0.1:{port}")
            async with KubeClient(through, environ={}) as client:
                identity = await client.identity()
                async with client.stream("GET", "/api/v1/namespaces") as response:
                    assert response.http_version == "HTTP/2"  # negotiated through the tunnel
                    assert b"default" in await response.read()
                assert client.watch_connections == 1
            wrong = replace(access, proxy_url=f"http://user:wrong@127.0.0.1:{port}")
            async with KubeClient(wrong, environ={}, retries=NO_RETRIES) as client:
                with pytest.raises(KubeConnectionError, match="refused the tunnel: 407"):
                    await client.get_json("/version")
            nursery.cancel_scope.cancel()
    assert len(identity.cert_fingerprint) == 64  # kubesim's own certificate, end to end
    assert proxy.heads[0].startswith(f"CONNECT 127.0.0.1:{server.port} HTTP/1.1\r\n".encode())


async def test_plain_http_through_a_proxy_uses_the_absolute_form() -> None:
    heads: list[bytes] = []

    async def answer(client: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await client.receive_some(4096)
        heads.append(data.split(b"\r\n\r\n", 1)[0])
        await client.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    access = ClusterAccess(server="http://kubernetes.invalid:8080/base", token="t0k")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, answer, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            environ = {"HTTP_PROXY": f"http://u:p@127.0.0.1:{port}"}
            async with KubeClient(access, environ=environ) as client:
                assert await client.get_json("/api", {"a": "1"}) == {}
            nursery.cancel_scope.cancel()
    lines = heads[0].decode().split("\r\n")
    assert lines[0] == "GET http://kubernetes.invalid:8080/base/api?a=1 HTTP/1.1"
    assert "host: kubernetes.invalid:8080" in lines
    assert f"proxy-authorization: Basic {base64.b64encode(b'u:p').decode()}" in lines
    assert "authorization: Bearer t0k" in lines
