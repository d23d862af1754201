"""server package: the Clouddriver-side service (sessions, registry, cache store, REST API)."""

from ._accounts import AccountHolders, AccountService, RegistryStore
from ._app import RunningServer, ServeApi, open_server_state, run_server
from ._auth import (
    Authenticator,
    AuthSettings,
    ClientAuth,
    JwtSettings,
    Principal,
    TlsSettings,
    server_ssl_context,
)
from ._config import ServerConfig, load_server_config, parse_server_config, store_config
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
from ._log_context import account_logs, log_context, replica_logs
from ._manifest_status import ManifestStatus, compute_status
from ._moniker import Moniker, moniker_for
from ._registry import Claim, Registry, Role, RoleChange
from ._sessions import AgentView, Session, SessionManager
from ._state import LogOperations, OperationsHook, ServerState
from .ops import OperationService

__all__ = [
    "AccountExists",
    "AccountHolders",
    "AccountService",
    "AgentView",
    "AuthError",
    "AuthSettings",
    "Authenticator",
    "ChangeFeed",
    "Claim",
    "ClientAuth",
    "ConfigError",
    "FeedClosed",
    "FeedError",
    "InvalidQuery",
    "InvalidRecord",
    "JwtSettings",
    "LogOperations",
    "ManifestStatus",
    "Moniker",
    "OperationService",
    "OperationsHook",
    "Principal",
    "Registry",
    "RegistryError",
    "RegistryStore",
    "Role",
    "RoleChange",
    "RunningServer",
    "SchemaError",
    "ServeApi",
    "ServerConfig",
    "ServerError",
    "ServerState",
    "Session",
    "SessionManager",
    "StoreClosed",
    "StoreError",
    "SubscriberLagged",
    "TlsSettings",
    "UnknownAccount",
    "account_logs",
    "compute_status",
    "load_server_config",
    "log_context",
    "moniker_for",
    "open_server_state",
    "parse_server_config",
    "replica_logs",
    "run_server",
    "server_ssl_context",
    "store_config",
]
