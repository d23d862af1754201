"""NOTIFY on a worker thread's connection, outside a transaction or at its commit.

The change log's writers (``PgCore``) announce each committed write on CHANGES_CHANNEL right
after its commit, on their own connection. Receiving is ``Store.listen`` (``_pg_listen``: one
connection for every listener of a store); a notification is only a wake-up, and every receiver
polls behind it (``_notify`` says why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg
from psycopg import pq

from .._errors import StoreError

if TYPE_CHECKING:
    from ._pg_core import Conn

__all__ = ["notify"]

_NOTIFY = "SELECT pg_notify(%s, %s)"
# A NOTIFY takes a transaction id, so a statement that is only a NOTIFY writes a commit record
# (82 bytes of WAL, measured) and, with synchronous_commit on, waits for its flush: on a disk
# whose fsync takes milliseconds, one more flush per batch. A notification is not durable
# anyway: that transaction commits asynchronously (set_config(..., true) holds for it alone).
_NOTIFY_ALONE = "SELECT set_config('synchronous_commit', 'off', true), pg_notify(%s, %s)"


def notify(conn: Conn, channel: str, payload: str) -> None:
    """NOTIFY ``channel`` with ``payload`` on ``conn`` (a worker thread's): in the caller's
    transaction if one is open (sent at its commit), else at once. Raises StoreError."""
    alone = conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE
    try:
        conn.execute(_NOTIFY_ALONE if alone else _NOTIFY, (channel, payload))
    except psycopg.Error as exc:
        raise StoreError(f"NOTIFY {channel} failed: {exc}") from exc
