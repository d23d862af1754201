"""The I/O edge for the Kubernetes client tests: certificates and a tiny real HTTPS server.

``make_pki`` makes a CA, a serving certificate for 127.0.0.1/localhost and a client
certificate with kubesvc's own issuer (``kubesvc certs``). ``serve_api`` runs Hypercorn on
trio on 127.0.0.1 port 0 (TLS with h2 by ALPN, or plain HTTP) with an ASGI app answering from
a scripted handler and recording what it saw. This stands in for kubesim until its server is
available; it fakes the network peer only, never our own classes.
"""

from __future__ import annotations

import datetime
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from kubesvc._certs import issue_ca, issue_leaf

from .._wait import Changes


@dataclass
class Pki:
    ca_pem: bytes
    server_cert_pem: bytes
    server_key_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes
    folder: Path

    def write(self, name: str, data: bytes) -> Path:
        path = self.folder / name
        path.write_bytes(data)
        return path


def make_pki(folder: Path) -> Pki:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate (CN
    admin), issued the way ``kubesvc certs`` issues them; the leaves are valid for a day."""
    now = datetime.datetime.now(datetime.UTC)
    ca = issue_ca(days=2, now=now, common_name="test-ca")
    server = issue_leaf(
        ca,
        common_name="kube-apiserver",
        organization="kubesvc tests",
        days=1,
        now=now,
        sans=("localhost", "127.0.0.1"),
        server=True,
    )
    client = issue_leaf(
        ca, common_name="admin", organization="kubesvc tests", days=1, now=now, server=False
    )
    return Pki(
        ca_pem=ca.cert_pem,
        server_cert_pem=server.cert_pem,
        server_key_pem=server.key_pem,
        client_cert_pem=client.cert_pem,
        client_key_pem=client.key_pem,
        folder=folder,
    )


@dataclass
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    http_version: str
    body: bytes
    client_port: int  # tells connections apart


Reply = tuple[int, dict[str, str], bytes | list[bytes] | AsyncIterator[bytes]]
Handler = Callable[[Seen], Awaitable[Reply]]


@dataclass
class ApiServer:
    url: str
    port: int
    seen: list[Seen] = field(default_factory=list)
    changed: Changes = field(default_factory=Changes)  # notified on every request seen

    async def wait_seen(self, count: int) -> None:
        """Wait until ``count`` requests have reached the server."""
        await self.changed.wait_for(lambda: len(self.seen) >= count, what=f"{count} requests")


def status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


async def default_handler(seen: Seen) -> Reply:
    if seen.path == "/version":
        return 200, {}, json.dumps({"major": "1", "minor": "31", "gitVersion": "v1.31.0"}).encode()
    return 404, {}, status_body(404, "NotFound", f"the server could not find {seen.path}")


@asynccontextmanager
async def serve_api(
    handler: Handler = default_handler,
    *,
    pki: Pki | None = None,
    require_client_cert: bool = False,
    http2: bool = True,
) -> AsyncIterator[ApiServer]:
    """A real HTTP(S) server on 127.0.0.1:0 answering with ``handler``; stopped on exit."""
    server: ApiServer | None = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen = Seen(
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode(),
            headers={k.decode().lower(): v.decode() for k, v in scope["headers"]},
            http_version=scope["http_version"],
            body=body,
            client_port=scope["client"][1] if scope.get("client") else 0,
        )
        assert server is not None
        server.seen.append(seen)
        server.changed.notify()
        code, headers, payload = await handler(seen)
        await send(
            {
                "type": "http.response.start",
                "status": code,
                "headers": [(k.encode(), v.encode()) for k, v in headers.items()]
                + [(b"content-type", b"application/json")],
            }
        )
        if isinstance(payload, bytes | list):
            chunks = payload if isinstance(payload, list) else [payload]
            for index, chunk in enumerate(chunks):
                more = index < len(chunks) - 1
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
            if not chunks:
                await send({"type": "http.response.body", "body": b""})
        else:
            async for chunk in payload:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.1
    if not http2:
        config.alpn_protocols = ["http/1.1"]
    if pki is not None:
        config.certfile = str(pki.write("server.crt", pki.server_cert_pem))
        config.keyfile = str(pki.write("server.key", pki.server_key_pem))
        if require_client_cert:
            config.ca_certs = str(pki.write("ca.crt", pki.ca_pem))
            config.verify_mode = ssl.CERT_REQUIRED
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(
                cast(Any, app), config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        url = binds[0]
        port = int(url.rsplit(":", 1)[1])
        server = ApiServer(url=url, port=port)
        try:
            yield server
        finally:
            stop.set()
