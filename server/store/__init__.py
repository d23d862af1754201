"""The server's cache store: one interface (``Store``), SQLite behind it by default and
PostgreSQL (``store.url: postgresql://...``) for several server replicas."""

from ._changes import CHANGES_CHANNEL, notice_writer
from ._leases import cluster_refusal
from ._notify import MAX_PAYLOAD_BYTES, Notice, channel_for
from ._open import open_store
from ._pg import PgStore, open_postgres_store
from ._pg_schema import PG_MIGRATIONS
from ._protocol import Store
from ._records import (
    AccountRecord,
    AccountScope,
    AccountState,
    AgentRecord,
    AvailabilityOutcome,
    BatchOutcome,
    Change,
    ChangeCursor,
    ChangePage,
    DispatchRecord,
    KindChange,
    KindOverview,
    LeaseOutcome,
    LeaseRecord,
    Notification,
    ObjectPage,
    ObjectRef,
    OperationEvent,
    OperationRecord,
    ReplicaRecord,
    ResumePoint,
    ShardScope,
    StoredObject,
    UnavailableKind,
    group_of,
)
from ._schema import MIGRATIONS, Migration
from ._secrets import is_secret, scrub_secret_object, scrub_secret_records
from ._sqlite import SqliteStore, open_sqlite_store
from ._url import DEFAULT_STATEMENT_TIMEOUT_MS, StoreConfig, StoreUrl, parse_store_url, sqlite_url
from ._views import SearchRequest, ViewQuery, ViewRow

__all__ = [
    "CHANGES_CHANNEL",
    "DEFAULT_STATEMENT_TIMEOUT_MS",
    "MAX_PAYLOAD_BYTES",
    "MIGRATIONS",
    "PG_MIGRATIONS",
    "AccountRecord",
    "AccountScope",
    "AccountState",
    "AgentRecord",
    "AvailabilityOutcome",
    "BatchOutcome",
    "Change",
    "ChangeCursor",
    "ChangePage",
    "DispatchRecord",
    "KindChange",
    "KindOverview",
    "LeaseOutcome",
    "LeaseRecord",
    "Migration",
    "Notice",
    "Notification",
    "ObjectPage",
    "ObjectRef",
    "OperationEvent",
    "OperationRecord",
    "PgStore",
    "ReplicaRecord",
    "ResumePoint",
    "SearchRequest",
    "ShardScope",
    "SqliteStore",
    "Store",
    "StoreConfig",
    "StoreUrl",
    "StoredObject",
    "UnavailableKind",
    "ViewQuery",
    "ViewRow",
    "channel_for",
    "cluster_refusal",
    "group_of",
    "is_secret",
    "notice_writer",
    "open_postgres_store",
    "open_sqlite_store",
    "open_store",
    "parse_store_url",
    "scrub_secret_object",
    "scrub_secret_records",
    "sqlite_url",
]
