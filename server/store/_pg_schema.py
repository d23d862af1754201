"""The PostgreSQL schema, as an ordered list of migrations (SQLite's: ``_schema``).

``schema_version`` holds one row per applied migration. Opening the store applies the
missing steps in order, each in its own transaction that first takes a transaction-level
advisory lock (``pg_advisory_xact_lock``) and then reads the version: replicas starting
together apply each step exactly once, the others waiting for the lock and then finding it
done. A database newer than this code is refused (SchemaError). Never edit a released step:
append a new one.

Shape, against SQLite's: text keys are ``COLLATE "C"`` (byte order, as SQLite compares, and
whatever the database's default collation is); the case-insensitive kind is a stored
generated ``kind_key`` (lower(kind)) in the objects' primary key; the epoch is a sequence,
so no row is locked by every SYNC_BEGIN of every replica; labels are jsonb for ``->>``.
An object row is TOASTed only past a whole page (toast_tuple_target 8160, not ~2 KB): a body
that compresses only ~2x then stays in its row instead of being cut into chunks in the TOAST
table, which took ~22 % off the backend's CPU per ingested event (bench_server --bodies
mixed; no change on the padded bodies, the table no larger).
Account, agent and operation JSON fields stay text and ``dynamic`` an integer, so both
backends share one row mapping.
"""

from __future__ import annotations

import psycopg

from .._errors import SchemaError
from . import _views as views
from ._okey import OKEY_OF_COLUMNS
from ._schema import Migration, apply_step, check_known

# pg_advisory_xact_lock's key: "kubesvc" in ASCII, one lock for this schema's migrations.
MIGRATION_LOCK = 0x6B75_6265_7376_63

PG_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "accounts, agents, objects, resource versions, sync state, operations",
        (
            "CREATE SEQUENCE object_epoch MINVALUE 0 START 0",
            # The first value taken: last_value is then the current epoch (0) for readers.
            "SELECT nextval('object_epoch')",
            """CREATE TABLE accounts(
                name TEXT COLLATE "C" PRIMARY KEY, kube_host TEXT NOT NULL,
                cert_fingerprint TEXT NOT NULL, kube_version TEXT NOT NULL, status TEXT NOT NULL,
                error_message TEXT NOT NULL, retry_count INTEGER NOT NULL,
                dynamic INTEGER NOT NULL, permissions TEXT NOT NULL, properties TEXT NOT NULL,
                zone_id TEXT NOT NULL, last_updated_ms BIGINT NOT NULL,
                connections TEXT NOT NULL, orphaned_at_ms BIGINT)""",
            """CREATE TABLE agents(
                session_id TEXT COLLATE "C" PRIMARY KEY, agent_id TEXT COLLATE "C" NOT NULL,
                instance_id TEXT NOT NULL, agent_version TEXT NOT NULL, server_id TEXT NOT NULL,
                peer TEXT NOT NULL, accounts TEXT NOT NULL, connected_at_ms BIGINT NOT NULL,
                last_seen_ms BIGINT NOT NULL)""",
            """CREATE TABLE objects(
                account TEXT COLLATE "C" NOT NULL, grp TEXT COLLATE "C" NOT NULL,
                kind TEXT COLLATE "C" NOT NULL, namespace TEXT COLLATE "C" NOT NULL,
                name TEXT COLLATE "C" NOT NULL, api_version TEXT NOT NULL, uid TEXT NOT NULL,
                resource_version TEXT NOT NULL, epoch BIGINT NOT NULL,
                updated_at_ms BIGINT NOT NULL, labels JSONB, body BYTEA NOT NULL,
                kind_key TEXT COLLATE "C" GENERATED ALWAYS AS (lower(kind)) STORED,
                PRIMARY KEY (account, grp, kind_key, namespace, name))
                WITH (toast_tuple_target = 8160)""",
            """CREATE TABLE resource_versions(
                account TEXT COLLATE "C" NOT NULL, api_version TEXT COLLATE "C" NOT NULL,
                kind TEXT COLLATE "C" NOT NULL, scope TEXT COLLATE "C" NOT NULL,
                resource_version TEXT NOT NULL, updated_at_ms BIGINT NOT NULL,
                PRIMARY KEY (account, api_version, kind, scope))""",
            # kind is stored lower-case here: the bracket's key compares case-insensitively.
            """CREATE TABLE sync_state(
                account TEXT COLLATE "C" NOT NULL, grp TEXT COLLATE "C" NOT NULL,
                kind TEXT COLLATE "C" NOT NULL, scope TEXT COLLATE "C" NOT NULL,
                begin_epoch BIGINT NOT NULL, started_at_ms BIGINT NOT NULL,
                PRIMARY KEY (account, grp, kind, scope))""",
            """CREATE TABLE operations(
                id TEXT COLLATE "C" PRIMARY KEY, account TEXT COLLATE "C" NOT NULL,
                type TEXT NOT NULL, payload_json TEXT NOT NULL, state TEXT NOT NULL,
                created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL,
                result_json TEXT NOT NULL, error_message TEXT NOT NULL,
                error_code TEXT NOT NULL)""",
            "CREATE INDEX operations_account ON operations(account, created_ms)",
            "CREATE INDEX operations_created ON operations(created_ms)",
            """CREATE TABLE operation_history(
                id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                operation_id TEXT COLLATE "C" NOT NULL, at_ms BIGINT NOT NULL,
                state TEXT NOT NULL, message TEXT NOT NULL)""",
            "CREATE INDEX operation_history_op ON operation_history(operation_id, id)",
        ),
    ),
    Migration(
        2,
        "replicas, account leases and duties (roles across server replicas)",
        (
            """CREATE TABLE replicas(
                replica_id TEXT COLLATE "C" PRIMARY KEY, address TEXT NOT NULL,
                started_ms BIGINT NOT NULL, heartbeat_ms BIGINT NOT NULL,
                sessions INTEGER NOT NULL, primaries INTEGER NOT NULL)""",
            # kube_host/cert_fingerprint: the cluster the lease was granted for, so a claim
            # for another cluster is refused in the same transaction as the grant.
            """CREATE TABLE leases(
                account TEXT COLLATE "C" PRIMARY KEY, replica_id TEXT COLLATE "C" NOT NULL,
                session_id TEXT NOT NULL, agent_id TEXT NOT NULL, expires_ms BIGINT NOT NULL,
                kube_host TEXT NOT NULL, cert_fingerprint TEXT NOT NULL)""",
            "CREATE INDEX leases_replica ON leases(replica_id)",
            """CREATE TABLE duties(
                name TEXT COLLATE "C" PRIMARY KEY, replica_id TEXT COLLATE "C" NOT NULL,
                expires_ms BIGINT NOT NULL)""",
        ),
    ),
    Migration(
        3,
        "operations dispatched to the replica holding the account's stream",
        (
            # A mailbox: a row lives from the dispatch to the target's claim (which deletes
            # it, and with it the payload's Secret data) or the origin's withdrawal. The
            # operation's record and history stay in ``operations``/``operation_history``.
            """CREATE TABLE operation_dispatch(
                op_id TEXT COLLATE "C" PRIMARY KEY, account TEXT COLLATE "C" NOT NULL,
                target_replica TEXT COLLATE "C" NOT NULL,
                origin_replica TEXT COLLATE "C" NOT NULL, type TEXT NOT NULL,
                payload_json TEXT NOT NULL, deadline_ms BIGINT NOT NULL,
                created_ms BIGINT NOT NULL)""",
            "CREATE INDEX operation_dispatch_target ON operation_dispatch(target_replica,"
            " created_ms)",
        ),
    ),
    Migration(
        4,
        "the change log: what each write changed, for the other replicas' feeds",
        (
            # One row per committed object write (``_changes``): its transaction's id, for
            # reading in commit order (``_pg_changes``), who wrote it (a replica's store), the
            # database's clock at the insert (for trimming), and the feed records.
            """CREATE TABLE changes(
                seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                xid BIGINT NOT NULL DEFAULT txid_current(),
                writer TEXT COLLATE "C" NOT NULL,
                at_ms BIGINT NOT NULL
                    DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                records INTEGER NOT NULL, message BYTEA NOT NULL)""",
            "CREATE INDEX changes_xid ON changes(xid)",
            # One row: the newest at_ms and xid trims deleted (a reader behind them resyncs).
            """CREATE TABLE change_trims(
                id INTEGER PRIMARY KEY CHECK (id = 1), newest_trimmed_ms BIGINT NOT NULL,
                newest_trimmed_xid BIGINT NOT NULL, trimmed_ms BIGINT NOT NULL)""",
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
                account TEXT COLLATE "C" NOT NULL, grp TEXT COLLATE "C" NOT NULL,
                kind_key TEXT COLLATE "C" NOT NULL, scope TEXT COLLATE "C" NOT NULL,
                api_version TEXT NOT NULL, kind TEXT NOT NULL, code INTEGER NOT NULL,
                reason TEXT NOT NULL, since_ms BIGINT NOT NULL,
                PRIMARY KEY (account, grp, kind_key, scope))""",
        ),
    ),
    Migration(6, views.STEP_DESCRIPTION, views.PG_STEP),
    Migration(
        7,
        "objects keyed by one column (okey): the five coordinates joined",
        (
            # The five-column key made every comparison in its b-tree walk the varying-width
            # columns before the one compared (PostgreSQL caches no offsets past the first):
            # the ingest's upsert spent ~40 % of its time there. One byte-ordered column of
            # the same order (``_okey``) halves that (bench_server, one session: +12-20 %
            # events/s). Every statement on objects keys or ranges on it.
            # Rows whose coordinates hold a control character (no Kubernetes name does; the
            # code refuses them from now on) could break the key's order or collide in it:
            # they go (the agents' next lists would not bring them back either).
            "DELETE FROM objects WHERE account || grp || kind || namespace || name"
            " ~ '[\\x01-\\x1f]'",
            f'ALTER TABLE objects ADD COLUMN okey TEXT COLLATE "C" GENERATED ALWAYS AS'
            f" ({OKEY_OF_COLUMNS}) STORED",
            "ALTER TABLE objects DROP CONSTRAINT objects_pkey",
            "ALTER TABLE objects ADD CONSTRAINT objects_pkey PRIMARY KEY (okey)",
        ),
    ),
)


def _version(cur: psycopg.Cursor[tuple[int]]) -> int:
    cur.execute(
        "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER PRIMARY KEY,"
        " applied_at_ms BIGINT NOT NULL, description TEXT NOT NULL)"
    )
    cur.execute("SELECT coalesce(max(version), 0) FROM schema_version")
    row = cur.fetchone()
    return int(row[0]) if row else 0


def migrate_pg(
    conn: psycopg.Connection[tuple[int]],
    now_ms: int,
    migrations: tuple[Migration, ...] = PG_MIGRATIONS,
) -> int:
    """Apply the missing migrations in order under the migration lock; returns the version.

    ``conn`` must not be in a transaction. Raises SchemaError when the database is newer than
    ``migrations`` or a step fails (that step is rolled back; earlier ones stay applied).
    """
    version = 0
    for step in (*migrations, None):  # None: a last look at the version, under the lock too
        try:
            with conn.transaction(), conn.cursor() as cur:
                # A step may rewrite a large table (7: the objects); the connection's
                # statement_timeout is for the store's calls, not for this.
                cur.execute("SET LOCAL statement_timeout = 0")
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                version = _version(cur)
                check_known(version, migrations)
                if step is None or step.version <= version:
                    continue
                apply_step(cur.execute, step, now_ms, "%s")
                version = step.version
        except psycopg.Error as exc:
            what = f"migration {step.version} ({step.description})" if step else "the check"
            raise SchemaError(f"{what} failed: {exc}") from exc
    return version
