"""The account registry put to work: persisted through the store, its grace timer on trio.

AccountService is the thin async shell around the sans-I/O Registry: every change is
persisted (one writer at a time, newest state wins), removed accounts lose their objects, and
role changes are handed to ``on_role_changes`` (the session manager turns them into
Assignments). RegistryStore is the Store the REST API sees: account writes made through it go
through the registry, so the registry in memory and the rows on disk never disagree.
"""

from __future__ import annotations

import builtins
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import trio

from wire import EventRecord

from ._errors import ServerError, StoreError
from ._registry import Registry, RoleChange
from .store import (
    AccountRecord,
    AccountState,
    AgentRecord,
    BatchOutcome,
    ObjectPage,
    OperationEvent,
    OperationRecord,
    ResumePoint,
    Store,
    StoredObject,
)

log = logging.getLogger("server.accounts")
_RETRY_SECONDS = 5.0  # between attempts to write registry changes while the store fails

RoleChangeHandler = Callable[[Sequence[RoleChange]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class AccountHolders:
    """The agents serving an account: the PRIMARY's agent id and the STANDBYs'."""

    primary: str | None
    standbys: builtins.list[str]


class AccountService:
    """The registry, persisted. Create with ``await AccountService.load(store, ...)``."""

    def __init__(self, registry: Registry, store: Store, now_ms: Callable[[], int]) -> None:
        self.registry = registry
        self._store = store
        self._now_ms = now_ms
        self._lock = trio.Lock()
        self._wake = trio.Event()
        self.on_role_changes: RoleChangeHandler | None = None

    @classmethod
    async def load(
        cls, store: Store, *, now_ms: Callable[[], int], orphan_grace_ms: int
    ) -> AccountService:
        """Load the persisted accounts (served ones start ORPHANED: see Registry)."""
        registry = Registry(
            await store.list_accounts(), now_ms=now_ms(), orphan_grace_ms=orphan_grace_ms
        )
        service = cls(registry, store, now_ms)
        await service.persist()
        return service

    # -- reads (in memory) --------------------------------------------------------------

    def list(self) -> builtins.list[AccountRecord]:
        return self.registry.accounts()

    def get(self, name: str) -> AccountRecord | None:
        return self.registry.get(name)

    def holders(self, name: str) -> AccountHolders:
        agents = [self.registry.agent_of(s) or "" for s in self.registry.holders(name)]
        return AccountHolders(agents[0] if agents else None, agents[1:])

    # -- writes -------------------------------------------------------------------------

    async def add(self, records: Sequence[AccountRecord]) -> None:
        """Add accounts (INACTIVE by default); AccountExists names those already present."""
        self.registry.add(records, self._now_ms())
        await self.persist()

    async def put(self, record: AccountRecord) -> None:
        """Write an account as an operator sees it (see Registry.put)."""
        await self.changed(self.registry.put(record, self._now_ms()))

    async def set_state(
        self, name: str, state: AccountState, *, zone_id: str | None = None
    ) -> AccountRecord:
        """Set an account's state; raises UnknownAccount."""
        record = self.registry.set_state(name, state, self._now_ms(), zone_id=zone_id)
        await self.persist()
        return record

    async def delete(self, name: str) -> bool:
        """Delete an account and its objects; False when there was none."""
        if self.registry.get(name) is None:
            return False
        await self.changed(self.registry.delete(name))
        return True

    async def changed(self, role_changes: Sequence[RoleChange]) -> None:
        """Persist the registry's changes, then announce ``role_changes``."""
        await self.persist()
        if role_changes and self.on_role_changes is not None:
            await self.on_role_changes(role_changes)

    async def persist(self) -> None:
        """Write what the registry changed; removed accounts lose their objects too.

        Raises StoreError when the store fails; what was not written stays pending in the
        registry and is retried by the next persist (the expiry task retries on its own)."""
        async with self._lock:
            changes = self.registry.take_changes()
            try:
                for record in changes.upserts:
                    await self._store.upsert_account(record)
                for name in changes.deletes:
                    await self._store.delete_account(name)
                    log.info("account %s removed with its cached objects", name)
            except BaseException:
                # Rewriting an account already written is harmless (newest state wins).
                self.registry.requeue(changes)
                raise
            finally:
                self._wake.set()

    # -- the grace timer ----------------------------------------------------------------

    async def run_expiry(
        self,
        *,
        retry_seconds: float = _RETRY_SECONDS,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Remove ORPHANED accounts when their grace period ends, and write registry
        changes a failed persist left pending (every ``retry_seconds`` while the store
        fails: a store error is logged here, never raised). Never returns."""
        task_status.started()
        failing = False
        while True:
            due = self.registry.next_expiry_ms()
            delay = math.inf if due is None else max(0.0, (due - self._now_ms()) / 1000)
            if failing:
                delay = min(delay, retry_seconds)
            with trio.move_on_after(delay):
                await self._wake.wait()
            self._wake = trio.Event()
            gone = self.registry.expire(self._now_ms())
            if gone:
                log.info("orphaned accounts past their grace period: %s", ", ".join(gone))
            if not (gone or failing or self.registry.has_changes()):
                continue
            try:
                await self.persist()
                failing = False
            except ServerError as exc:
                log.error(
                    "could not persist the account registry (retrying in %g s): %s",
                    retry_seconds,
                    exc,
                )
                failing = True


class RegistryStore:
    """The Store as the REST API uses it: account writes go through the registry."""

    def __init__(self, store: Store, accounts: AccountService) -> None:
        self._store = store
        self._accounts = accounts

    async def upsert_account(self, record: AccountRecord) -> None:
        await self._accounts.put(record)

    async def delete_account(self, name: str) -> bool:
        return await self._accounts.delete(name)

    async def get_account(self, name: str) -> AccountRecord | None:
        return self._accounts.get(name)

    async def list_accounts(self) -> list[AccountRecord]:
        return self._accounts.list()

    async def run_upkeep(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        await self._store.run_upkeep(task_status=task_status)

    async def ping(self) -> None:
        await self._store.ping()

    async def apply_batch(self, account: str, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._store.apply_batch(account, records)

    async def apply_events(self, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._store.apply_events(records)

    async def apply_operation_objects(self, records: Sequence[EventRecord]) -> BatchOutcome:
        return await self._store.apply_operation_objects(records)

    async def get_object(
        self, account: str, api_version_or_group: str, kind: str, namespace: str, name: str
    ) -> StoredObject | None:
        return await self._store.get_object(account, api_version_or_group, kind, namespace, name)

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
        return await self._store.query_objects(
            account, kind, namespace, label_selector, limit, continue_token, group=group
        )

    async def count_objects(self, account: str | None = None, kind: str | None = None) -> int:
        return await self._store.count_objects(account, kind)

    async def resume_points(self, account: str) -> list[ResumePoint]:
        return await self._store.resume_points(account)

    async def upsert_agent(self, record: AgentRecord) -> None:
        await self._store.upsert_agent(record)

    async def delete_agent(self, session_id: str) -> None:
        await self._store.delete_agent(session_id)

    async def list_agents(self) -> list[AgentRecord]:
        return await self._store.list_agents()

    async def record_operation(self, record: OperationRecord, message: str = "") -> None:
        await self._store.record_operation(record, message)

    async def record_operations(self, items: Sequence[tuple[OperationRecord, str]]) -> None:
        await self._store.record_operations(items)

    async def record_operations_and_objects(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        objects: Sequence[Sequence[EventRecord]],
    ) -> list[StoreError | None]:
        return await self._store.record_operations_and_objects(items, objects)

    async def get_operation(self, operation_id: str) -> OperationRecord | None:
        return await self._store.get_operation(operation_id)

    async def list_operations(
        self, account: str | None = None, limit: int = 100
    ) -> list[OperationRecord]:
        return await self._store.list_operations(account, limit)

    async def operation_history(self, operation_id: str) -> list[OperationEvent]:
        return await self._store.operation_history(operation_id)
