"""What the agent accepts as a dynamic account pushed by the server: inline credentials only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml

from agent import AccountConfig, AccountSet, Config, ConfigError


def _kubeconfig(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "c",
            "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }
    )


@pytest.mark.parametrize(
    ("definition", "where"),
    [
        ({"name": "d", "kubeConfigFile": "/etc/passwd"}, "kubeConfigFile"),
        ({"name": "d", "serviceAccount": True}, "serviceAccount"),
        (
            {
                "name": "d",
                "kubeconfigContents": _kubeconfig(
                    {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "sh"}}
                ),
            },
            "users[0].user.exec",
        ),
        (
            {"name": "d", "kubeconfigContents": _kubeconfig({"tokenFile": "/var/run/token"})},
            "users[0].user.tokenFile",
        ),
        (
            {
                "name": "d",
                "kubeconfigContents": _kubeconfig(
                    {"token": "t"}, {"server": "https://x", "certificate-authority": "/ca.crt"}
                ),
            },
            "clusters[0].cluster.certificate-authority",
        ),
    ],
)
async def test_local_credentials_are_refused_with_where(
    definition: dict[str, Any], where: str
) -> None:
    accounts = AccountSet(Config())
    with pytest.raises(ConfigError) as caught:
        await accounts.add_dynamic(definition)
    assert where in str(caught.value)
    assert "d" not in accounts.accounts


async def test_a_file_account_is_never_replaced() -> None:
    config = Config()
    config = replace(
        config,
        kubernetes=replace(
            config.kubernetes, accounts=(AccountConfig(name="file", kube_config_file="/k"),)
        ),
    )
    with pytest.raises(ConfigError, match="defined in the config file"):
        await AccountSet(config).add_dynamic(
            {"name": "file", "kubeconfigContents": _kubeconfig({"token": "t"})}
        )
