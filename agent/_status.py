"""The agent's live state as the health, admin and metrics endpoints show it.

:class:`AgentStatus` holds references to the objects the running parts already update (the
link's ``LinkStatus``, the account set's ``AccountState`` map, the budget's statistics), so
nothing is copied or double-counted: the views below read them when a request comes. The one
thing it owns is the bounded history of operations, which the operation executor records.

The view functions are pure (state in, JSON-able data out) and tested without HTTP.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._account_watch import AccountWatchStatus
from ._accounts import AccountState
from ._link import LinkStatus
from ._sync_progress import sync_progress

__all__ = ["AgentStatus", "BudgetStats", "OperationRecord", "accounts_view", "watches_view"]

MAX_OPERATIONS = 200  # the admin view shows the most recent ones; older ones are dropped


class BudgetStats(Protocol):
    """What ``budget.ByteBudget.statistics()`` returns (only these fields are read)."""

    @property
    def capacity(self) -> int: ...
    @property
    def in_use(self) -> int: ...
    @property
    def high_water(self) -> int: ...
    @property
    def waiters(self) -> int: ...
    @property
    def waits(self) -> int: ...
    @property
    def wait_seconds(self) -> float: ...


@dataclass(slots=True)
class OperationRecord:
    """One operation the server sent, as ``/operations`` lists it."""

    id: str
    account: str
    type: str
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    ok: bool | None = None  # None while running
    error: str = ""


@dataclass(slots=True)
class AgentStatus:
    """The state the endpoints read; the composition root builds it from the running parts.

    ``accounts`` is the live map (e.g. ``AccountSet.accounts``), ``budget`` a callable giving
    the budget's statistics (e.g. ``ByteBudget.statistics``).
    """

    link: LinkStatus = field(default_factory=LinkStatus)
    accounts: Mapping[str, AccountState] = field(default_factory=dict)
    budget: Callable[[], BudgetStats] | None = None
    started_at: float = field(default_factory=time.time)
    operations: deque[OperationRecord] = field(default_factory=lambda: deque(maxlen=MAX_OPERATIONS))

    def operation_started(self, id: str, account: str, type: str) -> OperationRecord:
        """Record a new operation (the oldest record is dropped past MAX_OPERATIONS)."""
        record = OperationRecord(id=id, account=account, type=type)
        self.operations.append(record)
        return record

    def ready(self) -> tuple[bool, str]:
        """Ready = connected to the server and every account's initial lists done.

        Accounts the server made STANDBY or REJECTED do not hold readiness back, nor do
        kinds marked unavailable (403/404). Returns (ready, why not).
        """
        if not self.link.connected:
            return False, "not connected to the server" + (
                f": {self.link.last_error}" if self.link.last_error else ""
            )
        waiting = []
        for name, state in self.accounts.items():
            if self.link.roles.get(name, "PRIMARY") != "PRIMARY":
                continue
            if state.error:
                waiting.append(f"{name} ({state.error})")
            elif state.watch is None or not state.watch.synced:
                waiting.append(name)
        if waiting:
            return False, "initial sync not done for " + ", ".join(sorted(waiting))
        return True, ""


def accounts_view(status: AgentStatus) -> list[dict[str, Any]]:
    """``/accounts``: each account's cluster identity, role, state and kinds."""
    view = []
    for name, state in sorted(status.accounts.items()):
        identity = state.identity
        watch = state.watch
        reflectors = list(watch.reflectors.values()) if watch is not None else []
        view.append(
            {
                "name": name,
                "role": status.link.roles.get(name, ""),
                "kubeHost": identity.host if identity else "",
                "certFingerprint": identity.cert_fingerprint if identity else "",
                "kubeVersion": str(identity.version.get("gitVersion", "")) if identity else "",
                "error": state.error,
                "discovered": bool(watch and watch.discovered),
                "discoveryError": watch.discovery_error if watch else "",
                "synced": bool(watch and watch.synced),
                "watches": len(reflectors),
                "unavailableKinds": sorted(
                    f"{r.target.kind.kind}.{r.target.kind.group}".rstrip(".")
                    for r in reflectors
                    if not r.available
                ),
                "initialSync": _initial_sync(watch),
            }
        )
    return view


def _initial_sync(watch: AccountWatchStatus | None) -> dict[str, object] | None:
    """Kinds done / total and objects so far while the initial sync runs (live); how it
    ended once done (the report's snapshot: later relists do not change it)."""
    if watch is None:
        return None
    known = watch.progress
    if known is not None and known.done:
        return known.to_json()
    seconds = known.seconds if known is not None else 0.0
    live = sync_progress(watch.reflectors.values(), discovered=watch.discovered, seconds=seconds)
    return live.to_json()


def watches_view(status: AgentStatus) -> list[dict[str, Any]]:
    """``/watches``: one line per reflector (account, kind, namespace) with its progress."""
    view = []
    for name, state in sorted(status.accounts.items()):
        if state.watch is None:
            continue
        for r in state.watch.reflectors.values():
            kind = r.target.kind
            view.append(
                {
                    "account": name,
                    "apiVersion": kind.api_version,
                    "kind": kind.kind,
                    "namespace": r.target.namespace,
                    "available": r.available,
                    "reason": r.reason,
                    "synced": r.synced,
                    "resourceVersion": r.resource_version,
                    "lists": r.lists,
                    "watches": r.watches,
                    "relists": r.relists,
                    "events": r.events,
                    "objectsListed": r.listed,
                    "streaming": r.streaming,
                    # Only while the watch is failing: an error it recovered from is
                    # history (in the log and the retry counts), not its state.
                    "lastError": r.last_error if r.failing else "",
                    "retries": sum(r.retries.values()),
                    "backoffSeconds": r.backoff_seconds,
                }
            )
    view.sort(key=lambda w: (w["account"], w["apiVersion"], w["kind"], w["namespace"]))
    return view


def operations_view(status: AgentStatus) -> list[dict[str, Any]]:
    """``/operations``: the most recent operations, newest first."""
    return [
        {
            "id": op.id,
            "account": op.account,
            "type": op.type,
            "startedAt": op.started_at,
            "finishedAt": op.finished_at,
            "state": "running" if op.ok is None else ("succeeded" if op.ok else "failed"),
            "error": op.error,
        }
        for op in reversed(status.operations)
    ]
