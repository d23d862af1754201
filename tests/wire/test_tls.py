"""TLS and mTLS on the bridge, with certificates made for the test."""

from __future__ import annotations

import functools
import ssl
from pathlib import Path

import pytest
import trio

import wire
from wire import messages as m

from ._certs import CertificateAuthority, client_context, server_context
from ._loop import in_loop


async def echo_peer_handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
    """Sends back the client certificate's common name (empty without one) as the server id."""
    common_name = ""
    if call.peer_cert is not None:
        for rdn in call.peer_cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    common_name = value
    await stream.receive()
    await stream.send(m.ServerMessage(welcome=m.Welcome(server_id=common_name)))


HELLO = m.AgentMessage(hello=m.Hello(protocol_version=wire.PROTOCOL_VERSION, agent_id="a"))


async def say_hello(port: int, context: ssl.SSLContext) -> m.ServerMessage:
    async with wire.open_connection("127.0.0.1", port, ssl_context=context) as stream:
        await stream.send(HELLO)
        return await stream.receive()


@in_loop
async def test_tls(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server_ctx = server_context(ca, ca.issue("server", server=True), require_client=False)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(
                    wire.serve, echo_peer_handler, "127.0.0.1", 0, ssl_context=server_ctx
                )
            )
            async with wire.open_connection(
                "127.0.0.1", port, ssl_context=client_context(ca)
            ) as stream:
                await stream.send(HELLO)
                assert (await stream.receive()).welcome.server_id == ""
            nursery.cancel_scope.cancel()


@in_loop
async def test_mtls_passes_the_client_certificate_to_the_handler(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server_ctx = server_context(ca, ca.issue("server", server=True), require_client=True)
    client_ctx = client_context(ca, ca.issue("agent-7", server=False))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(
                    wire.serve, echo_peer_handler, "127.0.0.1", 0, ssl_context=server_ctx
                )
            )
            async with wire.open_connection("127.0.0.1", port, ssl_context=client_ctx) as stream:
                await stream.send(HELLO)
                assert (await stream.receive()).welcome.server_id == "agent-7"
            nursery.cancel_scope.cancel()


@in_loop
async def test_mtls_refuses_a_client_certificate_from_another_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    stranger = CertificateAuthority(tmp_path, name="stranger CA")
    server_ctx = server_context(ca, ca.issue("server", server=True), require_client=True)
    # Trusts the right server, but presents a certificate the server does not trust.
    client_ctx = client_context(ca, stranger.issue("intruder", server=False))
    called = False

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        nonlocal called
        called = True

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(wire.serve, handler, "127.0.0.1", 0, ssl_context=server_ctx)
            )
            with pytest.raises(wire.ConnectionLost):
                await say_hello(port, client_ctx)
            nursery.cancel_scope.cancel()
    assert not called


@in_loop
async def test_mtls_refuses_a_client_without_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server_ctx = server_context(ca, ca.issue("server", server=True), require_client=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(
                    wire.serve, echo_peer_handler, "127.0.0.1", 0, ssl_context=server_ctx
                )
            )
            with pytest.raises(wire.ConnectionLost):
                await say_hello(port, client_context(ca))
            nursery.cancel_scope.cancel()


@in_loop
async def test_client_refuses_a_server_it_does_not_trust(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    other = CertificateAuthority(tmp_path, name="other CA")
    server_ctx = server_context(other, other.issue("server", server=True), require_client=False)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(
                    wire.serve, echo_peer_handler, "127.0.0.1", 0, ssl_context=server_ctx
                )
            )
            with pytest.raises(wire.ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"):
                async with wire.open_connection("127.0.0.1", port, ssl_context=client_context(ca)):
                    pass
            nursery.cancel_scope.cancel()
