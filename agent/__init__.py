"""agent package."""

# -- config, errors (the config/client engineer) -------------------------------------------------
# -- data path: discovery, reflectors, secrets (the reflector engineer) ---------------------------
from ._account_watch import AccountWatchStatus, ResumeKey, run_account
from ._config_load import default_config_path, load_config, parse_config
from ._config_reload import AccountsDiff, diff_accounts, watch_config
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
)
from ._reflector import BookmarkKey, Reflector, ReflectorHooks, ReflectorSettings, ReflectorState
from ._scrub import Scrubber
from ._seam import KubeResponse, KubeTransport
from ._tasks import AccountListCaps, ListCaps
from ._watch_errors import LineTooLong, WatchDecodeError, WatchError
from ._watchline import WatchDecoder, WatchEvent, decode_list_page

__all__ = [
    "AccountConfig",
    "AccountListCaps",
    "AccountWatchStatus",
    "AccountsDiff",
    "AgentError",
    "BookmarkKey",
    "ClouddriverConfig",
    "Config",
    "ConfigError",
    "DiscoveryResult",
    "KindFilter",
    "KindInfo",
    "KubeClosedError",
    "KubeConflictError",
    "KubeConnectionError",
    "KubeCredentialError",
    "KubeError",
    "KubeForbiddenError",
    "KubeGoneError",
    "KubeNotFoundError",
    "KubeResponse",
    "KubeServerError",
    "KubeStatusError",
    "KubeTimeoutError",
    "KubeTooManyRequestsError",
    "KubeTransport",
    "KubeUnauthorizedError",
    "KubeconfigError",
    "KubernetesConfig",
    "LineTooLong",
    "ListCaps",
    "Reflector",
    "ReflectorHooks",
    "ReflectorSettings",
    "ReflectorState",
    "ResumeKey",
    "Scrubber",
    "TargetDiff",
    "WatchDecodeError",
    "WatchDecoder",
    "WatchError",
    "WatchEvent",
    "WatchTarget",
    "decode_list_page",
    "default_config_path",
    "diff_accounts",
    "diff_targets",
    "discover",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_size",
    "run_account",
    "select_targets",
    "watch_config",
]
