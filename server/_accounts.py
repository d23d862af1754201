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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

import trio

from wire import EventRecord

from ._errors import ServerError, StoreError
from ._registry import Registry, RoleChange
from ._shards import SEPARATOR, account_of, fold, folded, spec_of
from .store import (
    AccountRecord,
    AccountScope,
    AccountState,
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
    Notice,
    Notification,
    ObjectPage,
    OperationEvent,
    OperationRecord,
    ReplicaRecord,
    ResumePoint,
    SearchRequest,
    Store,
    StoredObject,
    UnavailableKind,
    ViewQuery,
    ViewRow,
)
from .views import SearchHits

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

    def __init__(
        self,
        registry: Registry,
        store: Store,
        now_ms: Callable[[], int],
        *,
        lease_ttl_ms: int = 0,
    ) -> None:
        self.registry = registry
        self._store = store
        self._now_ms = now_ms
        self._lock = trio.Lock()
        # One settle at a time: a settle takes the registry's new heads, so one running
        # between a session's register and its own settle would take that session's head
        # (its Welcome would say STANDBY, the PRIMARY coming after in an Assignment).
        self._settling = trio.Lock()
        self._wake = trio.Event()
        self.on_role_changes: RoleChangeHandler | None = None
        # Several replicas (a registry with leases): how long a granted lease lasts, whether
        # this replica holds the housekeeping duty (orphan expiry runs only there; the
        # replica service sets it), and how often a replica without it looks again.
        self.lease_ttl_ms = lease_ttl_ms
        # Whether other processes write the store's accounts (PostgreSQL; the composition
        # root sets it): then each heartbeat takes their rows in (``sync``).
        self.shared_store = False
        self.housekeeper: Callable[[], bool] = lambda: True
        self.recheck_seconds = _RETRY_SECONDS
        self._lease_holder: dict[str, str] = {}  # account -> replica that holds it, last seen

    @property
    def uses_leases(self) -> bool:
        return self.lease_ttl_ms > 0

    @classmethod
    async def load(
        cls,
        store: Store,
        *,
        now_ms: Callable[[], int],
        orphan_grace_ms: int,
        replica_id: str = "",
        lease_ttl_ms: int = 0,
    ) -> AccountService:
        """Load the persisted accounts (served ones start ORPHANED: see Registry). With
        ``lease_ttl_ms`` roles are leases in the store, held by ``replica_id``; an account
        another replica's live lease serves is not made ORPHANED."""
        served: set[str] = set()
        if lease_ttl_ms > 0:
            now = now_ms()
            served = {
                lease.account
                for lease in await store.list_leases()
                if lease.expires_ms > now and lease.replica_id != replica_id
            }
        registry = Registry(
            await store.list_accounts(),
            now_ms=now_ms(),
            orphan_grace_ms=orphan_grace_ms,
            use_leases=lease_ttl_ms > 0,
            replica_id=replica_id,
            served_elsewhere=served,
        )
        service = cls(registry, store, now_ms, lease_ttl_ms=lease_ttl_ms)
        await service.persist()
        return service

    # -- reads (in memory) --------------------------------------------------------------

    def list(self) -> builtins.list[AccountRecord]:
        """Every account, a sharded one once with its shards listed (``_shards.fold``)."""
        return fold(self.registry.accounts())

    def get(self, name: str) -> AccountRecord | None:
        """The account ``name`` (a sharded one folded), or None."""
        record = self.registry.get(name)
        if record is not None or SEPARATOR in name:
            return record
        units = self.registry.units(name)
        return folded(name, units) if units else None

    def names(self, name: str) -> builtins.list[str]:
        """The registry's names of the account ``name``: itself, or each of its shards."""
        if self.registry.get(name) is not None:
            return [name]
        return [r.name for r in self.registry.units(name)]

    def holders(self, name: str) -> AccountHolders:
        sessions = [s for n in self.names(name) for s in self.registry.holders(n)]
        agents = [self.registry.agent_of(s) or "" for s in sessions]
        return AccountHolders(agents[0] if agents else None, agents[1:])

    # -- writes -------------------------------------------------------------------------

    async def add(self, records: Sequence[AccountRecord]) -> None:
        """Add accounts (INACTIVE by default); AccountExists names those already present."""
        self.registry.add(records, self._now_ms())
        await self.persist()

    async def put(self, record: AccountRecord) -> None:
        """Write an account as an operator sees it (see Registry.put); a sharded account's
        state goes to each of its shards, which keep what they own."""
        units = self.registry.units(record.name) if self.registry.get(record.name) is None else []
        if not units:
            await self.changed(self.registry.put(record, self._now_ms()))
            return
        changes: builtins.list[RoleChange] = []
        for unit in units:
            put = replace(unit, status=record.status, zone_id=record.zone_id)
            changes += self.registry.put(put, self._now_ms())
        await self.changed(changes)

    async def set_state(
        self, name: str, state: AccountState, *, zone_id: str | None = None
    ) -> AccountRecord:
        """Set an account's state (each shard's); raises UnknownAccount."""
        names = self.names(name) or [name]
        for unit in names:
            self.registry.set_state(unit, state, self._now_ms(), zone_id=zone_id)
        await self.persist()
        record = self.get(name)
        assert record is not None
        return record

    async def delete(self, name: str) -> bool:
        """Delete an account (every shard of it) and its objects; False when there was none."""
        names = self.names(name)
        if not names:
            return False
        changes: builtins.list[RoleChange] = []
        for unit in names:
            changes += self.registry.delete(unit)
        await self.changed(changes)
        if names != [name]:  # its shards are gone; what no shard owned goes too
            await self._store.delete_account(name)
        return True

    async def changed(self, role_changes: Sequence[RoleChange]) -> None:
        """Settle the leases (see ``settle``), persist the registry's changes, then announce
        ``role_changes`` and what settling changed."""
        role_changes = [*role_changes, *await self.settle()]
        await self.persist()
        if role_changes and self.on_role_changes is not None:
            await self.on_role_changes(role_changes)

    def wake(self) -> None:
        """Have the expiry task look at the orphaned accounts again now."""
        self._wake.set()

    # -- leases (several replicas) ------------------------------------------------------

    async def refresh(self, names: Iterable[str]) -> None:
        """Read ``names``' rows from the store into the registry (another replica may have
        created, bound or removed them)."""
        if self.uses_leases:
            for name in names:
                self.registry.refresh(name, await self._store.get_account(name))

    async def sync(self) -> None:
        """With leases: take in every account row of the store, so that this replica knows
        (for /credentials, the operations' account checks, orphan expiry) the accounts that
        agents registered on other replicas or that REST created or removed there. Runs at
        each heartbeat; one read of the accounts table."""
        if not (self.uses_leases and self.shared_store):
            return
        changes: builtins.list[RoleChange] = []
        # Under the lock that persist() holds while it writes: a local write is either
        # committed before this read or still pending (the registry skips those names).
        async with self._lock:
            stored = {record.name: record for record in await self._store.list_accounts()}
            for name in sorted({*stored, *self.registry.names_known()}):
                changes += self.registry.take_in(name, stored.get(name))
        if changes or self.registry.has_changes():
            await self.changed(changes)

    async def settle(self) -> builtins.list[RoleChange]:
        """Release the leases no local session needs, and ask for the lease of each account
        whose local head changed; returns the role changes (not yet announced)."""
        async with self._settling:
            return await self._settle()

    @asynccontextmanager
    async def settling(self) -> AsyncIterator[Callable[[], Awaitable[builtins.list[RoleChange]]]]:
        """Hold every other settle off while the caller changes the registry's heads and then
        settles them itself with the function given (``settle`` would wait for this block)."""
        async with self._settling:
            yield self._settle

    async def _settle(self) -> builtins.list[RoleChange]:
        if not self.uses_leases:
            return []
        for name, session_id in self.registry.take_lease_releases():
            try:
                await self._store.release_lease(name, session_id)
            except StoreError as exc:
                # It lapses at its TTL (the heartbeat renews only what the registry holds).
                log.error(
                    "could not release the lease of account %s: %s",
                    name,
                    exc,
                    extra={"account": name},
                )
        changes: builtins.list[RoleChange] = []
        for name, session_id, reason in self.registry.take_new_heads():
            changes += await self.try_lease(name, session_id, reason)
        return changes

    async def try_lease(
        self, name: str, session_id: str, reason: str = ""
    ) -> builtins.list[RoleChange]:
        """Ask the store for ``name``'s lease for the local head ``session_id``: granted, it
        is PRIMARY (told ``reason``); refused (another cluster), every local session of it is
        REJECTED; held by another replica, nothing changes (``standby_reason`` says who)."""
        outcome = await self._acquire(name, session_id)
        if outcome is None:
            return []
        if outcome.refusal:
            return self.registry.refuse(name, outcome.refusal, await self._store.get_account(name))
        if outcome.granted:
            self._lease_holder.pop(name, None)
            return self.registry.grant(name, session_id, reason)
        if outcome.holder is not None:
            self._lease_holder[name] = outcome.holder.replica_id
        return []

    async def _acquire(self, name: str, session_id: str) -> LeaseOutcome | None:
        """The store's answer to ``session_id`` asking for ``name``'s lease (None: the
        account is gone here)."""
        record = self.registry.get(name)
        if record is None:
            return None
        return await self._store.acquire_lease(
            name,
            self.registry.replica_id,
            session_id,
            self.registry.agent_of(session_id) or "",
            record.kube_host,
            record.cert_fingerprint,
            self.lease_ttl_ms,
        )

    def standby_reason(self, name: str) -> str:
        """Why a local head of ``name`` is a STANDBY (another replica holds the lease)."""
        holder = self._lease_holder.get(name)
        if holder is None:
            return ""
        return f"account {name!r} is served by the primary on replica {holder}"

    async def reconcile(self, leases: Sequence[LeaseRecord]) -> None:
        """At a heartbeat, with every lease row: a lease this replica lost is a demotion; a
        row it holds that no local session needs is released; a local head without the lease
        asks for it when the row is missing, lapsed or this replica's (a promotion: the
        primary on the other replica lapsed). Persists and announces what changed."""
        now, me = self._now_ms(), self.registry.replica_id
        rows = {lease.account: lease for lease in leases}
        changes: builtins.list[RoleChange] = []
        # As a settle: a head granted here must not be one a register is settling itself.
        async with self._settling:
            held = self.registry.held_leases()
            for name, mine in rows.items():
                if mine.replica_id == me and held.get(name) != mine.session_id:
                    await self._store.release_lease(name, mine.session_id)
            for name in held:
                row = rows.get(name)
                if row is not None and row.replica_id != me and row.expires_ms > now:
                    self._lease_holder[name] = row.replica_id
                    reason = f"demoted: replica {row.replica_id} holds the lease now"
                    changes += self.registry.lost(name, reason)
                elif row is None or (row.replica_id != me and row.expires_ms <= now):
                    # Cleaned by housekeeping, or another replica's lapsed (our heartbeats
                    # stalled, it took the lease, then it died too): take it again, or step down.
                    outcome = await self._acquire(name, held[name])
                    if outcome is not None and not outcome.granted:
                        changes += self.registry.lost(name, "demoted: the lease lapsed")
            for name, head in self.registry.lease_wanted():
                row = rows.get(name)
                if row is not None and row.replica_id != me and row.expires_ms > now:
                    self._lease_holder[name] = row.replica_id
                    continue
                if row is None or row.replica_id == me:
                    reason = "promoted: no replica held the lease"
                else:
                    reason = f"promoted: the primary on replica {row.replica_id} lapsed"
                changes += await self.try_lease(name, head, reason)
        if changes or self.registry.has_changes():
            await self.changed(changes)

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
                    if SEPARATOR in name:
                        await self._drop_shard(name)
                        continue
                    await self._store.delete_account(name)
                    log.info(
                        "account %s removed with its cached objects", name, extra={"account": name}
                    )
            except BaseException:
                # Rewriting an account already written is harmless (newest state wins).
                self.registry.requeue(changes)
                raise
            finally:
                self._wake.set()

    async def _drop_shard(self, name: str) -> None:
        """A shard is removed: the objects, resume points and marks it owns go with its row
        (the store's row says what it owned); the other shards' stay."""
        stored = await self._store.get_account(name)
        spec = spec_of(stored) if stored is not None else None
        if spec is not None:
            account = account_of(name)
            outcome = await self._store.apply_account_scope(AccountScope(account, (), shard=spec))
            log.info(
                "shard %s of account %s removed with its %d cached objects",
                spec.name,
                account,
                len(outcome.swept),
                extra={"account": account},
            )
        await self._store.delete_account(name)

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
        held_back = False
        while True:
            due = self.registry.next_expiry_ms()
            delay = math.inf if due is None else max(0.0, (due - self._now_ms()) / 1000)
            if held_back:  # due, but not ours to remove yet: look again later
                delay = max(delay, self.recheck_seconds)
            if failing:
                delay = min(delay, retry_seconds)
            with trio.move_on_after(delay):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                keep = await self._kept_from_expiry()
            except ServerError as exc:
                log.error("could not check the orphaned accounts in the store: %s", exc)
                keep, failing = set(self.registry.due(self._now_ms())), True
            held_back = bool(keep)
            gone = self.registry.expire(self._now_ms(), keep)
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

    async def _kept_from_expiry(self) -> set[str]:
        """With leases (several replicas), the accounts past their grace period that stay:
        each whose row another replica changed (served again, or removed: the registry takes
        the row in), each with a live lease, and every one on a replica without the
        housekeeping duty (one replica removes them, once)."""
        now = self._now_ms()
        due = self.registry.due(now) if self.uses_leases else []
        keep: set[str] = set()
        for name in due:
            stored = await self._store.get_account(name)
            lease = await self._store.get_lease(name)
            local = self.registry.get(name)
            if (
                stored is None
                or stored.status is not AccountState.ORPHANED
                or (local is not None and stored.orphaned_at_ms != local.orphaned_at_ms)
                or (lease is not None and lease.expires_ms > now)
            ):
                self.registry.refresh(name, stored)
                keep.add(name)
        if due and not self.housekeeper():
            keep.update(due)
        return keep


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

    async def apply_kind_changes(self, changes: Sequence[KindChange]) -> AvailabilityOutcome:
        return await self._store.apply_kind_changes(changes)

    async def apply_account_scope(self, scope: AccountScope) -> AvailabilityOutcome:
        return await self._store.apply_account_scope(scope)

    async def unavailable_kinds(self, account: str | None = None) -> builtins.list[UnavailableKind]:
        return await self._store.unavailable_kinds(account)

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

    async def kind_overview(self) -> list[KindOverview]:
        return await self._store.kind_overview()

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

    async def record_operations(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        *,
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> None:
        await self._store.record_operations(items, notices=notices, dispatches=dispatches)

    async def record_operations_and_objects(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        objects: Sequence[Sequence[EventRecord]],
        *,
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> list[StoreError | None]:
        return await self._store.record_operations_and_objects(
            items, objects, notices=notices, dispatches=dispatches
        )

    async def get_operation(self, operation_id: str) -> OperationRecord | None:
        return await self._store.get_operation(operation_id)

    async def get_operations(self, ids: Sequence[str]) -> builtins.list[OperationRecord]:
        return await self._store.get_operations(ids)

    async def list_operations(
        self, account: str | None = None, limit: int = 100
    ) -> list[OperationRecord]:
        return await self._store.list_operations(account, limit)

    async def operation_history(self, operation_id: str) -> list[OperationEvent]:
        return await self._store.operation_history(operation_id)

    async def heartbeat_replica(self, record: ReplicaRecord, lease_ttl_ms: int) -> None:
        await self._store.heartbeat_replica(record, lease_ttl_ms)

    async def list_replicas(self) -> builtins.list[ReplicaRecord]:
        return await self._store.list_replicas()

    async def delete_replica(self, replica_id: str) -> None:
        await self._store.delete_replica(replica_id)

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
        return await self._store.acquire_lease(
            account, replica_id, session_id, agent_id, kube_host, cert_fingerprint, ttl_ms
        )

    async def release_lease(self, account: str, session_id: str) -> bool:
        return await self._store.release_lease(account, session_id)

    async def get_lease(self, account: str) -> LeaseRecord | None:
        return await self._store.get_lease(account)

    async def list_leases(self) -> builtins.list[LeaseRecord]:
        return await self._store.list_leases()

    async def expire_leases(self, grace_ms: int = 0) -> builtins.list[LeaseRecord]:
        return await self._store.expire_leases(grace_ms)

    async def claim_duty(self, name: str, replica_id: str, ttl_ms: int) -> bool:
        return await self._store.claim_duty(name, replica_id, ttl_ms)

    async def get_objects(
        self, keys: Sequence[tuple[str, str, str, str, str]]
    ) -> builtins.list[StoredObject]:
        return await self._store.get_objects(keys)

    @property
    def writer(self) -> str:
        return self._store.writer

    async def read_changes(self, cursor: ChangeCursor | None, limit: int = 8) -> ChangePage:
        return await self._store.read_changes(cursor, limit)

    async def trim_changes(self, keep_ms: int, max_rows: int) -> int:
        return await self._store.trim_changes(keep_ms, max_rows)

    async def fill_views(self) -> int:
        return await self._store.fill_views()

    async def read_views(self, queries: Sequence[ViewQuery]) -> builtins.list[list[ViewRow]]:
        return await self._store.read_views(queries)

    async def search_views(self, request: SearchRequest) -> SearchHits:
        return await self._store.search_views(request)

    async def notify(self, channel: str, payload: str) -> None:
        await self._store.notify(channel, payload)

    async def listen(
        self,
        channels: Sequence[str],
        send: trio.MemorySendChannel[Notification],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await self._store.listen(channels, send, task_status=task_status)

    async def create_operations(
        self, groups: Sequence[Sequence[tuple[OperationRecord, str]]]
    ) -> builtins.list[bool]:
        return await self._store.create_operations(groups)

    async def claim_dispatched(self, replica_id: str, limit: int) -> builtins.list[DispatchRecord]:
        return await self._store.claim_dispatched(replica_id, limit)

    async def withdraw_dispatched(self, op_id: str) -> bool:
        return await self._store.withdraw_dispatched(op_id)

    async def expire_dispatched(self, before_ms: int) -> builtins.list[str]:
        return await self._store.expire_dispatched(before_ms)
