"""Server-side apply over real HTTP with the official ``kubernetes`` client: conflicts, force."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from kubernetes import client as k8s

from ._official_client import call

APPLY = "application/apply-patch+yaml"


def applied(replicas: int, image: str = "nginx:1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
    }


def managers(obj: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m.manager, m.operation): m.fields_v1 for m in obj.metadata.managed_fields}


async def test_apply_creates_then_conflicts_then_force_takes_ownership(api: k8s.ApiClient) -> None:
    apps = k8s.AppsV1Api(api)
    with trio.fail_after(30):
        created = await call(
            apps.patch_namespaced_deployment, "web", "default", applied(2),
            field_manager="ci", _content_type=APPLY,
        )  # fmt: skip
        assert created.spec.replicas == 2
        owned = managers(created)[("ci", "Apply")]
        assert owned["f:spec"]["f:replicas"] == {}
        assert 'k:{"name":"app"}' in owned["f:spec"]["f:template"]["f:spec"]["f:containers"]

        # the same manager re-applying a new value is no conflict
        again = await call(
            apps.patch_namespaced_deployment, "web", "default", applied(3),
            field_manager="ci", _content_type=APPLY,
        )  # fmt: skip
        assert again.spec.replicas == 3

        # another manager applying a different replicas value conflicts: 409 with the real message
        with pytest.raises(k8s.ApiException) as info:
            await call(
                apps.patch_namespaced_deployment, "web", "default", applied(5),
                field_manager="autoscaler", _content_type=APPLY,
            )  # fmt: skip
        assert info.value.status == 409
        status = json.loads(info.value.body or "{}")
        assert status["reason"] == "Conflict"
        assert status["message"] == (
            'Apply failed with 1 conflict: conflict with "ci" using apps/v1: .spec.replicas'
        )
        assert status["details"]["causes"][0]["field"] == ".spec.replicas"
        unchanged = await call(apps.read_namespaced_deployment, "web", "default")
        assert unchanged.spec.replicas == 3

        # with force the field moves to the new manager
        forced = await call(
            apps.patch_namespaced_deployment, "web", "default", applied(5),
            field_manager="autoscaler", force=True, _content_type=APPLY,
        )  # fmt: skip
        assert forced.spec.replicas == 5
        owners = managers(forced)
        assert "f:replicas" not in owners[("ci", "Apply")]["f:spec"]
        assert "f:replicas" in owners[("autoscaler", "Apply")]["f:spec"]


async def test_apply_conflicts_with_an_update_and_names_its_time(api: k8s.ApiClient) -> None:
    apps = k8s.AppsV1Api(api)
    with trio.fail_after(30):
        await call(
            apps.patch_namespaced_deployment, "web", "default", applied(1),
            field_manager="ci", _content_type=APPLY,
        )  # fmt: skip
        # an imperative edit (a strategic merge patch) by another manager takes the image
        edited = await call(
            apps.patch_namespaced_deployment, "web", "default",
            {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:9"}]}}}},
            field_manager="kubectl-edit",
        )  # fmt: skip
        assert ("kubectl-edit", "Update") in managers(edited)
        with pytest.raises(k8s.ApiException) as info:
            await call(
                apps.patch_namespaced_deployment, "web", "default", applied(1, image="nginx:2"),
                field_manager="ci", _content_type=APPLY,
            )  # fmt: skip
        assert info.value.status == 409
        message = json.loads(info.value.body or "{}")["message"]
        assert message.startswith(
            'Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1 at '
        )
        assert message.endswith(': .spec.template.spec.containers[name="app"].image')


async def test_fields_dropped_from_the_configuration_are_removed(api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    with trio.fail_after(30):
        first = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "cfg", "labels": {"a": "1", "b": "2"}},
                 "data": {"x": "1", "y": "2"}}  # fmt: skip
        await call(core.patch_namespaced_config_map, "cfg", "default", first,
                   field_manager="ci", _content_type=APPLY)  # fmt: skip
        second = {**first, "metadata": {"name": "cfg", "labels": {"a": "1"}}, "data": {"x": "1"}}
        result = await call(core.patch_namespaced_config_map, "cfg", "default", second,
                            field_manager="ci", _content_type=APPLY)  # fmt: skip
        assert result.data == {"x": "1"}
        assert result.metadata.labels == {"a": "1"}


async def test_apply_takes_yaml_as_kubectl_sends_it(http: httpx.AsyncClient) -> None:
    manifest = b"""\
apiVersion: v1
kind: ConfigMap
metadata:
  name: from-yaml
  labels:
    app: demo
data:
  greeting: hello
  count: "3"
"""
    path = "/api/v1/namespaces/default/configmaps/from-yaml"
    headers = {"content-type": "application/apply-patch+yaml"}
    with trio.fail_after(30):
        created = await http.patch(path, content=manifest, headers=headers,
                                   params={"fieldManager": "kubectl"})  # fmt: skip
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["data"] == {"greeting": "hello", "count": "3"}
        (entry,) = body["metadata"]["managedFields"]
        assert entry["manager"] == "kubectl"
        assert entry["operation"] == "Apply"
        assert entry["fieldsV1"]["f:data"] == {"f:count": {}, "f:greeting": {}}
        garbled = await http.patch(path, content=b"data: [unclosed", headers=headers,
                                   params={"fieldManager": "kubectl"})  # fmt: skip
        assert garbled.status_code == 400
        assert garbled.json()["reason"] == "BadRequest"
