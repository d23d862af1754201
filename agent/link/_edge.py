"""The link's edge with the stream: opening it under a deadline, and skipping what a newer
server sends that this version does not know.

An address that accepts and then says nothing (a TLS handshake that never ends, a proxy with
nothing behind it) must fail like any broken link, so the connect has a deadline of its own.
A message kind (ServerMessage oneof member), a field, or a Role value this version does not
know is the next version's, not an error: it is skipped, counted in the link's
``unknown_fields`` (kubesvc_protocol_unknown_fields_total) and logged once per field number.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

import betterproto
import trio

import wire
from wire import messages

from .._errors import LinkTimeoutError

log = logging.getLogger("agent.link")

__all__ = ["known_role", "message_kind", "open_stream", "skipped_unknown"]


@asynccontextmanager
async def open_stream(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None,
    server_hostname: str | None,
    metadata: Mapping[str, str],
    max_message_size: int,
    connect_seconds: float,
) -> AsyncIterator[wire.ClientStream]:
    """``wire.open_connection``, given ``connect_seconds`` for the TCP connect and the TLS
    handshake. Raises LinkTimeoutError when they take longer, and what open_connection
    raises; the stream is closed when the block exits."""
    async with AsyncExitStack() as stack:
        with trio.move_on_after(connect_seconds) as deadline:
            stream = await stack.enter_async_context(
                wire.open_connection(
                    host,
                    port,
                    ssl_context=ssl_context,
                    server_hostname=server_hostname,
                    metadata=metadata,
                    max_message_size=max_message_size,
                )
            )
        if deadline.cancelled_caught:
            raise LinkTimeoutError(
                f"could not connect within {connect_seconds:g} s (TCP and TLS handshake)"
            )
        yield stream


def skipped_unknown(counter: wire.UnknownFieldCounter, message: messages.ServerMessage) -> bool:
    """Count the fields of ``message`` this version does not know (an unknown oneof member is
    one of ServerMessage's) in ``counter``, log each the first time; whether there were any."""
    found = wire.unknown_fields(message)
    if not found:
        return False
    for key in counter.note(found):
        log.warning(
            "the server sent %s, which this agent does not know: skipped (logged once; "
            "counted in kubesvc_protocol_unknown_fields_total)",
            counter.describe(key),
        )
    return True


def message_kind(message: messages.ServerMessage) -> str:
    """The name of the oneof member ``message`` carries; "" for none this version knows."""
    name: str = betterproto.which_one_of(message, "message")[0]
    return name


def known_role(value: int) -> messages.Role | None:
    """``value`` as a Role this version knows, else None (betterproto keeps an unknown enum
    value as a member that ``messages.Role(...)`` refuses)."""
    try:
        return messages.Role(int(value))
    except ValueError:
        return None
