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
from ..views import SearchHits
from ._notify import Notice
from ._records import (
    AccountRecord,
    AccountScope,
    AgentRecord,
    AvailabilityOutcome,
    BatchOutcome,
    ChangeCursor,
    ChangePage,
    DispatchRecord,
    KindChange,
    KindOverview,
    LeaseOutcome,
    LeaseRecord,
    Notification,
    ObjectPage,
    OperationEvent,
    OperationRecord,
    ReplicaRecord,
    ResumePoint,
    StoredObject,
    UnavailableKind,
)
from ._views import SearchRequest, ViewQuery, ViewRow


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

    async def apply_kind_changes(self, changes: Sequence[KindChange]) -> AvailabilityOutcome:
        """Apply the agent's KindStatus entries in order, in one transaction: an unavailable
        (account, kind, scope) loses its objects and resume points there and is marked (with
        its code and reason); an available one loses its mark (``_availability``)."""
        ...

    async def apply_account_scope(self, scope: AccountScope) -> AvailabilityOutcome:
        """Delete the account's objects, resume points and unavailable marks outside what
        the agent watches now (its WatchScope), in one transaction."""
        ...

    async def unavailable_kinds(self, account: str | None = None) -> list[UnavailableKind]:
        """The unavailable marks of ``account`` (None: every account's), ordered by account,
        group, kind and scope."""
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

    async def kind_overview(self) -> list[KindOverview]:
        """Every account's kinds at a glance (the status page): objects per kind, counted on
        the coordinates' index, and the watches that finished a listing; ordered by account,
        group and kind. One call, bounded by accounts x kinds, never by objects' bodies."""
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

    async def record_operations(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        *,
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> None:
        """Several ``(record, message)`` writes of record_operation in ONE transaction,
        which also puts ``dispatches`` in their target replicas' mailboxes (see
        ``claim_dispatched``); ``notices`` ((channel, payload) pairs, see ``notify``) are
        delivered once it committed (never after a rollback)."""
        ...

    async def record_operations_and_objects(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        objects: Sequence[Sequence[EventRecord]],
        *,
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> list[StoreError | None]:
        """``apply_operation_objects`` for each group of ``objects``, then
        ``record_operations(items, notices=..., dispatches=...)``, in one call (for SQLite: one
        worker-thread hop instead of one per call). The groups share one transaction unless it
        fails, then each is tried alone, so one operation's bad objects cost no other its
        cache update. Returns each group's error (None when applied); raises StoreError when
        the records failed."""
        ...

    async def get_operation(self, operation_id: str) -> OperationRecord | None: ...

    async def get_operations(self, ids: Sequence[str]) -> list[OperationRecord]:
        """The operations of ``ids`` that exist, in no particular order (one read)."""
        ...

    async def list_operations(
        self, account: str | None = None, limit: int = 100
    ) -> list[OperationRecord]: ...

    async def operation_history(self, operation_id: str) -> list[OperationEvent]: ...

    # -- replicas and roles across them (``_leases`` says how) --------------------------

    async def heartbeat_replica(self, record: ReplicaRecord, lease_ttl_ms: int) -> None:
        """Upsert the replica's row and push the expiry of every lease it holds to now +
        ``lease_ttl_ms`` (its ``primaries`` are counted from those leases)."""
        ...

    async def list_replicas(self) -> list[ReplicaRecord]:
        """Every replica row, live or not (callers judge liveness by ``heartbeat_ms``)."""
        ...

    async def delete_replica(self, replica_id: str) -> None:
        """Forget a replica (a graceful drain); its leases and duties are released."""
        ...

    async def acquire_lease(
        self,
        account: str,
        replica_id: str,
        session_id: str,
        agent_id: str,
        kube_host: str,
        cert_fingerprint: str,
        ttl_ms: int,
    ) -> LeaseOutcome:
        """In ONE transaction: a refusal when the account's row, or its live lease, is bound
        to another cluster; else granted (expiring at now + ``ttl_ms``) when there is no
        lease, an expired one, or one ``replica_id`` already holds (the session may change);
        else not granted, ``holder`` the live lease."""
        ...

    async def release_lease(self, account: str, session_id: str) -> bool:
        """Drop the account's lease if ``session_id`` holds it; whether it did."""
        ...

    async def get_lease(self, account: str) -> LeaseRecord | None:
        """The account's lease row, expired or not."""
        ...

    async def list_leases(self) -> list[LeaseRecord]:
        """Every lease row, expired or not, by account."""
        ...

    async def expire_leases(self, grace_ms: int = 0) -> list[LeaseRecord]:
        """Delete the lease rows expired for at least ``grace_ms`` (housekeeping); returns
        them."""
        ...

    async def claim_duty(self, name: str, replica_id: str, ttl_ms: int) -> bool:
        """Hold the named duty (e.g. "housekeeping") until now + ``ttl_ms``: granted when
        nobody holds it, its holder's claim lapsed, or ``replica_id`` holds it already."""
        ...

    # -- the change feed across replicas (``_changes``, ``_pg_changes`` say how) ---------

    async def get_objects(
        self, keys: Sequence[tuple[str, str, str, str, str]]
    ) -> list[StoredObject]:
        """The stored objects of ``keys`` (account, apiVersion or group, kind, namespace,
        name; the kind compares case-insensitively): the ones that exist, in no order."""
        ...

    # -- Deck's views (``_views``: the index kept with the objects) ----------------------

    async def read_views(self, queries: Sequence[ViewQuery]) -> list[list[ViewRow]]:
        """Each query's rows of the view index (with the objects' bodies when it asks), all
        read in one call (one snapshot)."""
        ...

    async def search_views(self, request: SearchRequest) -> SearchHits:
        """``/search``'s matches (``_views.SearchRequest`` says of what), in one call."""
        ...

    @property
    def writer(self) -> str:
        """This store instance's name in the change log, which its notifications carry
        (``change_notice``); "" on SQLite, which has no change log."""
        ...

    async def read_changes(self, cursor: ChangeCursor | None, limit: int = 8) -> ChangePage:
        """The next page (at most ``limit`` rows, each one committed write) of the changes
        OTHER store instances committed after ``cursor``; ``None``: an empty page whose
        cursor is "now". For any one object in commit order. SQLite: always empty (one
        process owns the file; its feed is its own ingest)."""
        ...

    async def trim_changes(self, keep_ms: int, max_rows: int) -> int:
        """Delete the change-log rows older than ``keep_ms`` or beyond the newest
        ``max_rows`` (housekeeping); how many. SQLite: 0."""

    async def fill_views(self) -> int:
        """Index the objects of the views' kinds that have no view row (housekeeping, when a
        replica left: one of a version from before the index ingests without writing rows);
        how many."""

    # -- notifications and operations across replicas (``_notify``, ``_dispatch``) -------

    async def notify(self, channel: str, payload: str) -> None:
        """Wake the listeners of ``channel`` (every replica's, on PostgreSQL: ``pg_notify``;
        this process's on SQLite). A notification is a wake-up, not a message: it may be
        missed, so receivers also poll what it announces. ``payload`` carries ids only:
        ValueError past ``MAX_PAYLOAD_BYTES`` or for a channel PostgreSQL would refuse."""
        ...

    async def listen(
        self,
        channels: Sequence[str],
        send: trio.MemorySendChannel[Notification],
        *,
        task_status: trio.TaskStatus[None] = ...,
    ) -> None:
        """Put the notifications sent on ``channels`` into ``send`` until cancelled, plus a
        resync marker (``Notification("")``) each time listening (re)starts. A full ``send``
        drops notifications. PostgreSQL: a connection of its own, reconnected after a fault
        (never raises for one). Reports started at once."""
        ...

    async def create_operations(
        self, groups: Sequence[Sequence[tuple[OperationRecord, str]]]
    ) -> list[bool]:
        """Each group's ``(record, message)`` writes, only when the group's first record's id
        is new (insert-if-absent on the unique id: of two replicas creating one id at once,
        exactly one writes), all groups in one transaction. Returns which groups were
        written; a group not written left nothing behind."""
        ...

    async def claim_dispatched(self, replica_id: str, limit: int) -> list[DispatchRecord]:
        """Take (delete and return) up to ``limit`` dispatched operations waiting for
        ``replica_id``, oldest first: each is returned to one claimer, once, and its payload
        is gone from the store when this returns."""
        ...

    async def withdraw_dispatched(self, op_id: str) -> bool:
        """Delete ``op_id``'s dispatch if nobody claimed it yet; whether it did (True: the
        target never saw it)."""
        ...

    async def expire_dispatched(self, before_ms: int) -> list[str]:
        """Delete the dispatches whose deadline is before ``before_ms`` (housekeeping);
        returns their operation ids."""
        ...
