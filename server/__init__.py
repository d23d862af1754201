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
from ._feed import ChangeFeed, FeedClosed, FeedError, SubscriberLagged
from ._manifest_status import ManifestStatus, compute_status
from ._moniker import Moniker, moniker_for

__all__ = [
    "AccountExists",
    "AuthError",
    "ChangeFeed",
    "ConfigError",
    "FeedClosed",
    "FeedError",
    "InvalidQuery",
    "InvalidRecord",
    "ManifestStatus",
    "Moniker",
    "RegistryError",
    "SchemaError",
    "ServerError",
    "StoreClosed",
    "StoreError",
    "SubscriberLagged",
    "UnknownAccount",
    "compute_status",
    "moniker_for",
]
