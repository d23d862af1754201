"""The server's cache store: one interface (``Store``), SQLite behind it by default."""

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

__all__ = [
    "MIGRATIONS",
    "AccountRecord",
    "AccountState",
    "AgentRecord",
    "BatchOutcome",
    "Migration",
    "ObjectPage",
    "ObjectRef",
    "OperationEvent",
    "OperationRecord",
    "ResumePoint",
    "SqliteStore",
    "Store",
    "StoredObject",
    "group_of",
    "is_secret",
    "open_sqlite_store",
    "scrub_secret_object",
    "scrub_secret_records",
]
