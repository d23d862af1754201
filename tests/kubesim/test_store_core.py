"""The sans-I/O core: resourceVersions, bounded history, paging, watch cursors (no network)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import kubesim
from kubesim._selectors import Selector
from kubesim._watch import WatchCursor, WatchOptions


def _cm(name: str, namespace: str = "default", **labels: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {"k": name},
    }


def _lines(chunk: bytes) -> list[dict[str, Any]]:
    return [msgspec.json.decode(line) for line in chunk.splitlines() if line]


def test_one_global_counter_and_server_set_metadata() -> None:
    sim = kubesim.Cluster()
    before = sim.resource_version
    cm = sim.create(_cm("a"))
    dep = sim.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "default"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "a", "image": "a"}]},
                },
            },
        }
    )
    assert int(cm["metadata"]["resourceVersion"]) == before + 1
    assert int(dep["metadata"]["resourceVersion"]) > before + 1
    assert cm["metadata"]["uid"]
    assert cm["metadata"]["creationTimestamp"].endswith("Z")
    assert "generation" not in cm["metadata"]
    assert dep["metadata"]["generation"] == 1
    assert cm["metadata"]["managedFields"][0]["manager"] == "kubesim"


def test_pages_continue_and_expire() -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(continue_ttl=10))
    for i in range(7):
        sim.create(_cm(f"cm-{i}"))
    rtype = sim.resolve("", "v1", "configmaps")
    first = sim.list_page(rtype, namespace="default", limit=3, now=100.0)
    assert [s.name for s in first.items] == ["cm-0", "cm-1", "cm-2"]
    assert first.remaining == 4
    assert first.continue_token
    second = sim.list_page(
        rtype, namespace="default", limit=3, continue_token=first.continue_token, now=105.0
    )
    assert [s.name for s in second.items] == ["cm-3", "cm-4", "cm-5"]
    assert second.resource_version == first.resource_version
    with pytest.raises(kubesim.ApiError) as caught:
        sim.list_page(
            rtype, namespace="default", limit=3, continue_token=second.continue_token, now=111.0
        )
    assert caught.value.code == 410
    assert caught.value.reason == "Expired"


def test_list_resource_version_rules() -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=5))
    sim.create(_cm("a"))
    rtype = sim.resolve("", "v1", "configmaps")
    rv = sim.resource_version
    sim.create(_cm("b"))
    exact = sim.list_page(rtype, resource_version=str(rv), resource_version_match="Exact")
    assert [s.name for s in exact.items] == ["a"]  # the list as it was at rv
    assert exact.resource_version == rv
    for i in range(6):  # the 5-event ring no longer reaches back to rv
        sim.create(_cm(f"x{i}"))
    with pytest.raises(kubesim.ApiError) as gone:
        sim.list_page(rtype, resource_version=str(rv), resource_version_match="Exact")
    assert gone.value.code == 410
    with pytest.raises(kubesim.ApiError) as future:
        sim.list_page(rtype, resource_version=str(sim.resource_version + 100))
    assert future.value.code == 504
    with pytest.raises(kubesim.ApiError) as invalid:
        sim.list_page(rtype, resource_version_match="NotOlderThan")
    assert invalid.value.code == 422


def test_continued_pages_are_a_snapshot_at_the_first_pages_version() -> None:
    sim = kubesim.Cluster()
    for i in range(6):
        sim.create(_cm(f"cm-{i}"))
    rtype = sim.resolve("", "v1", "configmaps")
    first = sim.list_page(rtype, namespace="default", limit=2)
    assert first.remaining == 4
    # Changes after the first page must not show in the next ones.
    sim.delete("", "v1", "configmaps", "default", "cm-3")
    sim.create(_cm("cm-2a"))
    sim.patch("", "v1", "configmaps", "default", "cm-4", {"data": {"k": "changed"}})
    second = sim.list_page(rtype, namespace="default", limit=2, continue_token=first.continue_token)
    assert [s.name for s in second.items] == ["cm-2", "cm-3"]
    assert second.remaining == 2
    third = sim.list_page(rtype, namespace="default", limit=5, continue_token=second.continue_token)
    assert [s.name for s in third.items] == ["cm-4", "cm-5"]
    assert third.items[0].decode()["data"] == {"k": "cm-4"}
    assert third.continue_token is None
    assert third.resource_version == first.resource_version


def test_continue_outliving_the_history_serves_current_objects() -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=3))
    for i in range(4):
        sim.create(_cm(f"cm-{i}"))
    rtype = sim.resolve("", "v1", "configmaps")
    first = sim.list_page(rtype, limit=2)
    for i in range(4):
        sim.patch("", "v1", "configmaps", "default", f"cm-{i}", {"data": {"k": "x"}})
    rest = sim.list_page(rtype, limit=2, continue_token=first.continue_token)
    assert [s.name for s in rest.items] == ["cm-2", "cm-3"]
    assert rest.items[0].decode()["data"] == {"k": "x"}  # no snapshot left: today's version
    assert rest.resource_version == first.resource_version


def test_selectors() -> None:
    sim = kubesim.Cluster()
    sim.create(_cm("a", app="web", tier="front"))
    sim.create(_cm("b", app="db"))
    sim.create(_cm("c", "kube-system", app="web"))

    def names(**selectors: str) -> list[str]:
        return [o["metadata"]["name"] for o in sim.list("", "v1", "configmaps", **selectors)]

    assert names(label_selector="app=web") == ["a", "c"]
    assert names(label_selector="app in (db, x)") == ["b"]
    assert names(label_selector="app,!tier") == ["b", "c"]
    assert names(field_selector="metadata.namespace=kube-system") == ["c"]
    assert names(field_selector="metadata.name!=a", label_selector="app=web") == ["c"]
    with pytest.raises(kubesim.ApiError):
        Selector.parse(None, "spec.nodeName=x")


def test_watch_cursor_replays_then_laps_into_410() -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=4))
    rtype = sim.resolve("", "v1", "configmaps")
    sim.create(_cm("a"))
    start = sim.resource_version
    cursor = WatchCursor(sim, rtype, WatchOptions(resource_version=str(start)))
    assert not cursor.ready
    sim.create(_cm("b"))
    events = _lines(cursor.take(1 << 20))
    assert [e["type"] for e in events] == ["ADDED"]
    for i in range(6):  # laps the 4-slot ring under the cursor
        sim.create(_cm(f"x{i}"))
    error = _lines(cursor.take(1 << 20))
    assert error[0]["type"] == "ERROR"
    assert error[0]["object"]["code"] == 410
    assert cursor.finished
    with pytest.raises(kubesim.ApiError) as too_old:
        WatchCursor(sim, rtype, WatchOptions(resource_version=str(start)))
    assert too_old.value.code == 410


def test_streaming_list_ends_initial_events_with_annotated_bookmark() -> None:
    sim = kubesim.Cluster()
    sim.create(_cm("a"))
    rtype = sim.resolve("", "v1", "configmaps")
    options = WatchOptions(
        send_initial_events=True, resource_version_match="NotOlderThan", allow_bookmarks=True
    )
    cursor = WatchCursor(sim, rtype, options)
    events = _lines(cursor.take(1 << 20))
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    meta = events[1]["object"]["metadata"]
    assert meta["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert meta["resourceVersion"] == str(sim.resource_version)


def test_crd_serves_and_unserves_its_kind() -> None:
    sim = kubesim.Cluster()
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    sim.create(crd)
    sim.create(
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"},
        }
    )
    assert sim.list("example.com", "v1", "widgets")[0]["metadata"]["name"] == "w"
    sim.delete(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", None, "widgets.example.com"
    )
    with pytest.raises(kubesim.ApiError) as gone:
        sim.list("example.com", "v1", "widgets")
    assert gone.value.code == 404


def test_deployment_rollout_and_kubectl_style_rollback() -> None:
    sim = kubesim.Cluster()
    labels = {"app": "web"}
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "web:1"}]},
            },
        },
    }
    sim.create(dep)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "web:2"}]}}}}
    sim.patch(
        "apps",
        "v1",
        "deployments",
        "default",
        "web",
        patch,
        content_type="application/strategic-merge-patch+json",
    )
    sets = {
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: rs
        for rs in sim.list("apps", "v1", "replicasets", "default")
    }
    assert sorted(sets) == ["1", "2"]
    assert sets["2"]["spec"]["replicas"] == 2
    assert sets["1"]["spec"]["replicas"] == 0
    # kubectl rollout undo: copy revision 1's template (minus pod-template-hash) back.
    template = sets["1"]["spec"]["template"]
    del template["metadata"]["labels"]["pod-template-hash"]
    sim.patch(
        "apps",
        "v1",
        "deployments",
        "default",
        "web",
        [{"op": "replace", "path": "/spec/template", "value": template}],
        content_type="application/json-patch+json",
    )
    after = {rs["metadata"]["name"]: rs for rs in sim.list("apps", "v1", "replicasets", "default")}
    old_name = sets["1"]["metadata"]["name"]
    assert after[old_name]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert after[old_name]["spec"]["replicas"] == 2
    status = sim.get("apps", "v1", "deployments", "default", "web")
    assert status["status"]["observedGeneration"] == status["metadata"]["generation"] == 3
    assert status["status"]["updatedReplicas"] == status["status"]["availableReplicas"] == 2
    pods = sim.list("", "v1", "pods", "default")
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Running" for p in pods)
    sim.delete("apps", "v1", "deployments", "default", "web")
    assert sim.list("apps", "v1", "replicasets", "default") == []
    assert sim.list("", "v1", "pods", "default") == []


def test_resource_versions_can_start_anywhere() -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(first_resource_version=1_000_000))
    created = sim.create(_cm("a"))
    assert int(created["metadata"]["resourceVersion"]) > 1_000_000
    with pytest.raises(ValueError, match="first_resource_version"):
        kubesim.Cluster(kubesim.SimConfig(first_resource_version=-1))
