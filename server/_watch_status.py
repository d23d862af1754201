"""What an agent says it can (and cannot) watch: its KindStatus and WatchScope messages, read
and checked here, applied through the store (docs/protocol.md §7.4, §7.5).

The Connect handler calls ``kind_status`` and ``watch_scope`` in stream order, between two
batches, so each applies after every batch the agent sent before it. Entries for an account
the session did not declare are a protocol violation (``WatchStatusRefused``); those of an
account it declared but does not lead are dropped, as its records would be. What the store
removed goes to the change feed as deletions; the lines an operator needs are logged here:
a WARNING when a kind becomes unavailable (or its reason changes), INFO when it is back and
when a narrower scope removed objects.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from wire import messages

from ._registry import Role
from ._sessions import Session
from ._shards import spec_of
from ._state import ServerState
from .store import AccountScope, AvailabilityOutcome, KindChange, UnavailableKind, group_of

__all__ = ["WatchStatusRefused", "kind_status", "log_restored", "watch_scope"]

log = logging.getLogger("server.kinds")

#: A reason longer than this is cut (it is an API server's Status message, for people).
MAX_REASON_CHARS = 1000


class WatchStatusRefused(Exception):
    """The message breaks the protocol; the handler ends the call with ``status`` (a
    ``wire.Status`` name) and this message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


async def kind_status(state: ServerState, session: Session, status: messages.KindStatus) -> None:
    """Apply a KindStatus. Raises WatchStatusRefused (nothing applied) for a malformed entry
    or an undeclared account, and StoreError when the store fails."""
    changes: list[KindChange] = []
    for index, entry in enumerate(status.kinds):
        where = f"KindStatus.kinds[{index}]"
        _check_names(where, entry.account, entry.api_version, entry.kind)
        if _served(state, session, entry.account, where):
            reason = "" if entry.available else entry.reason[:MAX_REASON_CHARS]
            code = 0 if entry.available else entry.code
            changes.append(
                KindChange(
                    entry.account,
                    entry.api_version,
                    entry.kind,
                    entry.scope,
                    entry.available,
                    code,
                    reason,
                )
            )
    if not changes:
        return
    outcome = await state.store.apply_kind_changes(changes)
    _published(state, outcome)
    for mark in outcome.marked:
        removed = sum(
            1
            for ref in outcome.swept
            if mark.covers(group_of(ref.api_version), ref.kind, ref.namespace)
        )
        log.warning(
            "account %s: the agent cannot watch %s: %s (%d cached objects removed; reads of "
            "it answer %d with this reason until it is back)",
            mark.account,
            describe(mark),
            mark.reason or "gone from discovery",
            removed,
            403 if mark.forbidden else 503,
        )
    for mark in outcome.cleared:
        log.info("account %s: the agent watches %s again", mark.account, describe(mark))


async def watch_scope(state: ServerState, session: Session, scope: messages.WatchScope) -> None:
    """Apply a WatchScope. Raises WatchStatusRefused for a malformed one or an undeclared
    account, and StoreError when the store fails."""
    where = "WatchScope"
    if not scope.account:
        raise WatchStatusRefused("INVALID_ARGUMENT", f"{where}.account is empty")
    kinds = []
    for index, kind in enumerate(scope.kinds):
        _check_names(f"{where}.kinds[{index}]", scope.account, kind.api_version, kind.kind)
        kinds.append((kind.api_version, kind.kind))
    if not _served(state, session, scope.account, where):
        return
    record = state.accounts.registry.get(session.unit(scope.account))
    outcome = await state.store.apply_account_scope(
        AccountScope(
            scope.account,
            tuple(kinds),
            tuple(scope.namespaces),
            tuple(scope.omit_namespaces),
            # A shard's scope says nothing of the other shards' objects (server/_shards.py).
            shard=spec_of(record) if record is not None else None,
        )
    )
    _published(state, outcome)
    if outcome.swept:
        log.info(
            "account %s: %d cached objects outside what the agent watches now removed (%s)",
            scope.account,
            len(outcome.swept),
            _summary(f"{ref.kind} in {ref.namespace or 'cluster scope'}" for ref in outcome.swept),
        )
    for mark in outcome.dropped:
        log.info(
            "account %s: %s is no longer watched: its unavailable mark is dropped",
            mark.account,
            describe(mark),
        )


def log_restored(marks: Iterable[UnavailableKind]) -> None:
    """The marks a batch's SYNC_END cleared: the kind was listed again."""
    for mark in marks:
        log.info("account %s: the agent lists %s again", mark.account, describe(mark))


def describe(mark: UnavailableKind) -> str:
    """``Pod (v1)``, ``Deployment (apps/v1) in namespace a``."""
    where = f" in namespace {mark.scope}" if mark.scope else ""
    return f"{mark.kind} ({mark.api_version}){where}"


def _published(state: ServerState, outcome: AvailabilityOutcome) -> None:
    # Committed: the feed's subscribers see the removed objects go (DELETED, object null).
    if outcome.swept:
        state.feed.publish([], swept=outcome.swept)


def _served(state: ServerState, session: Session, account: str, where: str) -> bool:
    """Whether ``session`` leads ``account`` (its entries apply); refuses an undeclared one."""
    if account not in session.declared:
        raise WatchStatusRefused(
            "FAILED_PRECONDITION",
            f"{where} names account {account!r}, which this session did not register",
        )
    unit = session.unit(account)
    return state.accounts.registry.role(session.session_id, unit) is Role.PRIMARY


def _check_names(where: str, account: str, api_version: str, kind: str) -> None:
    for name, value in (("account", account), ("api_version", api_version), ("kind", kind)):
        if not value:
            raise WatchStatusRefused("INVALID_ARGUMENT", f"{where}.{name} is empty")


def _summary(items: Iterable[str], most: int = 5) -> str:
    """The most frequent ``items`` with their counts: ``3 Pod in b, 1 ConfigMap in b``."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    shown = [f"{n} {item}" for item, n in sorted(counts.items(), key=lambda kv: -kv[1])[:most]]
    more = len(counts) - most
    return ", ".join(shown) + (f", and {more} more" if more > 0 else "")
