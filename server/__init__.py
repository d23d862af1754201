"""server package: the Clouddriver-side service (sessions, registry, cache store, REST API)."""

from ._errors import (
    AccountExists,
    AuthError,
    ConfigError,
    InvalidQuery,
    InvalidRecord,
    RegistryError,
    SchemaError,
    ServerError,
    StoreClosed,
    StoreError,
    UnknownAccount,
)

__all__ = [
    "AccountExists",
    "AuthError",
    "ConfigError",
    "InvalidQuery",
    "InvalidRecord",
    "RegistryError",
    "SchemaError",
    "ServerError",
    "StoreClosed",
    "StoreError",
    "UnknownAccount",
]
