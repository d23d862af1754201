"""The server's cache store: one interface (``Store``), SQLite behind it by default and
PostgreSQL (``store.url: postgresql://...``) for several server replicas."""

from ._open import open_store
from ._pg import PgStore, open_postgres_store
from ._pg_schema import PG_MIGRATIONS
from ._protocol import Store
from ._records import (
    AccountRecord,
    AccountState,
    AgentRecord,
    BatchOutcome,
    ObjectPage,
    ObjectRef,
    OperationEvent,
    OperationRecord,
    ResumePoint,
    StoredObject,
    group_of,
)
from ._schema import MIGRATIONS, Migration
from ._secrets import is_secret, scrub_secret_object, scrub_secret_records
from ._sqlite import SqliteStore, open_sqlite_store
from ._url import StoreConfig, StoreUrl, parse_store_url, sqlite_url

__all__ = [
    "MIGRATIONS",
    "PG_MIGRATIONS",
    "AccountRecord",
    "AccountState",
    "AgentRecord",
    "BatchOutcome",
    "Migration",
    "ObjectPage",
    "ObjectRef",
    "OperationEvent",
    "OperationRecord",
    "PgStore",
    "ResumePoint",
    "SqliteStore",
    "Store",
    "StoreConfig",
    "StoreUrl",
    "StoredObject",
    "group_of",
    "is_secret",
    "open_postgres_store",
    "open_sqlite_store",
    "open_store",
    "parse_store_url",
    "scrub_secret_object",
    "scrub_secret_records",
    "sqlite_url",
]
