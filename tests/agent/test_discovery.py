"""Discovery documents, the account filters, and the rediscovery diff (sans-I/O)."""

from __future__ import annotations

import json

import pytest

from agent._errors import WatchDecodeError
from agent.config._schema import AccountConfig, CustomResourceDefinition
from agent.watch._discovery import (
    KindFilter,
    KindInfo,
    WatchTarget,
    diff_targets,
    parse_aggregated,
    parse_resource_list,
    select_targets,
)

LW = ["create", "delete", "get", "list", "patch", "update", "watch"]


def resource(
    plural: str,
    kind: str,
    group: str,
    version: str,
    *,
    namespaced: bool = True,
    verbs: list[str] = LW,
) -> dict[str, object]:
    return {
        "resource": plural,
        "responseKind": {"group": group, "version": version, "kind": kind},
        "scope": "Namespaced" if namespaced else "Cluster",
        "verbs": verbs,
        "subresources": [{"subresource": "status", "verbs": ["get"]}],
    }


AGGREGATED = json.dumps(
    {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": [
            {
                "metadata": {"name": "apps"},
                "versions": [
                    {
                        "version": "v1",
                        "resources": [resource("deployments", "Deployment", "apps", "v1")],
                    },
                    {
                        "version": "v1beta1",
                        "resources": [
                            resource("deployments", "Deployment", "apps", "v1beta1"),
                            resource("oldthings", "OldThing", "apps", "v1beta1"),
                        ],
                    },
                ],
            },
            {
                "metadata": {"name": "metrics.k8s.io"},
                "versions": [
                    {
                        "version": "v1beta1",
                        "freshness": "Stale",
                        "resources": [resource("pods", "PodMetrics", "metrics.k8s.io", "v1beta1")],
                    }
                ],
            },
            {
                "metadata": {"name": "authorization.k8s.io"},
                "versions": [
                    {
                        "version": "v1",
                        "resources": [
                            resource(
                                "selfsubjectaccessreviews",
                                "SelfSubjectAccessReview",
                                "authorization.k8s.io",
                                "v1",
                                namespaced=False,
                                verbs=["create"],
                            )
                        ],
                    }
                ],
            },
        ],
    }
).encode()


def test_aggregated_keeps_watchable_resources_from_the_preferred_version() -> None:
    kinds = parse_aggregated(AGGREGATED)
    assert kinds == [
        KindInfo("apps", "v1", "Deployment", "deployments", True),
        KindInfo("apps", "v1beta1", "OldThing", "oldthings", True),
    ]
    assert kinds[0].api_version == "apps/v1"
    assert kinds[0].collection_path("ns1") == "/apis/apps/v1/namespaces/ns1/deployments"


def test_legacy_resource_list_skips_subresources_and_unwatchable() -> None:
    body = json.dumps(
        {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {"name": "pods", "namespaced": True, "kind": "Pod", "verbs": LW},
                {"name": "pods/log", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
                {"name": "bindings", "namespaced": True, "kind": "Binding", "verbs": ["create"]},
                {"name": "nodes", "namespaced": False, "kind": "Node", "verbs": LW},
            ],
        }
    ).encode()
    kinds = parse_resource_list(body, group="", version="v1")
    assert [(k.kind, k.namespaced) for k in kinds] == [("Pod", True), ("Node", False)]
    assert kinds[1].collection_path() == "/api/v1/nodes"


def test_bad_documents_say_where() -> None:
    with pytest.raises(WatchDecodeError, match="discovery of apps/v1"):
        parse_resource_list(b'{"resources": 5}', group="apps", version="v1")


POD = KindInfo("", "v1", "Pod", "pods", True)
NODE = KindInfo("", "v1", "Node", "nodes", False)
DEPLOY = KindInfo("apps", "v1", "Deployment", "deployments", True)
WIDGET = KindInfo("example.com", "v1", "Widget", "widgets", True)
GADGET = KindInfo("example.com", "v1", "Gadget", "gadgets", False)
ALL = [POD, NODE, DEPLOY, WIDGET, GADGET]


def targets(**options: object) -> list[WatchTarget]:
    account = AccountConfig(name="a", **options)  # type: ignore[arg-type]
    return select_targets(ALL, KindFilter.from_account(account))


def test_no_filter_watches_everything_cluster_wide() -> None:
    assert [t.kind for t in targets()] == ALL
    assert all(t.scope == "" for t in targets())


def test_kinds_and_omit_kinds_are_case_insensitive_and_match_crds() -> None:
    assert [t.kind for t in targets(kinds=("POD", "widget"))] == [POD, WIDGET]
    assert [t.kind for t in targets(omit_kinds=("Node", "gadget"))] == [POD, DEPLOY, WIDGET]


def test_namespaces_split_namespaced_kinds_and_keep_cluster_kinds() -> None:
    got = targets(kinds=("pod", "node"), namespaces=("a", "b", "c"), omit_namespaces=("c",))
    assert [(t.kind.kind, t.scope) for t in got] == [("Pod", "a"), ("Pod", "b"), ("Node", "")]
    assert got[0].path == "/api/v1/namespaces/a/pods"


def test_omit_namespaces_ride_along_cluster_wide_watches() -> None:
    got = targets(kinds=("pod",), omit_namespaces=("kube-system",))
    assert got == [WatchTarget(POD, "", frozenset({"kube-system"}))]


def test_only_namespaced_resources_drops_cluster_kinds_but_not_declared_crds() -> None:
    crd = CustomResourceDefinition(kind="Gadget.example.com", scope="Cluster")
    got = targets(
        only_namespaced_resources=True, kinds=("pod",), custom_resource_definitions=(crd,)
    )
    assert [t.kind for t in got] == [POD, GADGET]
    got = targets(
        only_namespaced_resources=True, custom_resource_definitions=(crd,), omit_kinds=("gadget",)
    )
    assert [t.kind for t in got] == [POD, DEPLOY, WIDGET]


def test_diff_starts_new_and_stops_removed_targets() -> None:
    old = [WatchTarget(POD), WatchTarget(WIDGET)]
    new = [WatchTarget(POD), WatchTarget(DEPLOY), WatchTarget(DEPLOY)]
    diff = diff_targets(old, new)
    assert diff.added == (WatchTarget(DEPLOY),)
    assert diff.removed == (WatchTarget(WIDGET),)
    assert diff_targets(new, new).added == ()
