"""The Store's async methods, once for both backends: each is one call of the backend's
synchronous core in a worker thread (``_threads``).

A backend gives its core's operations (``CoreOps``: each takes the handle a worker thread
holds first: SQLite's core itself, or a PostgreSQL connection) and its WorkerThreads; it
keeps only what is its own (SQLite: admitting writes against the write-ahead log's size,
by overriding ``_write``; its upkeep).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Concatenate, Generic, ParamSpec, Protocol, TypeVar

from wire import EventRecord

from .._errors import StoreError
from ..views import SearchHits
from ._ingest import apply_groups
from ._notify import Notice, check_notices
from ._queries import ObjectQuery
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
    ObjectPage,
    OperationEvent,
    OperationRecord,
    ReplicaRecord,
    ResumePoint,
    StoredObject,
    UnavailableKind,
)
from ._threads import WorkerThreads
from ._views import SearchRequest, ViewQuery, ViewRow

H = TypeVar("H")
H_contra = TypeVar("H_contra", contravariant=True)
P = ParamSpec("P")
T = TypeVar("T")

# What a write of accounts, agents or operations adds to the log, about: a page or two.
SMALL_WRITE = 8192


# What a new object's view_index row adds to the log, about: it lands on a page of each of
# the index's b-trees that the row before did not touch (~85 KB for 40 new pods measured).
VIEW_ROW_BYTES = 2048


def batch_size(records: Sequence[EventRecord]) -> int:
    """About what writing ``records`` adds to the log: their objects, their view index rows,
    and a page for the index entries and the resume points."""
    return sum(len(r.object) + VIEW_ROW_BYTES for r in records) + 4096


class CoreOps(Protocol[H_contra]):
    """A backend core's synchronous operations, each on the handle ``h`` of the worker
    thread it runs in, each one transaction (raising StoreError and what ``_protocol.Store``
    names)."""

    def apply_events(
        self, h: H_contra, records: Sequence[EventRecord], account: str | None, /
    ) -> BatchOutcome: ...

    def apply_operation_objects(
        self, h: H_contra, records: Sequence[EventRecord], /
    ) -> BatchOutcome: ...

    def apply_kind_changes(
        self, h: H_contra, changes: Sequence[KindChange], /
    ) -> AvailabilityOutcome: ...

    def apply_account_scope(self, h: H_contra, scope: AccountScope, /) -> AvailabilityOutcome: ...

    def unavailable_kinds(self, h: H_contra, account: str | None, /) -> list[UnavailableKind]: ...

    def get_object(
        self,
        h: H_contra,
        account: str,
        api_version_or_group: str,
        kind: str,
        namespace: str,
        name: str,
        /,
    ) -> StoredObject | None: ...

    def query_objects(self, h: H_contra, q: ObjectQuery, /) -> ObjectPage: ...

    def count_objects(self, h: H_contra, account: str | None, kind: str | None, /) -> int: ...

    def kind_overview(self, h: H_contra, /) -> list[KindOverview]: ...

    def resume_points(self, h: H_contra, account: str, /) -> list[ResumePoint]: ...

    def upsert_account(self, h: H_contra, record: AccountRecord, /) -> None: ...

    def get_account(self, h: H_contra, name: str, /) -> AccountRecord | None: ...

    def list_accounts(self, h: H_contra, /) -> list[AccountRecord]: ...

    def delete_account(self, h: H_contra, name: str, /) -> bool: ...

    def upsert_agent(self, h: H_contra, record: AgentRecord, /) -> None: ...

    def delete_agent(self, h: H_contra, session_id: str, /) -> None: ...

    def list_agents(self, h: H_contra, /) -> list[AgentRecord]: ...

    def record_operation(self, h: H_contra, record: OperationRecord, message: str, /) -> None: ...

    def record_operations(
        self,
        h: H_contra,
        items: Sequence[tuple[OperationRecord, str]],
        notices: Sequence[Notice],
        dispatches: Sequence[DispatchRecord],
        /,
    ) -> None: ...

    def create_operations(
        self, h: H_contra, groups: Sequence[Sequence[tuple[OperationRecord, str]]], /
    ) -> list[bool]: ...

    def claim_dispatched(
        self, h: H_contra, replica_id: str, limit: int, /
    ) -> list[DispatchRecord]: ...

    def withdraw_dispatched(self, h: H_contra, op_id: str, /) -> bool: ...

    def expire_dispatched(self, h: H_contra, before_ms: int, /) -> list[str]: ...

    def get_operation(self, h: H_contra, operation_id: str, /) -> OperationRecord | None: ...

    def get_operations(self, h: H_contra, ids: Sequence[str], /) -> list[OperationRecord]: ...

    def list_operations(
        self, h: H_contra, account: str | None, limit: int, /
    ) -> list[OperationRecord]: ...

    def operation_history(self, h: H_contra, operation_id: str, /) -> list[OperationEvent]: ...

    def heartbeat_replica(self, h: H_contra, record: ReplicaRecord, ttl_ms: int, /) -> None: ...

    def list_replicas(self, h: H_contra, /) -> list[ReplicaRecord]: ...

    def delete_replica(self, h: H_contra, replica_id: str, /) -> None: ...

    def acquire_lease(
        self,
        h: H_contra,
        account: str,
        replica_id: str,
        session_id: str,
        agent_id: str,
        kube_host: str,
        cert_fingerprint: str,
        ttl_ms: int,
        /,
    ) -> LeaseOutcome: ...

    def release_lease(self, h: H_contra, account: str, session_id: str, /) -> bool: ...

    def get_lease(self, h: H_contra, account: str, /) -> LeaseRecord | None: ...

    def list_leases(self, h: H_contra, /) -> list[LeaseRecord]: ...

    def expire_leases(self, h: H_contra, grace_ms: int, /) -> list[LeaseRecord]: ...

    def claim_duty(self, h: H_contra, name: str, replica_id: str, ttl_ms: int, /) -> bool: ...

    def get_objects(
        self, h: H_contra, keys: Sequence[tuple[str, str, str, str, str]], /
    ) -> list[StoredObject]: ...

    def read_changes(
        self, h: H_contra, cursor: ChangeCursor | None, limit: int, /
    ) -> ChangePage: ...

    def read_views(self, h: H_contra, queries: Sequence[ViewQuery], /) -> list[list[ViewRow]]: ...

    def search_views(self, h: H_contra, request: SearchRequest, /) -> SearchHits: ...

    def trim_changes(self, h: H_contra, keep_ms: int, max_rows: int, /) -> int: ...

    def fill_views(self, h: H_contra, /) -> int: ...


class ThreadedStore(Generic[H]):
    """``_protocol.Store``'s data methods on ``ops`` through ``threads`` (its docstrings say
    what each promises). Subclasses add ``run_upkeep`` and may override ``_write``."""

    def __init__(self, ops: CoreOps[H], threads: WorkerThreads[H]) -> None:
        self._ops = ops
        self._threads = threads

    async def _run(
        self, fn: Callable[Concatenate[H, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await self._threads.run(fn, *args, **kwargs)

    async def _write(
        self, nbytes: int, fn: Callable[Concatenate[H, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``_run`` for a call that writes about ``nbytes`` (a backend may hold it back)."""
        return await self._run(fn, *args, **kwargs)

    def _committed(self, notices: Sequence[Notice]) -> None:
        """After a write that carried ``notices`` committed: a backend that does not send
        them inside its transactions (SQLite: one process) delivers them here."""

    async def apply_batch(self, account: str, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._write(batch_size(records), self._ops.apply_events, records, account)

    async def apply_events(self, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._write(batch_size(records), self._ops.apply_events, records, None)

    async def apply_operation_objects(self, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._write(batch_size(records), self._ops.apply_operation_objects, records)

    async def apply_kind_changes(self, changes: Sequence[KindChange]) -> AvailabilityOutcome:
        return await self._write(SMALL_WRITE, self._ops.apply_kind_changes, changes)

    async def apply_account_scope(self, scope: AccountScope) -> AvailabilityOutcome:
        return await self._write(SMALL_WRITE, self._ops.apply_account_scope, scope)

    async def unavailable_kinds(self, account: str | None = None) -> list[UnavailableKind]:
        return await self._run(self._ops.unavailable_kinds, account)

    async def get_object(
        self, account: str, api_version_or_group: str, kind: str, namespace: str, name: str
    ) -> StoredObject | None:
        return await self._run(
            self._ops.get_object, account, api_version_or_group, kind, namespace, name
        )

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
        q = ObjectQuery(account, group, kind, namespace, label_selector, limit, continue_token)
        return await self._run(self._ops.query_objects, q)

    async def count_objects(self, account: str | None = None, kind: str | None = None) -> int:
        return await self._run(self._ops.count_objects, account, kind)

    async def kind_overview(self) -> list[KindOverview]:
        return await self._run(self._ops.kind_overview)

    async def resume_points(self, account: str) -> list[ResumePoint]:
        return await self._run(self._ops.resume_points, account)

    async def upsert_account(self, record: AccountRecord) -> None:
        await self._write(SMALL_WRITE, self._ops.upsert_account, record)

    async def get_account(self, name: str) -> AccountRecord | None:
        return await self._run(self._ops.get_account, name)

    async def list_accounts(self) -> list[AccountRecord]:
        return await self._run(self._ops.list_accounts)

    async def delete_account(self, name: str) -> bool:
        return await self._write(SMALL_WRITE, self._ops.delete_account, name)

    async def upsert_agent(self, record: AgentRecord) -> None:
        await self._write(SMALL_WRITE, self._ops.upsert_agent, record)

    async def delete_agent(self, session_id: str) -> None:
        await self._write(SMALL_WRITE, self._ops.delete_agent, session_id)

    async def list_agents(self) -> list[AgentRecord]:
        return await self._run(self._ops.list_agents)

    async def record_operation(self, record: OperationRecord, message: str = "") -> None:
        await self._write(SMALL_WRITE, self._ops.record_operation, record, message)

    async def record_operations(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        *,
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> None:
        check_notices(notices)
        nbytes = SMALL_WRITE + sum(len(d.payload_json) for d in dispatches)
        await self._write(nbytes, self._ops.record_operations, items, notices, dispatches)
        self._committed(notices)

    async def record_operations_and_objects(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        objects: Sequence[Sequence[EventRecord]],
        *,
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> list[StoreError | None]:
        check_notices(notices)
        ops = self._ops

        def both(h: H) -> list[StoreError | None]:
            errors = apply_groups(lambda g: ops.apply_operation_objects(h, g), objects)
            ops.record_operations(h, items, notices, dispatches)
            return errors

        errors = await self._write(sum(map(batch_size, objects)), both)
        self._committed(notices)
        return errors

    async def create_operations(
        self, groups: Sequence[Sequence[tuple[OperationRecord, str]]]
    ) -> list[bool]:
        if any(not group for group in groups):
            raise ValueError("create_operations: every group needs a first record")
        return await self._write(SMALL_WRITE, self._ops.create_operations, groups)

    async def claim_dispatched(self, replica_id: str, limit: int) -> list[DispatchRecord]:
        return await self._write(SMALL_WRITE, self._ops.claim_dispatched, replica_id, limit)

    async def withdraw_dispatched(self, op_id: str) -> bool:
        return await self._write(SMALL_WRITE, self._ops.withdraw_dispatched, op_id)

    async def expire_dispatched(self, before_ms: int) -> list[str]:
        return await self._write(SMALL_WRITE, self._ops.expire_dispatched, before_ms)

    async def get_operation(self, operation_id: str) -> OperationRecord | None:
        return await self._run(self._ops.get_operation, operation_id)

    async def get_operations(self, ids: Sequence[str]) -> list[OperationRecord]:
        return await self._run(self._ops.get_operations, ids) if ids else []

    async def list_operations(
        self, account: str | None = None, limit: int = 100
    ) -> list[OperationRecord]:
        return await self._run(self._ops.list_operations, account, limit)

    async def operation_history(self, operation_id: str) -> list[OperationEvent]:
        return await self._run(self._ops.operation_history, operation_id)

    async def heartbeat_replica(self, record: ReplicaRecord, lease_ttl_ms: int) -> None:
        await self._write(SMALL_WRITE, self._ops.heartbeat_replica, record, lease_ttl_ms)

    async def list_replicas(self) -> list[ReplicaRecord]:
        return await self._run(self._ops.list_replicas)

    async def delete_replica(self, replica_id: str) -> None:
        await self._write(SMALL_WRITE, self._ops.delete_replica, replica_id)

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
        return await self._write(
            SMALL_WRITE,
            self._ops.acquire_lease,
            account,
            replica_id,
            session_id,
            agent_id,
            kube_host,
            cert_fingerprint,
            ttl_ms,
        )

    async def release_lease(self, account: str, session_id: str) -> bool:
        return await self._write(SMALL_WRITE, self._ops.release_lease, account, session_id)

    async def get_lease(self, account: str) -> LeaseRecord | None:
        return await self._run(self._ops.get_lease, account)

    async def list_leases(self) -> list[LeaseRecord]:
        return await self._run(self._ops.list_leases)

    async def expire_leases(self, grace_ms: int = 0) -> list[LeaseRecord]:
        return await self._write(SMALL_WRITE, self._ops.expire_leases, grace_ms)

    async def claim_duty(self, name: str, replica_id: str, ttl_ms: int) -> bool:
        return await self._write(SMALL_WRITE, self._ops.claim_duty, name, replica_id, ttl_ms)

    async def get_objects(
        self, keys: Sequence[tuple[str, str, str, str, str]]
    ) -> list[StoredObject]:
        return await self._run(self._ops.get_objects, keys)

    async def read_views(self, queries: Sequence[ViewQuery]) -> list[list[ViewRow]]:
        return await self._run(self._ops.read_views, queries) if queries else []

    async def search_views(self, request: SearchRequest) -> SearchHits:
        return await self._run(self._ops.search_views, request)

    async def read_changes(self, cursor: ChangeCursor | None, limit: int = 8) -> ChangePage:
        return await self._run(self._ops.read_changes, cursor, limit)

    async def trim_changes(self, keep_ms: int, max_rows: int) -> int:
        return await self._write(SMALL_WRITE, self._ops.trim_changes, keep_ms, max_rows)

    async def fill_views(self) -> int:
        return await self._write(SMALL_WRITE, self._ops.fill_views)

    async def aclose(self) -> None:
        """Close the connections (after the calls in progress); later calls raise
        StoreClosed."""
        await self._threads.aclose()
