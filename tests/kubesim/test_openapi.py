"""kubesim's /openapi/v3 and /openapi/v2: what kubectl's client-side apply reads from them."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

import kubesim
from kubesim._openapi_model import KIND_TYPES, TYPES
from kubesim._resources import BUILTIN_TYPES
from kubesim._schema import BUILTIN_KINDS

from .._widgets import widget_crd

STRATEGIC = "application/strategic-merge-patch+json"
WIDGETS = widget_crd()


async def _client(server: kubesim.Server) -> httpx.AsyncClient:
    assert server.ca_pem is not None
    return httpx.AsyncClient(
        base_url=server.url,
        verify=ssl.create_default_context(cadata=server.ca_pem.decode()),
        headers={"authorization": f"Bearer {server.users['admin'].token}"},
        timeout=10,
    )


@pytest.fixture
async def https(sim: kubesim.Cluster) -> AsyncIterator[httpx.AsyncClient]:
    async with kubesim.open_server(sim, tls=True) as server, await _client(server) as client:
        yield client


async def _v3(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    index = (await http.get("/openapi/v3")).json()["paths"]
    answer = await http.get(index[path]["serverRelativeURL"])
    assert answer.status_code == 200
    document: dict[str, Any] = answer.json()
    return document


def _patch_of(document: dict[str, Any], kind: str) -> dict[str, Any]:
    for item in document["paths"].values():
        patch = item.get("patch")
        if patch and patch["x-kubernetes-group-version-kind"]["kind"] == kind:
            found: dict[str, Any] = patch
            return found
    raise AssertionError(f"no PATCH for {kind}")


def _properties(document: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = document["components"]["schemas"][name]["properties"]
    return found


async def test_v3_index_lists_every_served_group_version(https: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        index = (await https.get("/openapi/v3")).json()["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/batch/v1", "apis/autoscaling/v2"} <= set(index)
    assert all("?hash=" in entry["serverRelativeURL"] for entry in index.values())


async def test_builtin_kinds_take_strategic_merge_patch_with_their_merge_keys(
    https: httpx.AsyncClient,
) -> None:
    with trio.fail_after(10):
        apps = await _v3(https, "apis/apps/v1")
        core = await _v3(https, "api/v1")
    patch = _patch_of(apps, "Deployment")
    assert STRATEGIC in patch["requestBody"]["content"]
    # kubectl leaves validation to the server when the parameter is there.
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    deployment = apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"]
    assert deployment["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "version": "v1", "kind": "Deployment"}
    ]
    pod_spec = _properties(apps, "io.k8s.api.core.v1.PodSpec")
    assert pod_spec["containers"]["x-kubernetes-patch-merge-key"] == "name"
    assert pod_spec["containers"]["items"]["allOf"][0]["$ref"] == (
        "#/components/schemas/io.k8s.api.core.v1.Container"
    )
    assert pod_spec["volumes"]["x-kubernetes-patch-strategy"] == "merge,retainKeys"
    assert "x-kubernetes-patch-strategy" not in pod_spec["tolerations"]
    assert pod_spec["tolerations"]["x-kubernetes-list-type"] == "atomic"
    container = _properties(apps, "io.k8s.api.core.v1.Container")
    assert container["ports"]["x-kubernetes-patch-merge-key"] == "containerPort"
    assert container["ports"]["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    assert container["volumeMounts"]["x-kubernetes-patch-merge-key"] == "mountPath"
    strategy = _properties(apps, "io.k8s.api.apps.v1.DeploymentSpec")["strategy"]
    assert strategy["x-kubernetes-patch-strategy"] == "retainKeys"
    meta = _properties(apps, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    assert meta["finalizers"]["x-kubernetes-patch-strategy"] == "merge"
    assert meta["ownerReferences"]["x-kubernetes-patch-merge-key"] == "uid"
    service = _properties(core, "io.k8s.api.core.v1.ServiceSpec")
    assert service["ports"]["x-kubernetes-patch-merge-key"] == "port"
    account = _properties(core, "io.k8s.api.core.v1.ServiceAccount")
    assert account["secrets"]["x-kubernetes-patch-merge-key"] == "name"
    assert "x-kubernetes-patch-strategy" not in account["imagePullSecrets"]


async def test_a_custom_resource_takes_no_strategic_merge_patch(
    sim: kubesim.Cluster, https: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        before = (await https.get("/openapi/v3")).json()["paths"]
        sim.create(WIDGETS)
        after = (await https.get("/openapi/v3")).json()["paths"]
        widgets = await _v3(https, "apis/example.com/v1")
    assert "apis/example.com/v1" not in before
    assert after["api/v1"] == before["api/v1"]  # the hash changes only with the content
    patch = _patch_of(widgets, "Widget")
    assert STRATEGIC not in patch["requestBody"]["content"]
    assert "application/merge-patch+json" in patch["requestBody"]["content"]
    widget = widgets["components"]["schemas"]["com.example.v1.Widget"]
    assert widget["x-kubernetes-preserve-unknown-fields"] is True
    assert widget["properties"]["metadata"]["allOf"][0]["$ref"].endswith("meta.v1.ObjectMeta")


async def test_v2_is_one_json_document_and_protobuf_is_not_acceptable(
    https: httpx.AsyncClient,
) -> None:
    with trio.fail_after(10):
        document = (await https.get("/openapi/v2", headers={"accept": "application/json"})).json()
        protobuf = await https.get(
            "/openapi/v2",
            headers={"accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
        )
    assert document["swagger"] == "2.0"
    pod_spec = document["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]
    assert pod_spec["containers"]["items"] == {"$ref": "#/definitions/io.k8s.api.core.v1.Container"}
    consumes = next(
        item["patch"]["consumes"]
        for item in document["paths"].values()
        if item["patch"]["x-kubernetes-group-version-kind"]["kind"] == "Service"
    )
    assert STRATEGIC in consumes
    assert protobuf.status_code == 406


@pytest.mark.parametrize("published", [(), ("v2",)])
async def test_a_cluster_may_publish_less(published: tuple[str, ...]) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(openapi=published))
    with trio.fail_after(10):
        async with kubesim.open_server(sim, tls=True) as server, await _client(server) as http:
            v3 = await http.get("/openapi/v3")
            v2 = await http.get("/openapi/v2")
    assert v3.status_code == 404
    assert v2.status_code == (200 if "v2" in published else 404)


def test_the_outline_covers_the_builtin_kinds_kubesim_patches_strategically() -> None:
    served = {(t.group, t.kind) for t in BUILTIN_TYPES}
    assert set(KIND_TYPES) == served
    # A document advertises a strategic merge patch only where kubesim applies one.
    assert {kind for _, kind in KIND_TYPES} <= BUILTIN_KINDS
    for fields in TYPES.values():
        for field_type in fields.values():
            named = field_type.removeprefix("[]").removeprefix("{}")
            assert named in TYPES or named in {"string", "integer", "boolean", "number", "object"}
