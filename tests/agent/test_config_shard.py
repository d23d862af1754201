"""``kubernetes.accounts[].shard`` (docs/sharding.md): read, folded into the watch filters the
reflectors use, sent to the server in the account's properties, and refused with the path
and the reason when it is malformed or says what the account already says."""

from __future__ import annotations

import json

import pytest

from agent import ConfigError, parse_config
from agent._accounts import _properties
from agent.config import ShardConfig


def account(**options: object) -> str:
    entry = {"name": "big", "kubeConfigFile": "/kube", **options}
    return json.dumps({"kubernetes": {"accounts": [entry]}})


def test_a_kind_shard_is_folded_into_the_watch_filters_and_sent() -> None:
    config = parse_config(
        account(omitKinds=["Event"], shard={"name": "rest", "omitKinds": ["Pod"]})
    )
    [big] = config.kubernetes.accounts
    assert big.shard == ShardConfig("rest", omit_kinds=("Pod",))
    assert (big.kinds, big.omit_kinds, big.namespaces) == ((), ("Event", "Pod"), ())
    assert not big.only_namespaced_resources
    assert _properties(big)["shard"] == {
        "name": "rest",
        "kinds": (),
        "omit_kinds": ("Pod",),
        "namespaces": (),
    }


def test_a_namespace_shard_watches_no_cluster_scoped_kind() -> None:
    [big] = parse_config(
        account(shard={"name": "team-a", "namespaces": ["a", "b"]})
    ).kubernetes.accounts
    assert big.namespaces == ("a", "b")
    assert big.only_namespaced_resources  # the shard of every namespace lists those


def test_an_account_without_a_shard_is_unchanged() -> None:
    [big] = parse_config(account(kinds=["Pod"])).kubernetes.accounts
    assert big.shard is None
    assert _properties(big)["shard"] is None


@pytest.mark.parametrize(
    ("options", "path", "problem"),
    [
        ({"shard": {"kinds": ["Pod"]}}, "shard.name", "required"),
        ({"shard": {"name": "Pods"}}, "shard.name", "DNS label"),
        ({"shard": {"name": "a/b"}}, "shard.name", "DNS label"),
        (
            {"shard": {"name": "p", "kinds": ["Pod"], "omitKinds": ["Job"]}},
            "shard.omitKinds",
            "not both",
        ),
        ({"shard": {"name": "p", "omitNamespaces": ["a"]}}, "shard.omitNamespaces", "sweep"),
        ({"shard": {"name": "p", "kind": ["Pod"]}}, "shard.kind", "kinds"),
        ({"kinds": ["Pod"], "shard": {"name": "p"}}, "kinds", "in shard:"),
        ({"namespaces": ["a"], "shard": {"name": "p"}}, "namespaces", "in shard:"),
        ({"name": "big/pods"}, "name", "may not contain '/'"),
    ],
)
def test_a_bad_shard_names_the_path_and_the_problem(
    options: dict[str, object], path: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        parse_config(account(**options))
    assert info.value.path == f"kubernetes.accounts[0].{path}"
