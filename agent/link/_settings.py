"""What the agent's link is given and what it reports: its settings (``clouddriver.*``), the
callables it runs (an account's watches, an operation's handler) and its status (read by
/ready, the admin views and the metrics). Plain data, shared by agent/link/_link.py (the
reconnect loop) and agent/link/_session.py (one session).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import trio

import wire
from budget import EventSender
from wire import messages

from .._backoff import Backoff
from ._rotation import ServerAddress

__all__ = ["AccountRunner", "LinkSettings", "LinkStatus", "OperationHandler", "ResumeKey"]

ResumeKey = tuple[str, str, str]  # (api_version, kind, scope)


class AccountRunner(Protocol):
    """Runs one account's watches into ``send`` until cancelled (the app's reflectors)."""

    async def __call__(
        self,
        name: str,
        resume: Mapping[ResumeKey, str],
        send: EventSender,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None: ...


OperationHandler = Callable[[messages.Operation], Awaitable[messages.OperationResult]]


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """How to reach the server and shape the stream (from ``clouddriver.*``).

    ``host``/``port`` is the server's address; ``addresses``, when given, are all of them
    (``clouddriver.grpcAddresses``), dialled in turn (agent/link/_rotation.py)."""

    host: str
    port: int
    agent_id: str
    instance_id: str
    agent_version: str
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    heartbeat_seconds: float = 20.0  # 0: no heartbeats
    heartbeat_timeout_seconds: float = 10.0
    welcome_timeout_seconds: float = 30.0
    backoff: Backoff = field(default_factory=Backoff)
    # A batch costs ~0.5 ms of fixed work (framing, the bridge, the Ack) whatever its size:
    # large batches keep that under 3 us per 4 KB event. The bytes are also capped at a
    # quarter of the budget so that several batches can be in flight with a small budget.
    batch_max_events: int = 1000
    batch_max_bytes: int = 1024 * 1024
    linger_seconds: float = 0.005
    # Batches sent and not yet acknowledged. When the server is this far behind, the sender
    # waits for an Ack while changes gather (and coalesce) in the channel, so the next batch
    # carries all of them: a busy server gets fewer, larger transactions instead of a queue of
    # small ones that only grows its latency.
    max_batches_in_flight: int = 4
    max_linger_seconds: float = 0.05
    # While only bookmarks are pending the sender waits this long for something else: they
    # only keep the server's resume points fresh, and a quiet agent of 12,000 watches gets
    # ~200 a second (one per watch per minute), each otherwise a batch of its own (~1 ms of
    # framing, bridge and Ack). Held, one batch carries a second's worth.
    bookmark_linger_seconds: float = 1.0
    max_message_size: int = wire.DEFAULT_MAX_MESSAGE_SIZE
    addresses: tuple[ServerAddress, ...] = ()

    def server_addresses(self) -> tuple[ServerAddress, ...]:
        """Every address to dial, in order: ``addresses``, else ``host:port`` alone."""
        return self.addresses or (ServerAddress(self.host, self.port),)


@dataclass(slots=True)
class LinkStatus:
    """What the link did, for /ready, the admin views and the metrics."""

    connected: bool = False
    sessions: int = 0
    disconnections: int = 0
    last_error: str = ""
    server_id: str = ""
    server_address: str = ""  # the address the current (or last) session dialled
    roles: dict[str, str] = field(default_factory=dict)
    # The server's reason with an account's role (why it was REJECTED, or promoted).
    role_reasons: dict[str, str] = field(default_factory=dict)
    batches_sent: int = 0
    events_sent: int = 0
    bytes_sent: int = 0
    oversize_dropped: int = 0
    events_by_kind: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # Fields and message kinds from the server this version does not know (skipped).
    unknown_fields: wire.UnknownFieldCounter = field(default_factory=wire.UnknownFieldCounter)
    # From an EventBatch's send to its Ack: how far behind the server's store is.
    ack_latency: wire.LatencyHistogram = field(
        default_factory=lambda: wire.LatencyHistogram(wire.ACK_BUCKETS)
    )
