"""Kinds the agent cannot watch, as the REST API shows them (docs/protocol.md §7.4).

An account's unavailable kinds are listed with it (``unavailableKinds`` in ``/credentials``
and ``/armory/accounts``), and a read of such a kind answers 403 (the API server refused the
agent) or 503 (it does not serve the kind now) with the reason, not 404 "not found": the
server no longer holds the kind's objects, and does not know whether the one asked for
exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..store import Store, UnavailableKind
from ._errors import ApiError, Forbidden, ServiceUnavailable

__all__ = ["check_available", "mark_json", "marks_by_account", "unavailable_error"]


def mark_json(mark: UnavailableKind) -> dict[str, Any]:
    """One unavailable kind: ``scope`` is "" for the whole kind, else one namespace."""
    return {
        "kind": mark.kind,
        "apiVersion": mark.api_version,
        "scope": mark.scope,
        "code": mark.code,
        "reason": mark.reason or "gone from discovery",
        "since": mark.since_ms,
    }


async def marks_by_account(store: Store, account: str | None = None) -> dict[str, list[Any]]:
    """Every account's unavailable kinds as JSON (one read), by account."""
    found: dict[str, list[Any]] = {}
    for mark in await store.unavailable_kinds(account):
        found.setdefault(mark.account, []).append(mark_json(mark))
    return found


def unavailable_error(
    marks: Iterable[UnavailableKind], group: str | None, kind: str, namespace: str
) -> ApiError | None:
    """The answer for a read of ``kind`` (``group`` None: any) in ``namespace`` ("": cluster
    scope, or every namespace) when a mark covers it, else None."""
    for mark in marks:
        if mark.covers(group, kind, namespace):
            where = f" in namespace {mark.scope}" if mark.scope else ""
            message = (
                f"{mark.kind} ({mark.api_version}){where} of account {mark.account} cannot be "
                f"read: the agent cannot watch it ({mark.reason or 'gone from discovery'}), "
                "so the server holds none of its objects"
            )
            error = Forbidden if mark.forbidden else ServiceUnavailable
            return error(message, unavailableKind=mark_json(mark))
    return None


async def check_available(
    store: Store, account: str, group: str | None, kind: str, namespace: str
) -> None:
    """Raise Forbidden (403) or ServiceUnavailable (503) when the agent cannot watch ``kind``
    of ``account`` in ``namespace`` (one read of the account's marks)."""
    error = unavailable_error(await store.unavailable_kinds(account), group, kind, namespace)
    if error is not None:
        raise error
