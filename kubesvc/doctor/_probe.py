"""The doctor's own small network probes: a TCP connect, and a TLS handshake that trusts
anything, to show the certificate a peer presents when the configured CA does not verify it.

Everything else the doctor asks goes through the agent's own client and link code; these two
exist because that code (rightly) never connects to a peer it cannot verify, and an operator
fixing a wrong CA needs to see whose certificate is there instead.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import trio

__all__ = ["Handshake", "handshake", "tcp_connect"]


async def tcp_connect(host: str, port: int) -> None:
    """Open and close a TCP connection. Raises OSError (refused, unreachable, no such host)."""
    stream = await trio.open_tcp_stream(host, port)
    await trio.aclose_forcefully(stream)


@dataclass(frozen=True, slots=True)
class Handshake:
    der: bytes | None  # the peer's certificate
    alpn: str | None
    version: str | None


async def handshake(
    host: str,
    port: int,
    server_name: str | None,
    context: ssl.SSLContext | None = None,
    alpn: tuple[str, ...] = (),
) -> Handshake:
    """A TLS handshake with ``context`` (default: one that verifies nothing), then close.

    Raises OSError (TCP) and trio.BrokenResourceError (TLS; the ssl error as its cause).
    """
    if context is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(list(alpn))
    stream = await trio.open_tcp_stream(host, port)
    tls = trio.SSLStream(stream, context, server_hostname=server_name or host)
    try:
        await tls.do_handshake()
        return Handshake(
            tls.getpeercert(binary_form=True), tls.selected_alpn_protocol(), tls.version()
        )
    finally:
        await trio.aclose_forcefully(tls)
