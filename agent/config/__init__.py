"""The agent's configuration: the option model, loading the file, live reload.

``Config`` is frozen dataclasses with Armory's defaults (``_schema``); ``load_config`` reads
and validates a file, naming the file and the path of a bad value (``_load`` on the typed
YAML readers ``_values`` and ``_yaml``, which kubeconfigs reuse); ``watch_config`` hands over
a changed file and ``diff_accounts`` what to restart (``_reload``). Imports no other part.
"""

from ._load import default_config_path, load_config, parse_config
from ._reload import AccountsDiff, diff_accounts, diff_config, watch_config
from ._schema import (
    AccountConfig,
    AuthConfig,
    ClouddriverConfig,
    Config,
    KubernetesConfig,
    RetriesConfig,
    ServerSideApplyConfig,
    ServerSslConfig,
    ShardConfig,
)
from ._values import Section, describe, parse_duration, parse_size
from ._yaml import BoundedLoader

__all__ = [
    "AccountConfig",
    "AccountsDiff",
    "AuthConfig",
    "BoundedLoader",
    "ClouddriverConfig",
    "Config",
    "KubernetesConfig",
    "RetriesConfig",
    "Section",
    "ServerSideApplyConfig",
    "ServerSslConfig",
    "ShardConfig",
    "default_config_path",
    "describe",
    "diff_accounts",
    "diff_config",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_size",
    "watch_config",
]
