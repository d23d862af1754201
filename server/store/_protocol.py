"""The one interface the rest of the server uses to reach the cache store.

SQLite (``open_sqlite_store``) and PostgreSQL (``open_postgres_store``, for several server
replicas) implement it and pass the same test suite; ``open_store`` opens the one a
``StoreConfig`` names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import trio

from wire import EventRecord

from .._errors import StoreError
from ._records import (
    AccountRecord,
    AgentRecord,
    BatchOutcome,
    ObjectPage,
    OperationEvent,
    OperationRecord,
    ResumePoint,
    StoredObject,
)


class Store(Protocol):
    """The cache store. Every method is one transaction; all raise StoreError on failure."""

    async def run_upkeep(self, *, task_status: trio.TaskStatus[None] = ...) -> None:
        """The store's background work while the server runs (SQLite: copying the write-ahead
        log into the database file), until cancelled. Reports started at once."""
        ...

    async def ping(self) -> None:
        """Whether the store answers: one cheap round trip (PostgreSQL: ``SELECT 1`` on a
        connection of its own, not the pool's; SQLite: one read of the file). Raises
        StoreError when it does not answer; the caller bounds how long it waits (the server's
        readiness, server/_readiness.py)."""
        ...

    async def apply_batch(self, account: str, records: Sequence[EventRecord]) -> BatchOutcome:
        """Apply one account's records in one transaction (sync brackets, resume points).

        Raises InvalidRecord (nothing applied) when a record belongs to another account or
        cannot be stored.
        """
        ...

    async def apply_events(self, records: Sequence[EventRecord]) -> BatchOutcome:
        """Like apply_batch for records of any accounts: one transaction for the whole batch."""
        ...

    async def apply_operation_objects(self, records: Sequence[EventRecord]) -> BatchOutcome:
        """The objects an operation returned (issue 6): each upserted unless the stored one has
        a newer (integer) resourceVersion; DELETED records delete. No resume points change."""
        ...

    async def get_object(
        self, account: str, api_version_or_group: str, kind: str, namespace: str, name: str
    ) -> StoredObject | None:
        """One object by coordinates; the kind compares case-insensitively."""
        ...

    async def query_objects(
        self,
        account: str | None = None,
        kind: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        limit: int = 500,
        continue_token: str | None = None,
        *,
        group: str | None = None,
    ) -> ObjectPage:
        """A page of objects in coordinate order; raises InvalidQuery for a bad selector/token."""
        ...

    async def count_objects(self, account: str | None = None, kind: str | None = None) -> int:
        """How many objects match (for /metrics and admin views)."""
        ...

    async def resume_points(self, account: str) -> list[ResumePoint]:
        """The stored resourceVersions of an account's watches (callers filter by age)."""
        ...

    async def upsert_account(self, record: AccountRecord) -> None: ...

    async def get_account(self, name: str) -> AccountRecord | None: ...

    async def list_accounts(self) -> list[AccountRecord]: ...

    async def delete_account(self, name: str) -> bool:
        """Delete the account, its objects, resume points and sync state; False if unknown."""
        ...

    async def upsert_agent(self, record: AgentRecord) -> None: ...

    async def delete_agent(self, session_id: str) -> None: ...

    async def list_agents(self) -> list[AgentRecord]: ...

    async def record_operation(self, record: OperationRecord, message: str = "") -> None:
        """Insert or update an operation and append its state to the history, atomically."""
        ...

    async def record_operations(self, items: Sequence[tuple[OperationRecord, str]]) -> None:
        """Several ``(record, message)`` writes of record_operation in ONE transaction."""
        ...

    async def record_operations_and_objects(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        objects: Sequence[Sequence[EventRecord]],
    ) -> list[StoreError | None]:
        """``apply_operation_objects`` for each group of ``objects``, then
        ``record_operations(items)``, in one call (for SQLite: one worker-thread hop instead
        of one per call). The groups share one transaction unless it fails, then each is tried
        alone, so one operation's bad objects cost no other its cache update. Returns each
        group's error (None when applied); raises StoreError when the records failed."""
        ...

    async def get_operation(self, operation_id: str) -> OperationRecord | None: ...

    async def list_operations(
        self, account: str | None = None, limit: int = 100
    ) -> list[OperationRecord]: ...

    async def operation_history(self, operation_id: str) -> list[OperationEvent]: ...
