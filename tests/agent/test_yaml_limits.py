"""Deeply nested YAML in the agent's files (found by tests/test_fuzz_inputs.py): a ConfigError
or KubeconfigError with the line and column, not the RecursionError PyYAML's composer raised."""

from __future__ import annotations

import pytest

from agent import ConfigError, KubeconfigError
from agent._config_load import parse_config
from agent._kubeconfig import parse_kubeconfig
from agent._yaml import MAX_YAML_DEPTH


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
