"""The I/O edge for the Kubernetes client tests: certificates and a tiny real HTTPS server.

``make_pki`` writes a CA, a serving certificate for 127.0.0.1/localhost and a client
certificate with ``cryptography``. ``serve_api`` runs Hypercorn on trio on 127.0.0.1 port 0
(TLS with h2 by ALPN, or plain HTTP) with an ASGI app answering from a scripted handler and
recording what it saw. This stands in for kubesim until its server is available; it fakes the
network peer only, never our own classes.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve


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


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_pki(folder: Path) -> Pki:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("test-ca"))
        .issuer_name(_name("test-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common_name: str, usage: x509.ObjectIdentifier, server: bool) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    server_cert, server_key = leaf("kube-apiserver", ExtendedKeyUsageOID.SERVER_AUTH, True)
    client_cert, client_key = leaf("admin", ExtendedKeyUsageOID.CLIENT_AUTH, False)
    return Pki(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        server_cert_pem=server_cert,
        server_key_pem=server_key,
        client_cert_pem=client_cert,
        client_key_pem=client_key,
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
