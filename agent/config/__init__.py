"""The agent's configuration: the option model, loading and validating the file, live reload.

``Config`` and its parts are frozen dataclasses with Armory's defaults (``_schema``);
``parse_config``/``load_config`` read and validate a file with errors that name the file and
the path inside it (``_load``, on the typed YAML readers of ``_values`` and ``_yaml``, which
the kubeconfig loader reuses); ``watch_config`` polls the file and hands over a changed,
valid Config, and ``diff_accounts`` says which accounts to start, stop or restart
(``_reload``). Imports nothing of the agent but its exception tree.
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
