"""What the Link tests share: settings for a Link to a test server on loopback, and the
server's side of the handshake that makes account k1 PRIMARY."""

from __future__ import annotations

from typing import Any

import wire
from agent import Backoff
from agent.link import LinkSettings
from wire import messages

__all__ = ["loopback_link", "welcome_k1"]


def loopback_link(port: int, agent_id: str, **overrides: Any) -> LinkSettings:
    """A Link to 127.0.0.1:``port``: no heartbeats, retries within a tenth of a second."""
    options: dict[str, Any] = {
        "instance_id": "i-1",
        "agent_version": "0.1",
        "heartbeat_seconds": 0,
        "backoff": Backoff(base=0.02, jitter=0, max_delay=0.1),
        **overrides,
    }
    return LinkSettings(host="127.0.0.1", port=port, agent_id=agent_id, **options)


async def welcome_k1(stream: wire.ServerStream) -> None:
    """Read the agent's Hello and welcome it with k1 as PRIMARY."""
    await stream.receive()
    assignment = messages.AccountAssignment(name="k1", role=messages.Role.PRIMARY)
    await stream.send(messages.ServerMessage(welcome=messages.Welcome(accounts=[assignment])))
