"""The sans-I/O parts of the operations: three-way patch, manifest preparation, kinds, delete
options. No event loop, no network."""

from __future__ import annotations

from typing import Any

import pytest

from agent import KindInfo
from agent.operations import (
    InvalidOperation,
    Strategy,
    bind,
    deploy_order,
    flatten,
    match_kind,
    next_version,
    three_way_merge_patch,
)
from agent.operations._delete import delete_options, label_selector
from agent.operations._description import Description
from agent.operations._manifests import is_versioned, json_copy, label_moniker


def test_three_way_patch_sets_changes_deletes_what_we_dropped_and_keeps_foreign_fields() -> None:
    original = {"metadata": {"labels": {"a": "1", "gone": "x"}}, "spec": {"replicas": 1}}
    modified = {"metadata": {"labels": {"a": "2"}}, "spec": {"replicas": 1}}
    current = {
        "metadata": {"labels": {"a": "1", "gone": "x", "theirs": "y"}, "uid": "u"},
        "spec": {"replicas": 5, "paused": False},
    }
    assert three_way_merge_patch(original, modified, current) == {
        "metadata": {"labels": {"a": "2", "gone": None}},
        "spec": {"replicas": 1},
    }
    assert three_way_merge_patch(modified, modified, {**modified}) == {}
    assert three_way_merge_patch(None, {"data": {"k": "v"}}, {}) == {"data": {"k": "v"}}


def test_flatten_inlines_lists_and_names_a_bad_entry() -> None:
    listed = {"kind": "List", "items": [{"kind": "ConfigMap"}, None, {"kind": "Service"}]}
    assert [o["kind"] for o in flatten([None, listed, {"kind": "Pod"}])] == [
        "ConfigMap",
        "Service",
        "Pod",
    ]
    with pytest.raises(InvalidOperation, match=r"manifests\[1\]"):
        flatten([{"kind": "Pod"}, {"metadata": {}}])


def test_flatten_copies_so_the_deploy_never_changes_the_description() -> None:
    entry = {"kind": "ConfigMap", "metadata": {"labels": {"a": "1"}}, "data": {"k": ["v", 1.5]}}
    (flat,) = flatten([entry])
    flat["metadata"]["labels"]["b"] = "2"
    flat["data"]["k"].append(None)
    assert entry == {
        "kind": "ConfigMap",
        "metadata": {"labels": {"a": "1"}},
        "data": {"k": ["v", 1.5]},
    }
    # Values a JSON decoder never makes are still copied deeply, not shared.
    odd: dict[str, Any] = {"set": {1, 2}, "tuple": ([1],)}
    copied = json_copy(odd)
    assert copied == odd
    assert copied["set"] is not odd["set"]
    assert copied["tuple"][0] is not odd["tuple"][0]


def test_deploy_order_namespaces_config_services_custom_workloads() -> None:
    kinds = ["Deployment", "Foo", "Service", "Secret", "Namespace", "CustomResourceDefinition"]
    ordered = [o["kind"] for o in deploy_order([{"kind": k} for k in kinds])]
    assert ordered == [
        "Namespace",
        "CustomResourceDefinition",
        "Secret",
        "Service",
        "Foo",
        "Deployment",
    ]


def test_strategy_annotations_and_versioning_rules() -> None:
    obj: dict[str, Any] = {
        "kind": "ReplicaSet",
        "metadata": {
            "name": "x",
            "annotations": {
                "strategy.spinnaker.io/versioned": "false",
                "strategy.spinnaker.io/max-version-history": "2",
                "strategy.spinnaker.io/recreate": "true",
                "traffic.spinnaker.io/load-balancers": '["service web"]',
            },
        },
    }
    strategy = Strategy.of(obj)
    assert strategy.versioned is False
    assert strategy.max_version_history == 2
    assert strategy.recreate
    assert strategy.load_balancers == ("service web",)
    assert not is_versioned("ReplicaSet", strategy, True)
    assert is_versioned("ReplicaSet", Strategy(), None)
    assert is_versioned("Deployment", Strategy(), True)
    assert not is_versioned("Deployment", Strategy(), None)
    bad = {
        "kind": "ReplicaSet",
        "metadata": {
            "name": "x",
            "annotations": {"strategy.spinnaker.io/max-version-history": "lots"},
        },
    }
    with pytest.raises(InvalidOperation, match="max-version-history"):
        Strategy.of(bad)


def test_next_version_counts_only_versions_of_the_same_base() -> None:
    existing = [
        {"metadata": {"name": n}}
        for n in ("web-v000", "web-v007", "web-api-v009", "web", "other-v003")
    ]
    assert next_version(existing, "web") == 8
    assert next_version(existing, "web-api") == 10
    assert next_version([], "web") == 0


def test_moniker_annotations_only_where_absent_and_labels() -> None:
    obj: dict[str, Any] = {
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "annotations": {"moniker.spinnaker.io/application": "mine"},
            "labels": {"app.kubernetes.io/name": "x"},
        },
        "spec": {"template": {"spec": {}}},
    }
    label_moniker(
        obj, {"app": "shop", "cluster": "deployment web"}, sequence=None, skip_template_labels=False
    )
    notes = obj["metadata"]["annotations"]
    assert notes["moniker.spinnaker.io/application"] == "mine"
    assert notes["moniker.spinnaker.io/cluster"] == "deployment web"
    assert obj["metadata"]["labels"] == {
        "app.kubernetes.io/name": "x",
        "app.kubernetes.io/managed-by": "spinnaker",
    }
    assert obj["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "shop"


def test_docker_images_bind_by_name_with_or_without_tag() -> None:
    obj: dict[str, Any] = {
        "kind": "Deployment",
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "i", "image": "reg:5000/init"}],
                    "containers": [
                        {"name": "a", "image": "reg:5000/app:old"},
                        {"name": "b", "image": "other@sha256:abc"},
                    ],
                }
            }
        },
    }
    artifacts = [
        {"type": "docker/image", "name": "reg:5000/app", "reference": "reg:5000/app:2"},
        {"type": "docker/image", "name": "reg:5000/init", "reference": "reg:5000/init:1"},
        {"type": "docker/image", "name": "unused", "reference": "unused:1"},
    ]
    bound = bind(obj, artifacts, namespace="default", account="k1")
    spec = obj["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == "reg:5000/app:2"
    assert spec["initContainers"][0]["image"] == "reg:5000/init:1"
    assert spec["containers"][1]["image"] == "other@sha256:abc"
    assert sorted(a["name"] for a in bound) == ["reg:5000/app", "reg:5000/init"]


def test_kind_tokens_resolve_by_name_alias_group_and_api_version() -> None:
    kinds = [
        KindInfo("", "v1", "Service", "services", True),
        KindInfo("apps", "v1", "Deployment", "deployments", True),
        KindInfo("extensions", "v1beta1", "Deployment", "deployments", True),
        KindInfo("example.com", "v1", "Widget", "widgets", False),
    ]
    assert match_kind(kinds, "deploy") == match_kind(kinds, "Deployment")
    resolved = match_kind(kinds, "deployment")
    assert resolved is not None
    assert resolved.group == "apps"
    old = match_kind(kinds, "Deployment", api_version="extensions/v1beta1")
    assert old is not None
    assert old.group == "extensions"
    widget = match_kind(kinds, "widget.example.com")
    assert widget is not None
    assert widget.object_path("ignored", "w") == "/apis/example.com/v1/widgets/w"
    assert widget.spinnaker_kind == "Widget.example.com"
    assert match_kind(kinds, "svc") is not None
    assert match_kind(kinds, "gizmo") is None
    # One type for discovery and operations: what resolves is discovery's own KindInfo.
    assert type(resolved) is KindInfo
    assert resolved in kinds
    newer = match_kind(kinds, "Deployment", api_version="apps/v2")
    assert newer == KindInfo("apps", "v2", "Deployment", "deployments", True)


def test_kind_paths_ignore_a_namespace_for_cluster_scoped_kinds() -> None:
    nodes = KindInfo("", "v1", "Node", "nodes", False)
    pods = KindInfo("", "v1", "Pod", "pods", True)
    assert nodes.collection_path("ns1") == "/api/v1/nodes"
    assert pods.collection_path("ns1") == "/api/v1/namespaces/ns1/pods"
    assert pods.object_path("ns1", "p", "log") == "/api/v1/namespaces/ns1/pods/p/log"
    assert KindInfo("apps", "v1", "ReplicaSet", "replicasets", True).spinnaker_kind == "replicaSet"


def test_delete_options_and_label_selectors() -> None:
    def options(**fields: object) -> dict[str, object]:
        return delete_options(Description("deleteManifest.options", fields))

    assert options(cascading=True) == {"propagationPolicy": "Background"}
    assert options(cascading="false") == {"propagationPolicy": "Orphan"}
    assert options(cascading="foreground") == {"propagationPolicy": "Foreground"}
    assert options(cascading=True, orphanDependents="true") == {"propagationPolicy": "Orphan"}
    assert options(gracePeriodSeconds="5") == {"gracePeriodSeconds": 5}
    with pytest.raises(InvalidOperation, match="gracePeriodSeconds"):
        options(gracePeriodSeconds="soon")
    selectors = {
        "selectors": [
            {"kind": "EQUALS", "key": "app", "values": ["web"]},
            {"kind": "NOT_CONTAINS", "key": "tier", "values": ["a", "b"]},
            {"kind": "EXISTS", "key": "team"},
        ]
    }
    assert label_selector(selectors, where="x") == "app=web,tier notin (a,b),team"
    assert label_selector("a=b", where="x") == "a=b"
