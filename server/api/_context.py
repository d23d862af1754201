"""What the REST API needs from the rest of the server, and request helpers.

`ApiState` is the seam: the server's `ServerState` (sessions, registry, store, feed) satisfies
it structurally. `StandaloneState` is the API's own implementation for a server running with
no gRPC sessions (a read-only replica, the tests of the API): it stores dynamic accounts and
disconnects nobody.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.requests import HTTPConnection

from .._feed import ChangeFeed
from .._readiness import Readiness
from ..store import Store, StoredObject
from ._metrics import ApiMetrics

__all__ = ["ApiContext", "ApiState", "StandaloneState", "collect_objects", "context"]

# Object scans (events of an object, cluster lookups) stop here: every answer has a bound.
MAX_SCAN_OBJECTS = 100_000


class ApiState(Protocol):
    """The server as the REST API sees it."""

    @property
    def store(self) -> Store: ...

    @property
    def feed(self) -> ChangeFeed: ...

    @property
    def server_id(self) -> str: ...

    @property
    def readiness(self) -> Readiness | None:
        """GET /health/ready's answers; None: no check runs (ready while it answers)."""
        ...

    async def push_dynamic_account(self, definition: Mapping[str, Any]) -> str | None:
        """Send a dynamic account definition to a connected agent (service mode).

        Returns the agent id it went to, or None when no agent can take it now.
        """
        ...

    async def disconnect_agent(self, agent_id: str) -> int:
        """End every session of `agent_id`; returns how many were ended."""
        ...


@dataclass(slots=True)
class StandaloneState:
    """An `ApiState` with a store and a feed and no agent sessions."""

    store: Store
    feed: ChangeFeed
    server_id: str = "kubesvc-server"
    readiness: Readiness | None = None

    async def push_dynamic_account(self, definition: Mapping[str, Any]) -> str | None:
        return None

    async def disconnect_agent(self, agent_id: str) -> int:
        return 0


@dataclass(slots=True)
class ApiContext:
    """Per-app context, reachable from every request as `context(request)`."""

    state: ApiState
    metrics: ApiMetrics


def context(connection: HTTPConnection) -> ApiContext:
    ctx = connection.app.state.ctx
    assert isinstance(ctx, ApiContext)
    return ctx


async def collect_objects(
    store: Store,
    *,
    account: str,
    kind: str,
    namespace: str | None,
    group: str | None = None,
    keep: Callable[[StoredObject], bool] | None = None,
) -> list[StoredObject]:
    """The stored objects matching (and accepted by `keep`), read page by page; the scan stops
    after MAX_SCAN_OBJECTS objects so that every answer has a bound."""
    found: list[StoredObject] = []
    token: str | None = None
    seen = 0
    while True:
        page = await store.query_objects(
            account=account,
            kind=kind,
            namespace=namespace,
            limit=1000,
            continue_token=token,
            group=group,
        )
        found.extend(o for o in page.objects if keep is None or keep(o))
        seen += len(page.objects)
        token = page.next_token
        if token is None or seen >= MAX_SCAN_OBJECTS:
            return found
