"""The store's small tables on PostgreSQL: accounts, agents, operations and their history
(rows mapped as on SQLite, by ``_sqlite_records``'s shared functions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from . import _dispatch as dispatch
from . import _leases as leases
from ._notify import Notice
from ._pg_notify import notify as pg_notify
from ._records import (
    AccountRecord,
    AgentRecord,
    DispatchRecord,
    LeaseOutcome,
    LeaseRecord,
    OperationEvent,
    OperationRecord,
    ReplicaRecord,
)
from ._sqlite_records import (
    UPSERT_OPERATION,
    account_from_row,
    account_row,
    agent_from_row,
    agent_row,
    operation_row,
)

if TYPE_CHECKING:
    from ._pg_core import Conn, Cursor

T = TypeVar("T")


def _upsert(table: str, columns: Sequence[str], key: str) -> str:
    """INSERT OR REPLACE, PostgreSQL's way: every column but the key updated on conflict."""
    marks = ",".join(["%s"] * len(columns))
    updates = ", ".join(f"{c}=excluded.{c}" for c in columns if c != key)
    return f"INSERT INTO {table} VALUES ({marks}) ON CONFLICT ({key}) DO UPDATE SET {updates}"


_UPSERT_ACCOUNT = _upsert(
    "accounts",
    (
        "name",
        "kube_host",
        "cert_fingerprint",
        "kube_version",
        "status",
        "error_message",
        "retry_count",
        "dynamic",
        "permissions",
        "properties",
        "zone_id",
        "last_updated_ms",
        "connections",
        "orphaned_at_ms",
    ),
    "name",
)
_UPSERT_AGENT = _upsert(
    "agents",
    (
        "session_id",
        "agent_id",
        "instance_id",
        "agent_version",
        "server_id",
        "peer",
        "accounts",
        "connected_at_ms",
        "last_seen_ms",
    ),
    "session_id",
)
_UPSERT_OPERATION = UPSERT_OPERATION.replace("?", "%s")


# Insert-if-absent: a task's first row, so that two replicas given one clientRequestId at
# once create it once (the loser's INSERT waits for the winner's commit, then does nothing).
_INSERT_NEW_OPERATION = (
    "INSERT INTO operations VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
    " ON CONFLICT (id) DO NOTHING RETURNING id"
)
_HISTORY = "INSERT INTO operation_history(operation_id, at_ms, state, message) VALUES (%s,%s,%s,%s)"


def exec_of(cur: Cursor) -> leases.Exec:
    """``cur`` as the shared SQL's Exec (``?`` marks made psycopg's)."""

    def x(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        cur.execute(sql.replace("?", "%s"), params)
        return cur.fetchall() if cur.description else []

    return x


class PgRecordTables:
    """Accounts, agents, operations, replicas and leases; mixed into PgCore, which provides
    the transaction helpers. Every method takes the connection to run on."""

    _now_ms: Callable[[], int]

    def _tx(self, conn: Conn, fn: Callable[[Cursor], T]) -> T:
        raise NotImplementedError

    def _read(self, conn: Conn, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    # -- accounts -----------------------------------------------------------------------

    def upsert_account(self, conn: Conn, a: AccountRecord) -> None:
        row = account_row(a, self._now_ms())
        self._tx(conn, lambda cur: cur.execute(_UPSERT_ACCOUNT, row))

    def get_account(self, conn: Conn, name: str) -> AccountRecord | None:
        rows = self._read(conn, "SELECT * FROM accounts WHERE name=%s", (name,))
        return account_from_row(rows[0]) if rows else None

    def list_accounts(self, conn: Conn) -> list[AccountRecord]:
        return [
            account_from_row(r) for r in self._read(conn, "SELECT * FROM accounts ORDER BY name")
        ]

    def delete_account(self, conn: Conn, name: str) -> bool:
        def delete(cur: Cursor) -> bool:
            for table in ("objects", "resource_versions", "sync_state", "unavailable_kinds"):
                cur.execute(f"DELETE FROM {table} WHERE account=%s", (name,))
            cur.execute("DELETE FROM accounts WHERE name=%s", (name,))
            return cur.rowcount > 0

        return self._tx(conn, delete)

    # -- agents -------------------------------------------------------------------------

    def upsert_agent(self, conn: Conn, a: AgentRecord) -> None:
        row = agent_row(a)
        self._tx(conn, lambda cur: cur.execute(_UPSERT_AGENT, row))

    def delete_agent(self, conn: Conn, session_id: str) -> None:
        self._tx(
            conn, lambda cur: cur.execute("DELETE FROM agents WHERE session_id=%s", (session_id,))
        )

    def list_agents(self, conn: Conn) -> list[AgentRecord]:
        rows = self._read(conn, "SELECT * FROM agents ORDER BY agent_id, session_id")
        return [agent_from_row(r) for r in rows]

    # -- operations ---------------------------------------------------------------------

    def record_operations(
        self,
        conn: Conn,
        items: Sequence[tuple[OperationRecord, str]],
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> None:
        """Several record_operation calls in ONE transaction (a group commit, issue 6), the
        ``dispatches`` inserted and ``notices`` sent in it (delivered when it commits)."""

        def write(cur: Cursor) -> None:
            self._write_operations(cur, items)
            if dispatches:
                cur.executemany(
                    dispatch.INSERT_DISPATCH.replace("?", "%s"),
                    [dispatch.dispatch_row(d) for d in dispatches],
                )
            _notify(cur, notices)

        if items or notices or dispatches:
            self._tx(conn, write)

    def _write_operations(self, cur: Cursor, items: Sequence[tuple[OperationRecord, str]]) -> None:
        if not items:
            return
        now = self._now_ms()
        cur.executemany(_UPSERT_OPERATION, [operation_row(op, now) for op, _ in items])
        cur.executemany(
            _HISTORY, [(op.id, op.updated_ms or now, op.state, message) for op, message in items]
        )

    def record_operation(self, conn: Conn, op: OperationRecord, message: str) -> None:
        self.record_operations(conn, [(op, message)])

    def create_operations(
        self, conn: Conn, groups: Sequence[Sequence[tuple[OperationRecord, str]]]
    ) -> list[bool]:
        """Each group written only when its first record's id is new (see _protocol)."""

        def write(cur: Cursor) -> list[bool]:
            now = self._now_ms()
            created = [False] * len(groups)
            # In id order: two replicas creating overlapping groups lock them in one order.
            for index in sorted(range(len(groups)), key=lambda i: groups[i][0][0].id):
                group = groups[index]
                cur.execute(_INSERT_NEW_OPERATION, operation_row(group[0][0], now))
                if cur.fetchone() is None:
                    continue
                created[index] = True
                if len(group) > 1:
                    cur.executemany(
                        _UPSERT_OPERATION, [operation_row(op, now) for op, _ in group[1:]]
                    )
                cur.executemany(
                    _HISTORY, [(op.id, op.updated_ms or now, op.state, m) for op, m in group]
                )
            return created

        return self._tx(conn, write) if groups else []

    # -- operations across replicas (the SQL is _dispatch's, shared with SQLite) --------

    def claim_dispatched(self, conn: Conn, replica_id: str, limit: int) -> list[DispatchRecord]:
        return self._in(conn, lambda x: dispatch.claim_dispatched(x, replica_id, limit))

    def withdraw_dispatched(self, conn: Conn, op_id: str) -> bool:
        return self._in(conn, lambda x: dispatch.withdraw_dispatched(x, op_id))

    def expire_dispatched(self, conn: Conn, before_ms: int) -> list[str]:
        return self._in(conn, lambda x: dispatch.expire_dispatched(x, before_ms))

    def notify(self, conn: Conn, notices: Sequence[Notice]) -> None:
        # Outside a transaction: the writers' NOTIFY (``_pg_notify``), committed without
        # waiting for a WAL flush, as a wake-up needs no durability.
        for channel, payload in notices:
            pg_notify(conn, channel, payload)

    def get_operation(self, conn: Conn, operation_id: str) -> OperationRecord | None:
        rows = self._read(conn, "SELECT * FROM operations WHERE id=%s", (operation_id,))
        return OperationRecord(*rows[0]) if rows else None

    def get_operations(self, conn: Conn, ids: Sequence[str]) -> list[OperationRecord]:
        rows = self._read(conn, "SELECT * FROM operations WHERE id = ANY(%s)", (list(ids),))
        return [OperationRecord(*r) for r in rows]

    def list_operations(self, conn: Conn, account: str | None, limit: int) -> list[OperationRecord]:
        if account is None:
            rows = self._read(
                conn, "SELECT * FROM operations ORDER BY created_ms DESC LIMIT %s", (limit,)
            )
        else:
            rows = self._read(
                conn,
                "SELECT * FROM operations WHERE account=%s ORDER BY created_ms DESC LIMIT %s",
                (account, limit),
            )
        return [OperationRecord(*r) for r in rows]

    def operation_history(self, conn: Conn, operation_id: str) -> list[OperationEvent]:
        rows = self._read(
            conn,
            "SELECT operation_id, at_ms, state, message FROM operation_history"
            " WHERE operation_id=%s ORDER BY id",
            (operation_id,),
        )
        return [OperationEvent(*r) for r in rows]

    # -- replicas, leases and duties (the logic is _leases', shared with SQLite) ---------

    def _in(self, conn: Conn, fn: Callable[[leases.Exec], T]) -> T:
        """``fn`` in one transaction, its statements' ``?`` marks made psycopg's."""

        return self._tx(conn, lambda cur: fn(exec_of(cur)))

    def _reader(self, conn: Conn) -> leases.Exec:
        return lambda sql, params: self._read(conn, sql.replace("?", "%s"), params)

    def heartbeat_replica(self, conn: Conn, record: ReplicaRecord, lease_ttl_ms: int) -> None:
        now = self._now_ms()
        self._in(conn, lambda x: leases.heartbeat_replica(x, record, lease_ttl_ms, now))

    def list_replicas(self, conn: Conn) -> list[ReplicaRecord]:
        return leases.list_replicas(self._reader(conn))

    def delete_replica(self, conn: Conn, replica_id: str) -> None:
        self._in(conn, lambda x: leases.delete_replica(x, replica_id))

    def acquire_lease(
        self,
        conn: Conn,
        account: str,
        replica_id: str,
        session_id: str,
        agent_id: str,
        kube_host: str,
        cert_fingerprint: str,
        ttl_ms: int,
    ) -> LeaseOutcome:
        return self._in(
            conn,
            lambda x: leases.acquire_lease(
                x,
                account,
                replica_id,
                session_id,
                agent_id,
                kube_host,
                cert_fingerprint,
                ttl_ms,
                self._now_ms(),
            ),
        )

    def release_lease(self, conn: Conn, account: str, session_id: str) -> bool:
        return self._in(conn, lambda x: leases.release_lease(x, account, session_id))

    def get_lease(self, conn: Conn, account: str) -> LeaseRecord | None:
        return leases.get_lease(self._reader(conn), account)

    def list_leases(self, conn: Conn) -> list[LeaseRecord]:
        return leases.list_leases(self._reader(conn))

    def expire_leases(self, conn: Conn, grace_ms: int) -> list[LeaseRecord]:
        return self._in(conn, lambda x: leases.expire_leases(x, self._now_ms(), grace_ms))

    def claim_duty(self, conn: Conn, name: str, replica_id: str, ttl_ms: int) -> bool:
        return self._in(
            conn, lambda x: leases.claim_duty(x, name, replica_id, ttl_ms, self._now_ms())
        )


def _notify(cur: Cursor, notices: Sequence[Notice]) -> None:
    """Send ``notices`` inside the caller's transaction: PostgreSQL delivers them at commit
    (and not at all after a rollback), so a woken replica finds what they announce."""
    if notices:
        cur.executemany("SELECT pg_notify(%s, %s)", list(notices))
