"""Tolerant parsing of operation descriptions (pure): what Orca posts -> the agent's payload."""

from __future__ import annotations

import pytest

from server._kinds import kubernetes_kind, resolve_kind
from server.ops import (
    InvalidDescription,
    UnknownOperation,
    normalize,
    operation_spec,
    parse_request,
)

DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}


def test_orca_stage_context_extra_keys_strings_and_nulls() -> None:
    raw = {
        "cloudProvider": "kubernetes",
        "app": "shop",
        "user": "anonymous",
        "account": "ignored",
        "credentials": "k1",
        "manifestName": "deploy web",
        "location": "prod",
        "replicas": "3",
        "reason": None,
        "mode": "static",
    }
    d = normalize("scaleManifest", raw)
    assert d.account == "k1"
    assert d.payload == {
        "account": "k1",
        "namespace": "prod",
        "kind": "Deployment",
        "name": "web",
        "manifestName": "deploy web",
        "replicas": 3,
    }


@pytest.mark.parametrize(
    ("token", "kind"),
    [
        ("deployment", "Deployment"),
        ("DEPLOY", "Deployment"),
        ("replicaSet", "ReplicaSet"),
        ("rs", "ReplicaSet"),
        ("svc", "Service"),
        ("statefulset", "StatefulSet"),
        ("configMap", "ConfigMap"),
        ("job", "Job"),
        ("certificate.cert-manager.io", "certificate.cert-manager.io"),
        ("Widget", "Widget"),
    ],
)
def test_kind_tokens(token: str, kind: str) -> None:
    assert kubernetes_kind(token) == kind


def test_scale_missing_replicas_means_zero() -> None:
    d = normalize("scaleManifest", {"account": "k1", "manifestName": "rs web-v000"})
    assert d.payload["replicas"] == 0
    assert d.payload["namespace"] == ""


def test_deploy_flattens_lists_skips_nulls_and_reads_traffic_management() -> None:
    raw = {
        "account": "k1",
        "manifests": [
            None,
            {"kind": "List", "items": [DEPLOYMENT, {"kind": "Service", "metadata": {}}]},
        ],
        "moniker": {"app": "shop", "sequence": "2", "stack": None},
        "enableArtifactBinding": "false",
        "versioned": "true",
        "trafficManagement": {"enabled": True, "options": {"strategy": "red_black"}},
        "namespaceOverride": "prod",
        "requiredArtifacts": [{"type": "docker/image", "name": "web", "reference": "web:2"}],
    }
    p = normalize("deployManifest", raw).payload
    assert [m["kind"] for m in p["manifests"]] == ["Deployment", "Service"]
    assert p["moniker"] == {"app": "shop", "sequence": 2}
    assert p["enableArtifactBinding"] is False
    assert p["versioned"] is True
    assert p["enableTraffic"] is True
    assert p["services"] == []
    assert p["strategy"] == "RED_BLACK"
    assert p["namespaceOverride"] == "prod" == p["namespace"]
    assert p["requiredArtifacts"][0]["reference"] == "web:2"
    assert "optionalArtifacts" not in p
    assert p["source"] == "text"


def test_deploy_uses_the_old_single_manifest_when_manifests_is_empty() -> None:
    p = normalize("deployManifest", {"account": "k1", "manifests": [], "manifest": DEPLOYMENT})
    assert p.payload["manifests"] == [DEPLOYMENT]


def test_delete_options_and_label_selector_form() -> None:
    p = normalize(
        "deleteManifest",
        {
            "account": "k1",
            "location": "prod",
            "kinds": ["rs", "deployment"],
            "labelSelectors": {"selectors": [{"kind": "EQUALS", "key": "app", "values": ["a"]}]},
            "options": {
                "cascading": "false",
                "orphanDependents": "true",
                "gracePeriodSeconds": "5",
            },
        },
    ).payload
    assert p["kinds"] == ["ReplicaSet", "Deployment"]
    assert p["options"] == {"cascading": False, "orphanDependents": True, "gracePeriodSeconds": 5}
    literal = normalize(
        "deleteManifest",
        {"account": "k1", "manifestName": "svc web", "options": {"cascading": "Foreground"}},
    ).payload
    assert literal["options"] == {"cascading": "foreground"}
    assert literal["kind"] == "Service"


def test_patch_strategies() -> None:
    p = normalize(
        "patchManifest",
        {
            "account": "k1",
            "manifestName": "deployment web",
            "patchBody": [{"op": "replace", "path": "/spec/replicas", "value": 2}],
            "options": {"mergeStrategy": "JSON", "record": "false"},
        },
    ).payload
    assert p["options"] == {"mergeStrategy": "json", "record": False}
    with pytest.raises(InvalidDescription) as err:
        normalize("patchManifest", {"account": "k1", "manifestName": "deploy a", "patchBody": []})
    assert err.value.field == "patchManifest.patchBody"


def test_undo_num_revisions_back_wins() -> None:
    raw = {"account": "k1", "manifestName": "deploy a", "revision": "1", "numRevisionsBack": "2"}
    p = normalize("undoRolloutManifest", raw).payload
    assert p["numRevisionsBack"] == 2
    assert "revision" not in p


@pytest.mark.parametrize(
    ("name", "raw", "field"),
    [
        ("scaleManifest", {"manifestName": "deploy a"}, "scaleManifest.account"),
        ("scaleManifest", {"account": "k1", "manifestName": "a"}, "scaleManifest.manifestName"),
        (
            "scaleManifest",
            {"account": "k1", "manifestName": "deploy a", "replicas": "three"},
            "scaleManifest.replicas",
        ),
        ("deployManifest", {"account": "k1", "manifests": []}, "deployManifest.manifests"),
        (
            "deployManifest",
            {"account": "k1", "manifests": [{"x": 1}]},
            "deployManifest.manifests[0].kind",
        ),
        (
            "undoRolloutManifest",
            {"account": "k1", "manifestName": "deploy a"},
            "undoRolloutManifest.revision",
        ),
        ("runJob", {"account": "k1"}, "runJob.manifest"),
        ("pauseRolloutManifest", [], "pauseRolloutManifest"),
    ],
)
def test_invalid_descriptions_name_the_field(name: str, raw: object, field: str) -> None:
    with pytest.raises(InvalidDescription) as err:
        normalize(name, raw)
    assert err.value.field == field
    assert str(err.value).startswith(field)


def test_unknown_operation_and_request_shapes() -> None:
    with pytest.raises(UnknownOperation, match="'launchRocket'"):
        operation_spec("launchRocket")
    assert operation_spec("DEPLOYMANIFEST").name == "deployManifest"
    assert parse_request({"scaleManifest": {}}) == [("scaleManifest", {})]
    assert parse_request([{"a": 1}, {"b": 2}]) == [("a", 1), ("b", 2)]
    for bad in ([], [{"a": 1, "b": 2}], "x", [3]):
        with pytest.raises(InvalidDescription):
            parse_request(bad)


@pytest.mark.parametrize("token", ["netpol", "resourceQuota", "priorityClass", "pdb", "deploy"])
def test_operations_and_reads_share_one_kind_table(token: str) -> None:
    ref = resolve_kind(token)
    assert ref.group is not None, f"{token} is known to the read side"
    assert kubernetes_kind(token) == ref.kind
