"""What the Link tests share: settings for a Link to a test server on loopback, the server's
side of the handshake that makes account k1 PRIMARY, a Link announcing k1, and an account
runner that sends nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

import wire
from agent import Backoff
from agent.link import Link, LinkSettings
from agent.link._settings import AccountRunner
from budget import ByteBudget, EventSender
from wire import messages

__all__ = ["idle_runner", "k1_link", "loopback_link", "welcome_k1"]


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


async def _k1_accounts() -> list[messages.AccountInfo]:
    return [messages.AccountInfo(name="k1", kube_host="h", properties_json="{}")]


def k1_link(
    settings: LinkSettings, runner: AccountRunner, budget: ByteBudget | None = None
) -> Link:
    """The real Link announcing account k1 (no resume points asked for), its watches played
    by ``runner``."""
    return Link(
        settings,
        budget or ByteBudget(1 << 20),
        hello_accounts=_k1_accounts,
        runner=runner,
        max_resume_age_ms=lambda name: 0,
    )


async def idle_runner(
    name: str,
    resume: Mapping[tuple[str, str, str], str],
    send: EventSender,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """An account runner that starts and sends nothing (a session with only heartbeats)."""
    task_status.started()
    await trio.sleep_forever()
