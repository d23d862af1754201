"""The server package's exceptions, one tree.

::

    ServerError
    ├── ConfigError            server.yaml is unreadable or invalid (file, path, what was expected)
    ├── StoreError             the cache store failed
    │   ├── StoreClosed        we closed the store; no more calls
    │   ├── InvalidRecord      an event record cannot be stored (bad JSON, missing name, ...)
    │   ├── InvalidQuery       a query's filters are malformed (label selector, continue token)
    │   └── SchemaError        the database's schema is newer than this code, or a migration failed
    ├── RegistryError          an account registry request was refused
    │   ├── AccountExists      the name is already registered (carries the names)
    │   └── UnknownAccount     no account by that name
    └── AuthError              an agent's credentials were refused (carries a gRPC status name)

Errors from APSW (SQLite), psycopg (PostgreSQL), jwt and yaml are translated at the edge with
``raise ... from exc``.
"""

from __future__ import annotations

from collections.abc import Sequence


class ServerError(Exception):
    """Root of every error the server package raises on purpose."""


class ConfigError(ServerError):
    """server.yaml is unreadable or invalid; the message names the file and the path inside it."""

    def __init__(self, file: str, path: str, expected: str) -> None:
        self.file = file
        self.path = path
        self.expected = expected
        where = f"{file}: {path}" if path else file
        super().__init__(f"{where}: {expected}")


class StoreError(ServerError):
    """The cache store failed; the transaction in progress was rolled back."""


class StoreClosed(StoreError):
    """The store was closed by its owner; no further calls are accepted."""


class InvalidRecord(StoreError):
    """An event record cannot be stored; the whole batch was rolled back."""


class InvalidQuery(StoreError):
    """A query's filters are malformed (label selector, continue token, limit)."""


class SchemaError(StoreError):
    """The database's schema is newer than this code knows, or a migration failed."""


class RegistryError(ServerError):
    """The account registry refused a request."""


class AccountExists(RegistryError):
    """Accounts by these names are already registered."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        super().__init__(f"accounts already exist: {', '.join(self.names)}")


class UnknownAccount(RegistryError):
    """No account by that name is registered."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown account {name!r}")


class AuthError(ServerError):
    """An agent's credentials were refused.

    ``status`` is the name of the gRPC status to end the call with (``UNAUTHENTICATED`` or
    ``PERMISSION_DENIED``); the message says why without echoing any secret.
    """

    def __init__(self, status: str, message: str) -> None:
        self.status = status
        super().__init__(message)
