"""How a call is configured: message size caps, keepalive, TLS (ALPN) and grpclib's codec.

Theory of operation. Both ends of a call are built from the same few options, turned here
into what grpclib takes: a :class:`Keepalive` becomes grpclib's ``Configuration`` (HTTP/2
PINGs while a call is open), TLS means an ``ssl.SSLContext`` that offers only ``h2`` by
ALPN, and the codec is the identity on bytes, so no protobuf work happens on the asyncio
side: messages are encoded and decoded on the trio side (wire/_envelope.py), where their
size is also checked against the call's cap before anything is sent or parsed.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import betterproto
from grpclib.config import Configuration
from grpclib.encoding.base import CodecBase

from .._errors import MessageTooLarge

__all__ = [
    "DEFAULT_KEEPALIVE",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "GRPC_PREFIX",
    "Keepalive",
    "RawCodec",
    "checked",
    "configuration",
    "decoded",
    "offer_h2",
]

#: Like Clouddriver's agent plugin's maxInboundMessageSize default.
DEFAULT_MAX_MESSAGE_SIZE = 4 * 2**20
#: Bytes in front of every gRPC message: the compressed flag, then the length (big-endian).
GRPC_PREFIX = 5

_M = TypeVar("_M", bound=betterproto.Message)


@dataclass(frozen=True, slots=True)
class Keepalive:
    """HTTP/2 PING every ``interval`` seconds while a call is open; a peer that does not answer
    within ``timeout`` seconds is dead and the connection is closed (ConnectionLost)."""

    interval: float = 20.0
    timeout: float = 20.0


#: Both ends ping by default: a dead peer is noticed within ~40 s.
DEFAULT_KEEPALIVE = Keepalive()


class RawCodec(CodecBase):
    """grpclib codec that passes bytes through: protobuf work stays on the trio side."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        assert isinstance(message, bytes)
        return message

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return data


def configuration(keepalive: Keepalive | None, server_hostname: str | None = None) -> Configuration:
    """grpclib's configuration for ``keepalive`` (None: no PINGs) and, on a client, the name
    the server's certificate must match."""
    if keepalive is None:
        return Configuration(ssl_target_name_override=server_hostname)
    return Configuration(
        _keepalive_time=keepalive.interval,
        _keepalive_timeout=keepalive.timeout,
        # grpclib stops pinging an idle stream after 2 pings by default; a dead peer must be
        # noticed on a quiet stream too, so ping for as long as a call is open.
        _http2_max_pings_without_data=0,
        _http2_min_sent_ping_interval_without_data=keepalive.interval,
        ssl_target_name_override=server_hostname,
    )


def offer_h2(ssl_context: ssl.SSLContext | None) -> None:
    """Make ``ssl_context`` (if any) offer HTTP/2 alone by ALPN, as gRPC requires."""
    if ssl_context is not None:
        ssl_context.set_alpn_protocols(["h2"])


def checked(data: bytes, limit: int) -> bytes:
    """``data``, to be sent; raises MessageTooLarge when it is over ``limit`` bytes."""
    if len(data) > limit:
        raise MessageTooLarge(len(data), limit, direction="outgoing")
    return data


def decoded(data: bytes, parse: Callable[[bytes], _M], limit: int) -> _M:
    """``parse(data)``, received; raises MessageTooLarge over ``limit`` bytes, and what
    ``parse`` raises (ProtocolViolation, wire/_envelope.py)."""
    if len(data) > limit:
        raise MessageTooLarge(len(data), limit, direction="incoming")
    return parse(data)
