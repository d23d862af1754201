"""Operations dispatched across replicas: the ``operation_dispatch`` mailbox, written once
for both backends (``?`` marks; ``Exec`` as in ``_leases``).

Theory of operation. The replica running a task (the origin) inserts a row for the replica
holding the account's stream (the target) in the transaction that records the operation as
dispatched (``record_operations(..., dispatches=...)``), and notifies the target in it too
(PostgreSQL delivers the notification at commit, so the row is always there when the target
wakes). The target claims its rows by deleting them (``DELETE ... RETURNING``): a row is
claimed once, and its payload, which holds Secret data whole for the agent, leaves the
database at the claim. The origin withdraws a row it no longer wants (its deadline passed,
the target died) the same way, so exactly one of claim and withdrawal wins, and the origin
knows which: withdrawn, nothing was sent.
Housekeeping deletes rows long past their deadline (origin and target both gone).
"""

from __future__ import annotations

from ._leases import Exec
from ._records import DispatchRecord

_COLUMNS = (
    "op_id, account, target_replica, origin_replica, type, payload_json, deadline_ms, created_ms"
)


INSERT_DISPATCH = f"INSERT INTO operation_dispatch({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)"


def dispatch_row(d: DispatchRecord) -> tuple[str | int, ...]:
    """``d`` as INSERT_DISPATCH's parameters."""
    return (
        d.op_id,
        d.account,
        d.target_replica,
        d.origin_replica,
        d.type,
        d.payload_json,
        d.deadline_ms,
        d.created_ms,
    )


def claim_dispatched(x: Exec, replica_id: str, limit: int) -> list[DispatchRecord]:
    """Delete and return up to ``limit`` rows for ``replica_id``, oldest first. A row another
    transaction deleted meanwhile (a withdrawal) is not returned: on PostgreSQL the DELETE
    skips a row whose deleter committed first."""
    rows = x(
        f"DELETE FROM operation_dispatch WHERE op_id IN (SELECT op_id FROM operation_dispatch"
        f" WHERE target_replica=? ORDER BY created_ms, op_id LIMIT ?) RETURNING {_COLUMNS}",
        (replica_id, max(1, limit)),
    )
    return sorted((DispatchRecord(*row) for row in rows), key=lambda d: (d.created_ms, d.op_id))


def withdraw_dispatched(x: Exec, op_id: str) -> bool:
    return bool(x("DELETE FROM operation_dispatch WHERE op_id=? RETURNING op_id", (op_id,)))


def expire_dispatched(x: Exec, before_ms: int) -> list[str]:
    rows = x("DELETE FROM operation_dispatch WHERE deadline_ms < ? RETURNING op_id", (before_ms,))
    return sorted(str(row[0]) for row in rows)
