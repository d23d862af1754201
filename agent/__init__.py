"""agent package."""

# -- config, errors (the config/client engineer) -------------------------------------------------
from ._config_load import default_config_path, load_config, parse_config
from ._config_reload import AccountsDiff, diff_accounts, watch_config
from ._config_schema import (
    AccountConfig,
    ClouddriverConfig,
    Config,
    KubernetesConfig,
)
from ._config_values import parse_duration, parse_size
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

__all__ = [
    "AccountConfig",
    "AccountsDiff",
    "AgentError",
    "ClouddriverConfig",
    "Config",
    "ConfigError",
    "KubeClosedError",
    "KubeConflictError",
    "KubeConnectionError",
    "KubeCredentialError",
    "KubeError",
    "KubeForbiddenError",
    "KubeGoneError",
    "KubeNotFoundError",
    "KubeServerError",
    "KubeStatusError",
    "KubeTimeoutError",
    "KubeTooManyRequestsError",
    "KubeUnauthorizedError",
    "KubeconfigError",
    "KubernetesConfig",
    "default_config_path",
    "diff_accounts",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_size",
    "watch_config",
]
