"""The receiving end the agent benches stream to: a gRPC handler that makes every account the
agent names PRIMARY, acks every batch once the bench has counted it, and answers heartbeats.
Lighter than the real server (no store), so that the agent's rate is what is measured."""

from __future__ import annotations

from collections.abc import Callable

import betterproto

import wire
from wire import messages

__all__ = ["serve_as_primary"]


def _primary(accounts: list[messages.AccountInfo]) -> list[messages.AccountAssignment]:
    return [messages.AccountAssignment(name=a.name, role=messages.Role.PRIMARY) for a in accounts]


async def serve_as_primary(
    stream: wire.ServerStream, count: Callable[[messages.EventBatch], None]
) -> None:
    """Serve one agent stream until the agent ends it: ``count`` sees each EventBatch before
    its Ack is sent."""
    first = await stream.receive()
    _, hello = betterproto.which_one_of(first, "message")
    assert isinstance(hello, messages.Hello)
    welcome = messages.Welcome(
        session_token="bench", server_id="bench", accounts=_primary(hello.accounts)
    )
    await stream.send(messages.ServerMessage(welcome=welcome))
    while True:
        try:
            message = await stream.receive()
        except wire.EndOfStream:
            return
        _, body = betterproto.which_one_of(message, "message")
        if isinstance(body, messages.EventBatch):
            count(body)
            await stream.send(messages.ServerMessage(ack=messages.Ack(seq=body.seq)))
        elif isinstance(body, messages.AccountsChanged):
            assignment = messages.Assignment(accounts=_primary(body.accounts))
            await stream.send(messages.ServerMessage(assignment=assignment))
        elif isinstance(body, messages.Heartbeat):
            await stream.send(messages.ServerMessage(heartbeat=body))
