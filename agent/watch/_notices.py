"""What the agent tells the server about its watches, in order with the events.

Theory of operation (docs/protocol.md §7.4, §7.5). A reflector that finds its kind forbidden
(or not served) puts a :class:`KindNotice` into the budget channel, the same queue its events
go through, as a BARRIER entry (never coalesced, nothing coalesces across it); the account's
watch loop puts a :class:`ScopeNotice` there after a discovery changed what it watches. The
link's batch sender sends the records before a notice as one EventBatch, then the notice as
a KindStatus or WatchScope message, then goes on: so the server applies a notice after every
event that came before it, and a kind's objects removed on its KindStatus cannot be written
back by a late event. A notice is not acknowledged; one lost with its session is sent again
by the next (a new session starts the watches again, and they report afresh).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from budget import Entry, EntryKind
from wire import messages

__all__ = [
    "GONE_FROM_DISCOVERY",
    "KindNotice",
    "Notice",
    "ScopeNotice",
    "notice_entry",
    "notice_messages",
]

#: The reason a kind that left discovery is unavailable (its code is 0: no API answer).
GONE_FROM_DISCOVERY: Final = "no longer served by the API server (gone from discovery)"

#: Bytes charged per notice on top of its strings.
_NOTICE_OVERHEAD: Final = 64


@dataclass(frozen=True, slots=True)
class KindNotice:
    """(account, kind, scope) became unavailable (``code``, ``reason``), or available again."""

    account: str
    api_version: str
    kind: str
    scope: str
    available: bool
    code: int = 0
    reason: str = ""

    def message(self) -> messages.KindState:
        return messages.KindState(
            account=self.account,
            api_version=self.api_version,
            kind=self.kind,
            scope=self.scope,
            available=self.available,
            code=self.code,
            reason=self.reason,
        )


@dataclass(frozen=True, slots=True)
class ScopeNotice:
    """What the agent watches for ``account`` now: every kind as (api_version, kind), and
    the namespaces of the namespaced ones (none: all but ``omit_namespaces``)."""

    account: str
    kinds: tuple[tuple[str, str], ...]
    namespaces: tuple[str, ...] = ()
    omit_namespaces: tuple[str, ...] = ()

    def message(self) -> messages.WatchScope:
        return messages.WatchScope(
            account=self.account,
            namespaces=list(self.namespaces),
            omit_namespaces=list(self.omit_namespaces),
            kinds=[messages.WatchedKind(api_version=v, kind=k) for v, k in self.kinds],
        )


Notice = KindNotice | ScopeNotice


def notice_entry(notice: Notice) -> Entry:
    """The channel entry carrying ``notice``: a barrier, charged its size in the budget."""
    if isinstance(notice, KindNotice):
        size = sum(map(len, (notice.account, notice.api_version, notice.kind, notice.scope)))
        size += len(notice.reason)
    else:
        size = len(notice.account) + sum(len(v) + len(k) + 8 for v, k in notice.kinds)
        size += sum(len(n) + 4 for n in (*notice.namespaces, *notice.omit_namespaces))
    return Entry(None, EntryKind.BARRIER, _NOTICE_OVERHEAD + size, notice)


def notice_messages(notices: Sequence[Notice]) -> list[messages.AgentMessage]:
    """The messages that carry ``notices``, in order: each run of KindNotices as one
    KindStatus, each ScopeNotice as one WatchScope."""
    out: list[messages.AgentMessage] = []
    run: list[messages.KindState] = []
    for notice in notices:
        if isinstance(notice, KindNotice):
            run.append(notice.message())
            continue
        if run:
            out.append(messages.AgentMessage(kind_status=messages.KindStatus(kinds=run)))
            run = []
        out.append(messages.AgentMessage(watch_scope=notice.message()))
    if run:
        out.append(messages.AgentMessage(kind_status=messages.KindStatus(kinds=run)))
    return out
