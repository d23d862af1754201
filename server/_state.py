"""ServerState: what the parts of a running server share (the REST API reads it)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import wire
from wire import messages

from ._accounts import AccountService
from ._config import ServerConfig
from ._feed import ChangeFeed
from ._feed_follower import ChangeFollower
from ._readiness import Readiness
from ._replica import ReplicaService
from ._sessions import Session, SessionManager
from .store import Store

log = logging.getLogger("server.operations")


class OperationsHook(Protocol):
    """Where operation results from agents go (issue 6 implements the real one)."""

    async def on_result(self, session: Session, result: messages.OperationResult) -> None: ...


class LogOperations:
    """The stand-in until operations exist: results are logged and dropped."""

    async def on_result(self, session: Session, result: messages.OperationResult) -> None:
        log.info(
            "operation %s on %s from agent %s: ok=%s %s",
            result.id,
            result.account,
            session.agent_id,
            result.ok,
            result.error_message,
        )


@dataclass(slots=True)
class ServerState:
    """The running server. ``store`` routes account writes through the registry (RegistryStore),
    so the REST API may use it for everything."""

    config: ServerConfig
    server_id: str
    started_at_ms: int
    store: Store
    feed: ChangeFeed
    accounts: AccountService
    sessions: SessionManager
    operations: OperationsHook
    # Fields and oneof members of agent messages this version does not know: skipped, and
    # counted here (kubesvc_protocol_unknown_fields_total).
    unknown_fields: wire.UnknownFieldCounter = field(default_factory=wire.UnknownFieldCounter)
    # This server as one replica of several sharing the store (its heartbeat, leases).
    replicas: ReplicaService | None = None
    # GET /health/ready: the store answers and the server is not draining (run_server runs
    # its pings and drains it).
    readiness: Readiness | None = None
    # PostgreSQL: publishes the other replicas' changes to ``feed`` (it LISTENs for them).
    follower: ChangeFollower | None = None

    async def push_dynamic_account(self, definition: Mapping[str, Any]) -> str | None:
        """Send a dynamic account to a connected agent; its id, or None when none is."""
        return await self.sessions.push_dynamic_account(definition)

    async def disconnect_agent(self, agent_id: str) -> int:
        """End every session of ``agent_id``; how many were ended."""
        return await self.sessions.disconnect(agent_id)
