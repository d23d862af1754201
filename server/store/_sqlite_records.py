"""The store's small tables on SQLite: accounts, agents, operations and their history; and
their rows, which both backends share (JSON fields as text, ``dynamic`` as 0/1)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import apsw
import msgspec

from . import _dispatch as dispatch
from . import _leases as leases
from ._notify import Notice
from ._records import (
    AccountRecord,
    AccountState,
    AgentRecord,
    DispatchRecord,
    LeaseOutcome,
    LeaseRecord,
    OperationEvent,
    OperationRecord,
    ReplicaRecord,
)

encode = msgspec.json.encode
_encode = encode


def account_row(a: AccountRecord, now_ms: int) -> tuple[Any, ...]:
    """An account as the ``accounts`` table's columns, in order."""
    return (
        a.name,
        a.kube_host,
        a.cert_fingerprint,
        a.kube_version,
        str(a.status),
        a.error_message,
        a.retry_count,
        int(a.dynamic),
        _encode(a.permissions).decode(),
        _encode(a.properties).decode(),
        a.zone_id,
        a.last_updated_ms or now_ms,
        _encode(a.connections).decode(),
        a.orphaned_at_ms,
    )


def account_from_row(row: Sequence[Any]) -> AccountRecord:
    return AccountRecord(
        name=row[0],
        kube_host=row[1],
        cert_fingerprint=row[2],
        kube_version=row[3],
        status=AccountState(row[4]),
        error_message=row[5],
        retry_count=row[6],
        dynamic=bool(row[7]),
        permissions=msgspec.json.decode(row[8]),
        properties=msgspec.json.decode(row[9]),
        zone_id=row[10],
        last_updated_ms=row[11],
        connections=msgspec.json.decode(row[12]),
        orphaned_at_ms=row[13],
    )


def agent_row(a: AgentRecord) -> tuple[Any, ...]:
    """An agent session as the ``agents`` table's columns, in order."""
    return (
        a.session_id,
        a.agent_id,
        a.instance_id,
        a.agent_version,
        a.server_id,
        a.peer,
        _encode(a.accounts).decode(),
        a.connected_at_ms,
        a.last_seen_ms,
    )


def agent_from_row(r: Sequence[Any]) -> AgentRecord:
    return AgentRecord(
        session_id=r[0],
        agent_id=r[1],
        instance_id=r[2],
        agent_version=r[3],
        server_id=r[4],
        peer=r[5],
        accounts=msgspec.json.decode(r[6]),
        connected_at_ms=r[7],
        last_seen_ms=r[8],
    )


_OPERATION_COLUMNS = (
    "id",
    "account",
    "type",
    "payload_json",
    "state",
    "created_ms",
    "updated_ms",
    "result_json",
    "error_message",
    "error_code",
)
# An operation's (or a task's) end is written once: when two replicas end one (the target
# wrote the agent's result, the origin gave up at its deadline a moment before), the first
# end stays in the row, which the task already reported; the other reaches only the history.
UPSERT_OPERATION = (
    f"INSERT INTO operations VALUES ({','.join('?' * len(_OPERATION_COLUMNS))})"
    " ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c}=excluded.{c}" for c in _OPERATION_COLUMNS[1:])
    + " WHERE operations.state NOT IN ('SUCCEEDED', 'FAILED')"
)


def operation_row(op: OperationRecord, now_ms: int) -> tuple[Any, ...]:
    """An operation as the ``operations`` table's columns, in order."""
    return (
        op.id,
        op.account,
        op.type,
        op.payload_json,
        op.state,
        op.created_ms or now_ms,
        op.updated_ms or now_ms,
        op.result_json,
        op.error_message,
        op.error_code,
    )


class RecordTables:
    """Accounts, agents, operations, replicas and leases; mixed into SqliteCore, which
    provides the connection and the transaction helpers."""

    _conn: apsw.Connection
    _now_ms: Callable[[], int]
    _open_syncs: dict[tuple[str, str, str, str], int]

    def _write(self, fn: Callable[[], Any]) -> Any:
        raise NotImplementedError

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def _forget_views(self) -> None:
        """The view index lost rows this process did not list (an account's deletion)."""
        raise NotImplementedError

    # -- accounts -----------------------------------------------------------------------

    def upsert_account(self, a: AccountRecord) -> None:
        self._write(
            lambda: self._conn.execute(
                "INSERT OR REPLACE INTO accounts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                account_row(a, self._now_ms()),
            )
        )

    def get_account(self, name: str) -> AccountRecord | None:
        rows = self._read("SELECT * FROM accounts WHERE name=?", (name,))
        return account_from_row(rows[0]) if rows else None

    def list_accounts(self) -> list[AccountRecord]:
        return [account_from_row(r) for r in self._read("SELECT * FROM accounts ORDER BY name")]

    def delete_account(self, name: str) -> bool:
        def delete() -> bool:
            for table in ("objects", "resource_versions", "sync_state", "unavailable_kinds"):
                self._conn.execute(f"DELETE FROM {table} WHERE account=?", (name,))
            self._conn.execute("DELETE FROM accounts WHERE name=?", (name,))
            gone = self._conn.changes()
            return bool(gone)

        existed: bool = self._write(delete)
        self._open_syncs = {k: v for k, v in self._open_syncs.items() if k[0] != name}
        self._forget_views()
        return existed

    # -- agents -------------------------------------------------------------------------

    def upsert_agent(self, a: AgentRecord) -> None:
        self._write(
            lambda: self._conn.execute(
                "INSERT OR REPLACE INTO agents VALUES (?,?,?,?,?,?,?,?,?)", agent_row(a)
            )
        )

    def delete_agent(self, session_id: str) -> None:
        self._write(
            lambda: self._conn.execute("DELETE FROM agents WHERE session_id=?", (session_id,))
        )

    def list_agents(self) -> list[AgentRecord]:
        rows = self._read("SELECT * FROM agents ORDER BY agent_id, session_id")
        return [agent_from_row(r) for r in rows]

    # -- operations ---------------------------------------------------------------------

    def record_operations(
        self,
        items: Sequence[tuple[OperationRecord, str]],
        notices: Sequence[Notice] = (),
        dispatches: Sequence[DispatchRecord] = (),
    ) -> None:
        """Several record_operation calls in ONE transaction (a group commit, issue 6), and
        the ``dispatches`` inserted in it. ``notices`` are the store's to deliver after the
        commit (one process: ``LocalHub``)."""

        def write() -> None:
            for op, message in items:
                self._record_operation(op, message)
            if dispatches:
                self._conn.executemany(
                    dispatch.INSERT_DISPATCH, [dispatch.dispatch_row(d) for d in dispatches]
                )

        self._write(write)

    def create_operations(
        self, groups: Sequence[Sequence[tuple[OperationRecord, str]]]
    ) -> list[bool]:
        """Each group written only when its first record's id is new (see _protocol)."""

        def write() -> list[bool]:
            created = []
            for group in groups:
                first = group[0][0]
                inserted = self._conn.execute(
                    "INSERT INTO operations VALUES (?,?,?,?,?,?,?,?,?,?)"
                    " ON CONFLICT(id) DO NOTHING RETURNING id",
                    operation_row(first, self._now_ms()),
                ).fetchall()
                created.append(bool(inserted))
                if inserted:
                    for op, message in group[1:]:
                        self._record_operation(op, message)
                    self._history(first, group[0][1])
            return created

        done: list[bool] = self._write(write)
        return done

    def record_operation(self, op: OperationRecord, message: str) -> None:
        self._write(lambda: self._record_operation(op, message))

    def _record_operation(self, op: OperationRecord, message: str) -> None:
        self._conn.execute(UPSERT_OPERATION, operation_row(op, self._now_ms()))
        self._history(op, message)

    def _history(self, op: OperationRecord, message: str) -> None:
        self._conn.execute(
            "INSERT INTO operation_history(operation_id, at_ms, state, message) VALUES (?,?,?,?)",
            (op.id, op.updated_ms or self._now_ms(), op.state, message),
        )

    def get_operation(self, operation_id: str) -> OperationRecord | None:
        rows = self._read("SELECT * FROM operations WHERE id=?", (operation_id,))
        return OperationRecord(*rows[0]) if rows else None

    def get_operations(self, ids: Sequence[str]) -> list[OperationRecord]:
        rows = self._read(
            "SELECT * FROM operations WHERE id IN (SELECT value FROM json_each(?))",
            (encode(list(ids)).decode(),),
        )
        return [OperationRecord(*r) for r in rows]

    def list_operations(self, account: str | None, limit: int) -> list[OperationRecord]:
        if account is None:
            rows = self._read("SELECT * FROM operations ORDER BY created_ms DESC LIMIT ?", (limit,))
        else:
            rows = self._read(
                "SELECT * FROM operations WHERE account=? ORDER BY created_ms DESC LIMIT ?",
                (account, limit),
            )
        return [OperationRecord(*r) for r in rows]

    def operation_history(self, operation_id: str) -> list[OperationEvent]:
        rows = self._read(
            "SELECT operation_id, at_ms, state, message FROM operation_history"
            " WHERE operation_id=? ORDER BY id",
            (operation_id,),
        )
        return [OperationEvent(*r) for r in rows]

    # -- replicas, leases and duties (the logic is _leases', shared with PostgreSQL) ------

    def _exec(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self._conn.execute(sql, params).fetchall()
        return rows

    def heartbeat_replica(self, record: ReplicaRecord, lease_ttl_ms: int) -> None:
        self._write(
            lambda: leases.heartbeat_replica(self._exec, record, lease_ttl_ms, self._now_ms())
        )

    def list_replicas(self) -> list[ReplicaRecord]:
        return leases.list_replicas(self._read)

    def delete_replica(self, replica_id: str) -> None:
        self._write(lambda: leases.delete_replica(self._exec, replica_id))

    def acquire_lease(
        self,
        account: str,
        replica_id: str,
        session_id: str,
        agent_id: str,
        kube_host: str,
        cert_fingerprint: str,
        ttl_ms: int,
    ) -> LeaseOutcome:
        outcome: LeaseOutcome = self._write(
            lambda: leases.acquire_lease(
                self._exec,
                account,
                replica_id,
                session_id,
                agent_id,
                kube_host,
                cert_fingerprint,
                ttl_ms,
                self._now_ms(),
            )
        )
        return outcome

    def release_lease(self, account: str, session_id: str) -> bool:
        released: bool = self._write(lambda: leases.release_lease(self._exec, account, session_id))
        return released

    def get_lease(self, account: str) -> LeaseRecord | None:
        return leases.get_lease(self._read, account)

    def list_leases(self) -> list[LeaseRecord]:
        return leases.list_leases(self._read)

    def expire_leases(self, grace_ms: int) -> list[LeaseRecord]:
        gone: list[LeaseRecord] = self._write(
            lambda: leases.expire_leases(self._exec, self._now_ms(), grace_ms)
        )
        return gone

    def claim_duty(self, name: str, replica_id: str, ttl_ms: int) -> bool:
        held: bool = self._write(
            lambda: leases.claim_duty(self._exec, name, replica_id, ttl_ms, self._now_ms())
        )
        return held

    # -- operations across replicas (the SQL is _dispatch's, shared with PostgreSQL) -----

    def claim_dispatched(self, replica_id: str, limit: int) -> list[DispatchRecord]:
        claimed: list[DispatchRecord] = self._write(
            lambda: dispatch.claim_dispatched(self._exec, replica_id, limit)
        )
        return claimed

    def withdraw_dispatched(self, op_id: str) -> bool:
        gone: bool = self._write(lambda: dispatch.withdraw_dispatched(self._exec, op_id))
        return gone

    def expire_dispatched(self, before_ms: int) -> list[str]:
        gone: list[str] = self._write(lambda: dispatch.expire_dispatched(self._exec, before_ms))
        return gone
