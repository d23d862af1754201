"""Limits on what the agent's files make it read. Deeply nested YAML (found by
tests/test_fuzz_inputs.py) is a ConfigError or KubeconfigError with the line and column, not the
RecursionError PyYAML's composer raised; a file a kubeconfig names is read up to a bound."""

from __future__ import annotations

import pytest

from agent import ConfigError, KubeconfigError
from agent.config._load import parse_config
from agent.config._yaml import MAX_YAML_DEPTH
from agent.kube._kubeconfig import parse_kubeconfig


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def test_a_config_nested_too_deep_is_a_config_error_with_its_place() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(b"kubernetes:\n  accounts: " + nested(5000), source="kubesvc.yaml")
    assert caught.value.file == "kubesvc.yaml"
    assert caught.value.path == f"line 2, column {13 + MAX_YAML_DEPTH - 2}"
    problem = f"invalid YAML: the document nests deeper than {MAX_YAML_DEPTH} levels"
    assert caught.value.problem == problem


def test_a_config_as_deep_as_the_limit_loads() -> None:
    config = parse_config(b"unusedOption: " + nested(MAX_YAML_DEPTH - 1), source="kubesvc.yaml")
    assert config.ignored_options == ("unusedOption",)


def test_a_kubeconfig_nested_too_deep_is_a_kubeconfig_error() -> None:
    with pytest.raises(KubeconfigError, match=f"nests deeper than {MAX_YAML_DEPTH} levels"):
        parse_kubeconfig(b"clusters: " + nested(100_000), source="kubeconfigContents")


def test_a_file_named_in_a_kubeconfig_is_read_up_to_the_limit_only() -> None:
    text = b"""
current-context: main
clusters: [{name: c, cluster: {server: "https://k:6443", certificate-authority: /dev/zero}}]
contexts: [{name: main, context: {cluster: c}}]
"""
    with pytest.raises(KubeconfigError) as caught:
        parse_kubeconfig(text, source="kubeconfigContents")
    assert caught.value.path == "clusters[0].cluster.certificate-authority"
    assert caught.value.problem == "'/dev/zero' is larger than 4194304 bytes"
