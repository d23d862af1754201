"""Each patch type over real HTTP, driven by the official ``kubernetes`` client (in a thread)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio
from kubernetes import client as k8s

from ._official_client import call


async def failure(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the Status body of a call that must fail."""
    with pytest.raises(k8s.ApiException) as info:
        await call(fn, *args, **kwargs)
    body: dict[str, Any] = json.loads(info.value.body or "{}")
    return int(info.value.status), body


def configmap(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "x"}},
        "data": {"a": "1", "b": "2"},
    }


def deployment(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [
                    {"name": "app", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
                    {"name": "sidecar", "image": "envoy:1"},
                ]},
            },
        },
    }  # fmt: skip


async def test_merge_patch(api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    with trio.fail_after(30):
        await call(core.create_namespaced_config_map, "default", configmap("merge"))
        patched = await call(
            core.patch_namespaced_config_map, "merge", "default",
            {"data": {"a": None, "c": "3"}, "metadata": {"labels": {"tier": "db"}}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
        assert patched.data == {"b": "2", "c": "3"}
        assert patched.metadata.labels == {"app": "x", "tier": "db"}


async def test_json_patch_and_a_failed_test_operation(api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    with trio.fail_after(30):
        await call(core.create_namespaced_config_map, "default", configmap("jp"))
        ops = [
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "move", "from": "/data/a", "path": "/data/moved"},
            {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "jp"},
        ]
        patched = await call(core.patch_namespaced_config_map, "jp", "default", ops)
        assert patched.data == {"b": "2", "moved": "1"}
        assert patched.metadata.labels["app.kubernetes.io/name"] == "jp"
        code, status = await failure(
            core.patch_namespaced_config_map, "jp", "default",
            [{"op": "replace", "path": "/data/b", "value": "x"},
             {"op": "test", "path": "/data/b", "value": "2"}],
        )  # fmt: skip
        assert code == 422
        assert status["kind"] == "Status"
        assert "json patch operation 1 (test '/data/b') failed" in status["message"]
        # the failed patch changed nothing
        current = await call(core.read_namespaced_config_map, "jp", "default")
        assert current.data["b"] == "2"


async def test_strategic_merge_patch_merges_containers_by_name(api: k8s.ApiClient) -> None:
    apps = k8s.AppsV1Api(api)
    with trio.fail_after(30):
        await call(apps.create_namespaced_deployment, "default", deployment("smp"))
        patch = {"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "nginx:2", "env": [{"name": "B", "value": "2"}]},
        ]}}}}  # fmt: skip
        # a dict body goes out as application/strategic-merge-patch+json
        patched = await call(apps.patch_namespaced_deployment, "smp", "default", patch)
        containers = patched.spec.template.spec.containers
        assert [(c.name, c.image) for c in containers] == [
            ("app", "nginx:2"),
            ("sidecar", "envoy:1"),
        ]
        assert [(e.name, e.value) for e in containers[0].env] == [("A", "1"), ("B", "2")]
        assert patched.metadata.generation == 2
        deleted = await call(
            apps.patch_namespaced_deployment, "smp", "default",
            {"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "$patch": "delete"}]}}}},
        )  # fmt: skip
        assert [c.name for c in deleted.spec.template.spec.containers] == ["app"]


async def test_undecodable_and_unsupported_patches(http: httpx.AsyncClient) -> None:
    with trio.fail_after(30):
        created = await http.post("/api/v1/namespaces/default/configmaps", json=configmap("bad"))
        assert created.status_code == 201
        path = "/api/v1/namespaces/default/configmaps/bad"
        garbled = await http.patch(
            path, content=b"{not json", headers={"content-type": "application/merge-patch+json"}
        )
        assert garbled.status_code == 400
        assert garbled.json()["reason"] == "BadRequest"
        not_a_list = await http.patch(
            path, content=b'{"op": "add"}', headers={"content-type": "application/json-patch+json"}
        )
        assert not_a_list.status_code == 400
        assert "must be a JSON array of operations" in not_a_list.json()["message"]
        unknown = await http.patch(path, content=b"{}", headers={"content-type": "text/plain"})
        assert unknown.status_code == 415


async def test_custom_resources_take_merge_and_apply_but_not_strategic(
    api: k8s.ApiClient, http: httpx.AsyncClient
) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    custom = k8s.CustomObjectsApi(api)
    args = ("example.com", "v1", "default", "widgets")
    with trio.fail_after(30):
        created = await http.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd
        )
        assert created.status_code == 201
        widget = {"apiVersion": "example.com/v1", "kind": "Widget",
                  "metadata": {"name": "w"}, "spec": {"sizes": [1, 2], "color": "red"}}  # fmt: skip
        await call(custom.create_namespaced_custom_object, *args, widget)
        merged = await call(
            custom.patch_namespaced_custom_object, *args, "w", {"spec": {"sizes": [3]}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
        assert merged["spec"] == {"sizes": [3], "color": "red"}
        code, status = await failure(
            custom.patch_namespaced_custom_object, *args, "w", {"spec": {"color": "blue"}},
            _content_type="application/strategic-merge-patch+json",
        )  # fmt: skip
        assert code == 415
        assert "strategic merge patch is not supported for Widget" in status["message"]
        applied = await call(
            custom.patch_namespaced_custom_object, *args, "w",
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
             "spec": {"sizes": [4, 5]}},
            field_manager="ci", force=True, _content_type="application/apply-patch+yaml",
        )  # fmt: skip
        # lists of custom resources are atomic: the applied list replaces the live one
        assert applied["spec"] == {"sizes": [4, 5], "color": "red"}
