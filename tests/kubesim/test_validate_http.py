"""Invalid bodies over real HTTP: 400 when they cannot be decoded, 422 saying what is wrong."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio
from kubernetes import client as k8s


async def failure(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the Status body of a client call that must fail (run in a thread)."""
    with pytest.raises(k8s.ApiException) as info:
        await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))
    body: dict[str, Any] = json.loads(info.value.body or "{}")
    return int(info.value.status), body


def deployment(name: str, template_app: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": template_app}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        },
    }


async def test_selector_mismatch_is_422_in_the_apiservers_words(api: k8s.ApiClient) -> None:
    apps = k8s.AppsV1Api(api)
    with trio.fail_after(30):
        code, status = await failure(
            apps.create_namespaced_deployment, "default", deployment("web", "other")
        )
    assert code == 422
    assert status["reason"] == "Invalid"
    assert status["message"] == (
        'Deployment.apps "web" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"other"}: `selector` does not match template `labels`'
    )
    assert status["details"]["causes"][0]["field"] == "spec.template.metadata.labels"


async def test_a_patch_that_breaks_the_object_is_422(api: k8s.ApiClient) -> None:
    apps = k8s.AppsV1Api(api)
    with trio.fail_after(30):
        create: Callable[..., Any] = apps.create_namespaced_deployment
        await trio.to_thread.run_sync(lambda: create("default", deployment("ok", "ok")))
        code, status = await failure(
            apps.patch_namespaced_deployment, "ok", "default", {"spec": {"replicas": -1}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
    assert code == 422
    assert (
        "spec.replicas: Invalid value: -1: must be greater than or equal to 0"
        in (status["message"])
    )


async def test_bad_names_and_labels_are_422(api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    with trio.fail_after(30):
        code, status = await failure(
            core.create_namespaced_config_map, "default",
            {"metadata": {"name": "Not_Valid", "labels": {"tier": "x" * 64}}, "data": {"k": "v"}},
        )  # fmt: skip
    assert code == 422
    assert status["message"].startswith('ConfigMap "Not_Valid" is invalid: [metadata.name: ')
    assert {c["field"] for c in status["details"]["causes"]} == {"metadata.name", "metadata.labels"}


async def test_bodies_that_are_not_objects_are_400(http: httpx.AsyncClient) -> None:
    with trio.fail_after(30):
        path = "/api/v1/namespaces/default/configmaps"
        for body in (b"[1, 2]", b'"text"', b"{not json"):
            answer = await http.post(
                path, content=body, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 400, answer.text
            assert answer.json()["reason"] == "BadRequest"
            assert answer.json()["message"]
        wrong_kind = await http.post(path, json={"apiVersion": "v1", "kind": "Secret",
                                                 "metadata": {"name": "x"}})  # fmt: skip
        assert wrong_kind.status_code == 400
        assert "does not match the expected" in wrong_kind.json()["message"]
        bad_secret = await http.post(
            "/api/v1/namespaces/default/secrets",
            json={"metadata": {"name": "s"}, "data": {"password": "not base64!"}},
        )
        assert bad_secret.status_code == 400
        assert "illegal base64 data at input byte 3" in bad_secret.json()["message"]
