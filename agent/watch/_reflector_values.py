"""What a reflector is told and what it reports: its settings, its state (read by /watches,
/ready and the metrics), the metric hooks it calls, and the key bookmarks coalesce by.

Plain values with no behaviour (and ``NoHooks``, the hooks of a reflector nobody measures),
kept apart from the watch loop (``_reflector``) so that the account, the health views and
the sync progress can name them without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ._discovery import WatchTarget
from ._lines import DEFAULT_MAX_LINE_BYTES
from ._listing import DEFAULT_MAX_PAGE_BYTES, DEFAULT_PAGE_LIMIT
from ._retry import Retry

__all__ = ["BookmarkKey", "NoHooks", "ReflectorHooks", "ReflectorSettings", "ReflectorState"]


@dataclass(frozen=True, slots=True)
class ReflectorSettings:
    """How a reflector lists and watches; defaults suit a real API server."""

    page_limit: int = DEFAULT_PAGE_LIMIT
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    #: ``timeoutSeconds`` of each watch, drawn at random in this range (as client-go does).
    watch_timeout_seconds: tuple[int, int] = (300, 600)
    #: A watch that yields nothing (not even a bookmark) for this long is dropped and resumed.
    inactivity_seconds: float = 150.0
    #: Try the streaming list (sendInitialEvents) first; a server that refuses it (400/422) or
    #: ends the watch before the initial-events-end bookmark makes this reflector list+watch.
    streaming_list: bool = True
    strip_managed_fields: bool = True
    #: After a 401/403/404/406 the kind is retried after this many seconds, the delay then
    #: doubling (±jitter) up to ``unavailable_retry_max`` while it stays unavailable.
    unavailable_retry_seconds: float = 10.0
    unavailable_retry_max: float = 120.0
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    #: Each delay is spread by ±this fraction, so reflectors cut together do not return
    #: together.
    backoff_jitter: float = 0.2
    #: At most one retry log line per reflector in this many seconds (the line counts the
    #: retries it stood for).
    retry_log_interval: float = 30.0


@dataclass(frozen=True, slots=True)
class BookmarkKey:
    """The coalescing key of bookmarks: one pending bookmark per (account, kind, scope)."""

    account: str
    api_version: str
    kind: str
    scope: str


@dataclass(slots=True)
class ReflectorState:
    """What a reflector reports (for /watches, /ready and metrics); written only by it."""

    target: WatchTarget
    available: bool = True
    reason: str = ""
    #: the HTTP status that made the kind unavailable (401, 403, 404, 406; 0 while available)
    unavailable_code: int = 0
    synced: bool = False
    resource_version: str = ""
    lists: int = 0
    watches: int = 0
    relists: int = 0
    stalls: int = 0
    events: int = 0
    #: objects received by lists (and streaming lists' initial events), for sync progress
    listed: int = 0
    streaming: bool = False
    last_error: str = ""
    #: the last request failed and none has succeeded since (``last_error`` says why); a
    #: completed list or an opened watch clears it, so /watches shows only current trouble
    failing: bool = False
    #: retries by reason (``RetryReason`` values), for ``kubesvc_watch_retries_total``
    retries: dict[str, int] = field(default_factory=dict)
    #: the delay being waited now before the next request (0 while not waiting)
    backoff_seconds: float = 0.0
    last_retry: Retry | None = None
    #: called when the kind has synced (the account's progress report waits on it)
    on_synced: Callable[[], None] = field(default=lambda: None, repr=False, compare=False)


class ReflectorHooks(Protocol):
    """Metric hooks; called from the reflector's task, must not block."""

    def kind_unavailable(self, account: str, target: WatchTarget, reason: str) -> None: ...

    def kind_available(self, account: str, target: WatchTarget) -> None: ...

    def request(self, account: str, verb: str, target: WatchTarget) -> None: ...


class NoHooks:
    """The hooks of a reflector nobody measures."""

    def kind_unavailable(self, account: str, target: WatchTarget, reason: str) -> None:
        pass

    def kind_available(self, account: str, target: WatchTarget) -> None:
        pass

    def request(self, account: str, verb: str, target: WatchTarget) -> None:
        pass
