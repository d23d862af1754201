"""agent package."""

# -- config, errors (the config/client engineer) -------------------------------------------------
# -- data path: discovery, reflectors, secrets (the reflector engineer) ---------------------------
# -- the link and the composition (the lead) ----------------------------------------------------
from ._account_watch import AccountWatchStatus, ResumeKey, run_account
from ._accounts import AccountSet, AccountState
from ._app import (
    Agent,
    build_agent,
    client_ssl_context,
    link_settings,
    parse_grpc_address,
    run_agent,
    server_addresses,
)
from ._backoff import Backoff
from ._config_load import default_config_path, load_config, parse_config
from ._config_reload import AccountsDiff, diff_accounts, diff_config, watch_config
from ._config_schema import (
    AccountConfig,
    ClouddriverConfig,
    Config,
    KubernetesConfig,
)
from ._config_values import parse_duration, parse_size
from ._discovery import (
    DiscoveryResult,
    KindFilter,
    KindInfo,
    TargetDiff,
    WatchTarget,
    diff_targets,
    discover,
    select_targets,
)
from ._errors import (
    AgentError,
    ConfigError,
    KubeClosedError,
    KubeconfigError,
    KubeConflictError,
    KubeConnectionError,
    KubeCredentialError,
    KubeError,
    KubeForbiddenError,
    KubeGoneError,
    KubeNotFoundError,
    KubeServerError,
    KubeStatusError,
    KubeTimeoutError,
    KubeTooManyRequestsError,
    KubeUnauthorizedError,
    LinkTimeoutError,
)
from ._health import health_app, metrics_app, serve_http
from ._kube_auth import Credential, CredentialSource, credential_source
from ._kube_client import (
    ClusterIdentity,
    KubeClient,
    KubeReply,
    KubeStream,
    access_for_account,
    open_kube_client,
)
from ._kubeconfig import ClusterAccess, load_kubeconfig, parse_kubeconfig, service_account_access
from ._link import OVERSIZE_ANNOTATION, Link, LinkSettings, LinkStatus
from ._log_context import account_logs, log_context
from ._metrics import metrics_registry
from ._operations import OperationExecutor, OperationSettings
from ._reflector import BookmarkKey, Reflector, ReflectorHooks, ReflectorSettings, ReflectorState
from ._scrub import Scrubber
from ._seam import KubeResponse, KubeTransport
from ._status import AgentStatus, OperationRecord
from ._tasks import AccountListCaps, ListCaps
from ._token import TokenSource
from ._watch_errors import LineTooLong, WatchDecodeError, WatchError
from ._watchline import WatchDecoder, WatchEvent, decode_list_page

__all__ = [
    "OVERSIZE_ANNOTATION",
    "AccountConfig",
    "AccountListCaps",
    "AccountSet",
    "AccountState",
    "AccountWatchStatus",
    "AccountsDiff",
    "Agent",
    "AgentError",
    "AgentStatus",
    "Backoff",
    "BookmarkKey",
    "ClouddriverConfig",
    "ClusterAccess",
    "ClusterIdentity",
    "Config",
    "ConfigError",
    "Credential",
    "CredentialSource",
    "DiscoveryResult",
    "KindFilter",
    "KindInfo",
    "KubeClient",
    "KubeClosedError",
    "KubeConflictError",
    "KubeConnectionError",
    "KubeCredentialError",
    "KubeError",
    "KubeForbiddenError",
    "KubeGoneError",
    "KubeNotFoundError",
    "KubeReply",
    "KubeResponse",
    "KubeServerError",
    "KubeStatusError",
    "KubeStream",
    "KubeTimeoutError",
    "KubeTooManyRequestsError",
    "KubeTransport",
    "KubeUnauthorizedError",
    "KubeconfigError",
    "KubernetesConfig",
    "LineTooLong",
    "Link",
    "LinkSettings",
    "LinkStatus",
    "LinkTimeoutError",
    "ListCaps",
    "OperationExecutor",
    "OperationRecord",
    "OperationSettings",
    "Reflector",
    "ReflectorHooks",
    "ReflectorSettings",
    "ReflectorState",
    "ResumeKey",
    "Scrubber",
    "TargetDiff",
    "TokenSource",
    "WatchDecodeError",
    "WatchDecoder",
    "WatchError",
    "WatchEvent",
    "WatchTarget",
    "access_for_account",
    "account_logs",
    "build_agent",
    "client_ssl_context",
    "credential_source",
    "decode_list_page",
    "default_config_path",
    "diff_accounts",
    "diff_config",
    "diff_targets",
    "discover",
    "health_app",
    "link_settings",
    "load_config",
    "load_kubeconfig",
    "log_context",
    "metrics_app",
    "metrics_registry",
    "open_kube_client",
    "parse_config",
    "parse_duration",
    "parse_grpc_address",
    "parse_kubeconfig",
    "parse_size",
    "run_account",
    "run_agent",
    "select_targets",
    "serve_http",
    "server_addresses",
    "service_account_access",
    "watch_config",
]
