"""disableManifest / enableManifest descriptions and deploy strategies as Orca and Deck send
them (server/ops/_describe.py)."""

from __future__ import annotations

import pytest

from server.ops import InvalidDescription, normalize
from server.ops._describe import OPERATIONS


def test_orcas_disable_stage_context_becomes_a_target_payload() -> None:
    # What DeployManifestStage appends for an old ReplicaSet, plus Orca's stage noise.
    raw = {
        "account": "k1",
        "app": "shop",
        "cloudProvider": "kubernetes",
        "manifestName": "replicaSet web-v000",
        "location": "default",
        "cluster": "replicaSet web",
        "criteria": None,
        "mode": "static",
    }
    d = normalize("disableManifest", raw)
    assert d.spec.class_name == "KubernetesDisableManifestOperation"
    assert d.spec.phase == "DISABLE_MANIFEST"
    assert d.payload == {
        "account": "k1",
        "namespace": "default",
        "kind": "ReplicaSet",
        "name": "web-v000",
        "manifestName": "replicaSet web-v000",
    }


def test_decks_enable_action_with_load_balancers_and_a_percentage() -> None:
    raw = {
        "credentials": "k1",
        "manifestName": "replicaSet web-v001",
        "location": "default",
        "loadBalancers": ["service front", None],
        "targetPercentage": 100,
        "reason": "rollback",
    }
    d = normalize("ENABLEMANIFEST", raw)
    assert d.spec.name == "enableManifest"
    assert d.spec.class_name == "KubernetesEnableManifestOperation"
    assert d.payload["loadBalancers"] == ["service front"]
    assert "targetPercentage" not in d.payload


def test_a_target_is_required() -> None:
    with pytest.raises(InvalidDescription, match=r"disableManifest\.manifestName"):
        normalize("disableManifest", {"account": "k1", "location": "default"})


@pytest.mark.parametrize(
    ("options", "flat", "expected"),
    [
        ({"strategy": "redblack"}, None, "RED_BLACK"),
        ({"strategy": "RedBlack"}, None, "RED_BLACK"),
        ({"strategy": "bluegreen"}, None, "BLUE_GREEN"),
        ({"strategy": "highlander"}, None, "HIGHLANDER"),
        ({"strategy": "none"}, None, "NONE"),
        ({}, None, "NONE"),
        ({"strategy": "redblack"}, "HIGHLANDER", "HIGHLANDER"),  # Orca's flat enum name wins
        ({}, "BLUE_GREEN", "BLUE_GREEN"),
        ({}, "red-black", "RED_BLACK"),
    ],
)
def test_strategies_as_orca_and_deck_spell_them(
    options: dict[str, str], flat: str | None, expected: str
) -> None:
    raw = {
        "account": "k1",
        "manifests": [{"kind": "ReplicaSet", "metadata": {"name": "web"}}],
        "trafficManagement": {"enabled": True, "options": {**options, "services": ["service f"]}},
        "strategy": flat,
    }
    payload = normalize("deployManifest", raw).payload
    assert payload["strategy"] == expected
    assert payload["services"] == ["service f"]


def test_an_unknown_strategy_names_the_field_and_the_accepted_values() -> None:
    raw = {
        "account": "k1",
        "manifests": [{"kind": "ReplicaSet", "metadata": {"name": "web"}}],
        "trafficManagement": {"enabled": True, "options": {"strategy": "canary"}},
    }
    with pytest.raises(InvalidDescription) as caught:
        normalize("deployManifest", raw)
    assert caught.value.field == "deployManifest.trafficManagement.options.strategy"
    assert "redblack, bluegreen, highlander or none" in str(caught.value)


@pytest.mark.parametrize("enabled", [False, "false", None])
def test_options_of_a_disabled_traffic_block_are_ignored(enabled: object) -> None:
    # Orca adds the flat keys only when enabled: a turned-off block routes no traffic.
    block = {"options": {"services": ["service web"], "strategy": "redblack"}}
    raw = {
        "account": "k1",
        "manifests": [{"kind": "ReplicaSet", "metadata": {"name": "web"}}],
        "trafficManagement": {**block, "enabled": enabled},
    }
    payload = normalize("deployManifest", raw).payload
    assert payload["services"] == []
    assert payload["strategy"] == "NONE"
    assert payload["enableTraffic"] is True
    flat = normalize("deployManifest", {**raw, "services": ["service f"]}).payload
    assert flat["services"] == ["service f"]


def test_both_operations_are_known() -> None:
    assert {"disableManifest", "enableManifest"} <= set(OPERATIONS)
