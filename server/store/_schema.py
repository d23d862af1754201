"""The SQLite schema, as an ordered list of migrations (PostgreSQL's: ``_pg_schema``).

``schema_version`` holds one row per applied migration. Opening a database applies the
missing steps in order, each in its own transaction, which reads the version again after it
took the write lock (BEGIN IMMEDIATE): two processes opening one file at once apply each step
once. A database newer than this code is refused (SchemaError) rather than guessed at. Never
edit a released step: append a new one.

Objects live in a rowid table with a unique index on their coordinates and the body as the
last column: measured here (500 rows of 4.4 KB per transaction, WAL, synchronous=NORMAL)
that inserts ~30-35k rows/s and updates ~45k/s, where WITHOUT ROWID keyed by the
coordinates was about half as fast; keeping the small columns before the body keeps them on
the row's first page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import apsw

from .._errors import SchemaError
from . import _views as views


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "accounts, agents, objects, resource versions, sync state, operations",
        (
            "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "INSERT INTO meta(key, value) VALUES ('epoch', '0')",
            """CREATE TABLE accounts(
                name TEXT PRIMARY KEY, kube_host TEXT NOT NULL, cert_fingerprint TEXT NOT NULL,
                kube_version TEXT NOT NULL, status TEXT NOT NULL, error_message TEXT NOT NULL,
                retry_count INTEGER NOT NULL, dynamic INTEGER NOT NULL, permissions TEXT NOT NULL,
                properties TEXT NOT NULL, zone_id TEXT NOT NULL, last_updated_ms INTEGER NOT NULL,
                connections TEXT NOT NULL, orphaned_at_ms INTEGER)""",
            """CREATE TABLE agents(
                session_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, instance_id TEXT NOT NULL,
                agent_version TEXT NOT NULL, server_id TEXT NOT NULL, peer TEXT NOT NULL,
                accounts TEXT NOT NULL, connected_at_ms INTEGER NOT NULL,
                last_seen_ms INTEGER NOT NULL)""",
            """CREATE TABLE objects(
                id INTEGER PRIMARY KEY, account TEXT NOT NULL, grp TEXT NOT NULL,
                kind TEXT NOT NULL COLLATE NOCASE, namespace TEXT NOT NULL, name TEXT NOT NULL,
                api_version TEXT NOT NULL, uid TEXT NOT NULL, resource_version TEXT NOT NULL,
                epoch INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL, labels TEXT,
                body BLOB NOT NULL)""",
            "CREATE UNIQUE INDEX objects_key ON objects(account, grp, kind, namespace, name)",
            """CREATE TABLE resource_versions(
                account TEXT NOT NULL, api_version TEXT NOT NULL, kind TEXT NOT NULL,
                scope TEXT NOT NULL, resource_version TEXT NOT NULL,
                updated_at_ms INTEGER NOT NULL,
                PRIMARY KEY(account, api_version, kind, scope))""",
            """CREATE TABLE sync_state(
                account TEXT NOT NULL, grp TEXT NOT NULL, kind TEXT NOT NULL COLLATE NOCASE,
                scope TEXT NOT NULL, begin_epoch INTEGER NOT NULL, started_at_ms INTEGER NOT NULL,
                PRIMARY KEY(account, grp, kind, scope))""",
            """CREATE TABLE operations(
                id TEXT PRIMARY KEY, account TEXT NOT NULL, type TEXT NOT NULL,
                payload_json TEXT NOT NULL, state TEXT NOT NULL, created_ms INTEGER NOT NULL,
                updated_ms INTEGER NOT NULL, result_json TEXT NOT NULL,
                error_message TEXT NOT NULL, error_code TEXT NOT NULL)""",
            "CREATE INDEX operations_account ON operations(account, created_ms)",
            """CREATE TABLE operation_history(
                id INTEGER PRIMARY KEY, operation_id TEXT NOT NULL, at_ms INTEGER NOT NULL,
                state TEXT NOT NULL, message TEXT NOT NULL)""",
            "CREATE INDEX operation_history_op ON operation_history(operation_id, id)",
        ),
    ),
    Migration(
        2,
        "replicas, account leases and duties (roles across server replicas)",
        (
            """CREATE TABLE replicas(
                replica_id TEXT PRIMARY KEY, address TEXT NOT NULL, started_ms INTEGER NOT NULL,
                heartbeat_ms INTEGER NOT NULL, sessions INTEGER NOT NULL,
                primaries INTEGER NOT NULL)""",
            # kube_host/cert_fingerprint: the cluster the lease was granted for, so a claim
            # for another cluster is refused in the same transaction as the grant.
            """CREATE TABLE leases(
                account TEXT PRIMARY KEY, replica_id TEXT NOT NULL, session_id TEXT NOT NULL,
                agent_id TEXT NOT NULL, expires_ms INTEGER NOT NULL, kube_host TEXT NOT NULL,
                cert_fingerprint TEXT NOT NULL)""",
            "CREATE INDEX leases_replica ON leases(replica_id)",
            """CREATE TABLE duties(
                name TEXT PRIMARY KEY, replica_id TEXT NOT NULL, expires_ms INTEGER NOT NULL)""",
        ),
    ),
    Migration(
        3,
        "operations dispatched to the replica holding the account's stream",
        (
            # One process owns a SQLite file, so nothing is ever dispatched here: the table
            # exists so that both backends share version numbers and one Store contract.
            """CREATE TABLE operation_dispatch(
                op_id TEXT PRIMARY KEY, account TEXT NOT NULL, target_replica TEXT NOT NULL,
                origin_replica TEXT NOT NULL, type TEXT NOT NULL, payload_json TEXT NOT NULL,
                deadline_ms INTEGER NOT NULL, created_ms INTEGER NOT NULL)""",
            "CREATE INDEX operation_dispatch_target ON operation_dispatch(target_replica,"
            " created_ms)",
        ),
    ),
    Migration(
        4,
        "the change log: what each write changed, for the other replicas' feeds",
        (
            # PostgreSQL's shape, and never written here: one process owns a SQLite file, so
            # its change feed is its own ingest (the step keeps the two versions in step).
            """CREATE TABLE changes(
                seq INTEGER PRIMARY KEY, xid INTEGER NOT NULL DEFAULT 0, writer TEXT NOT NULL,
                at_ms INTEGER NOT NULL DEFAULT 0, records INTEGER NOT NULL,
                message BLOB NOT NULL)""",
            """CREATE TABLE change_trims(
                id INTEGER PRIMARY KEY CHECK (id = 1), newest_trimmed_ms INTEGER NOT NULL,
                newest_trimmed_xid INTEGER NOT NULL, trimmed_ms INTEGER NOT NULL)""",
            "INSERT INTO change_trims VALUES (1, 0, 0, 0)",
        ),
    ),
    Migration(
        5,
        "kinds the agent cannot watch (unavailable kinds) per account and scope",
        (
            # kind_key is the kind lower-cased by the store (both backends alike); kind and
            # api_version as the agent named them, for the REST API.
            """CREATE TABLE unavailable_kinds(
                account TEXT NOT NULL, grp TEXT NOT NULL, kind_key TEXT NOT NULL,
                scope TEXT NOT NULL, api_version TEXT NOT NULL, kind TEXT NOT NULL,
                code INTEGER NOT NULL, reason TEXT NOT NULL, since_ms INTEGER NOT NULL,
                PRIMARY KEY(account, grp, kind_key, scope))""",
        ),
    ),
    Migration(6, views.STEP_DESCRIPTION, views.SQLITE_STEP),
)


def check_known(version: int, migrations: tuple[Migration, ...]) -> None:
    """Raises SchemaError when the database's ``version`` is newer than ``migrations``."""
    known = migrations[-1].version if migrations else 0
    if version > known:
        raise SchemaError(
            f"the database has schema version {version}, newer than this server knows ({known})"
        )


def apply_step(execute: Callable[..., object], step: Migration, now_ms: int, mark: str) -> None:
    """Run ``step``'s statements and record it in ``schema_version``, with ``execute`` (a
    connection's or cursor's, inside the caller's transaction; ``mark`` its placeholder).
    Raises what ``execute`` raises."""
    for statement in step.statements:
        execute(statement)
    execute(
        "INSERT INTO schema_version(version, applied_at_ms, description)"
        f" VALUES ({mark},{mark},{mark})",
        (step.version, now_ms, step.description),
    )


def current_version(conn: apsw.Connection) -> int:
    """The highest applied migration (0 for a new database)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version("
        "version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL, description TEXT NOT NULL)"
    )
    # .get: the single value of a one-row, one-column result.
    return int(conn.execute("SELECT max(version) FROM schema_version").get or 0)


def migrate(
    conn: apsw.Connection, now_ms: int, migrations: tuple[Migration, ...] = MIGRATIONS
) -> int:
    """Apply the missing migrations in order; returns the resulting version.

    Raises SchemaError when the database is newer than ``migrations`` or a step fails (that
    step is rolled back; earlier steps stay applied).
    """
    version = current_version(conn)
    check_known(version, migrations)
    for step in migrations:
        if step.version <= version:
            continue
        try:
            conn.execute("BEGIN IMMEDIATE")  # the write lock: one migrating process at a time
            version = current_version(conn)
            check_known(version, migrations)
            if step.version > version:
                apply_step(conn.execute, step, now_ms, "?")
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, apsw.Error):
                raise SchemaError(
                    f"migration {step.version} ({step.description}) failed: {exc}"
                ) from exc
            raise
    version = current_version(conn)
    check_known(version, migrations)
    return version
