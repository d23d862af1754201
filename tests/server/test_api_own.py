"""kubesvc's own endpoints (object queries, health, metrics, OpenAPI) and error shapes, partly
over a real Hypercorn socket."""

from __future__ import annotations

import re
from pathlib import Path

import trio
from prometheus_client import CollectorRegistry
from starlette.routing import Route, WebSocketRoute

from server.api import ENDPOINTS
from server.api._app import MAX_BODY_BYTES
from server.store import SqliteStore

from .test_api_support import ACCOUNT, k8s, open_api


def pod(name: str, namespace: str, **labels: str) -> dict[str, object]:
    return k8s("v1", "Pod", name, namespace, metadata={"labels": labels})


async def test_object_queries_filter_and_paginate(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await api.add(
                *(
                    pod(f"p{i}", "a" if i % 2 else "b", app="web" if i < 4 else "db")
                    for i in range(6)
                ),
                k8s("v1", "Namespace", "a"),
            )
            await api.add(pod("elsewhere", "a"), account="other")
            r = await api.client.get("/v1/objects", params={"account": ACCOUNT, "kind": "pod"})
            assert r.status_code == 200
            items = r.json()["items"]
            assert len(items) == 6
            assert r.json()["continue"] is None
            first = items[0]
            assert set(first) == {
                "account", "apiVersion", "kind", "namespace", "name", "uid", "resourceVersion",
                "object",
            }  # fmt: skip
            assert first["object"]["metadata"]["name"] == first["name"]
            params = {
                "account": ACCOUNT,
                "kind": "Pod",
                "labelSelector": "app=web",
                "namespace": "a",
            }
            r = await api.client.get("/v1/objects", params=params)
            assert sorted(i["name"] for i in r.json()["items"]) == ["p1", "p3"]
            r = await api.client.get("/v1/objects", params={"namespace": ""})  # cluster-scoped
            assert [i["name"] for i in r.json()["items"]] == ["a"]
            seen: list[str] = []
            token = None
            for _ in range(10):
                query = {"kind": "Pod", "limit": "3"} | ({"continue": token} if token else {})
                page = (await api.client.get("/v1/objects", params=query)).json()
                seen += [f"{i['account']}/{i['name']}" for i in page["items"]]
                token = page["continue"]
                if token is None:
                    break
            assert len(seen) == len(set(seen)) == 7


async def test_object_query_errors(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            for limit in ("0", "x", "10001"):
                r = await api.client.get("/v1/objects", params={"limit": limit})
                assert r.status_code == 400
                assert "limit" in r.json()["message"]
            r = await api.client.get("/v1/objects", params={"labelSelector": "app in web"})
            assert r.status_code == 400
            assert "label selector" in r.json()["message"]
            r = await api.client.get("/v1/objects", params={"continue": "garbage"})
            assert r.status_code == 400


async def test_unknown_routes_and_methods_answer_json(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            r = await api.client.get("/nope")
            assert r.status_code == 404
            assert r.json()["message"] == "no route for GET /nope"
            r = await api.client.put("/health")
            assert r.status_code == 405
            assert "PUT" in r.json()["message"]
            r = await api.client.post(
                "/armory/accounts", content=b"[" + b" " * MAX_BODY_BYTES + b"]"
            )
            assert r.status_code == 413


async def test_health_metrics_and_openapi_over_a_real_socket(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with trio.fail_after(20):
        async with open_api(tmp_path, over_socket=True, registry=registry) as api:
            await api.add(pod("p1", "a"))
            r = await api.client.get("/health")
            assert r.json() == {"status": "UP", "serverId": "srv-1"}
            await api.client.get(f"/credentials/{ACCOUNT}")  # a 404, counted by route template
            for invented in ("BREW", "WHEN"):  # the client's choice: one OTHER series
                await api.client.request(invented, "/health")
            text = (await api.client.get("/metrics")).text
            assert 'method="OTHER",route="/health"' in text
            assert "BREW" not in text
            assert (
                'kubesvc_server_http_requests_total{method="GET",route="/health",status="200"} 1.0'
                in text
            )
            assert 'route="/credentials/{account}",status="404"' in text
            assert "kubesvc_server_cached_objects 1.0" in text
            assert "kubesvc_server_feed_subscribers 0.0" in text
            assert registry.get_sample_value("kubesvc_server_cached_objects") == 1.0
            doc = (await api.client.get("/openapi.json")).json()
            assert doc["openapi"].startswith("3.")
            manifest = doc["paths"]["/manifests/{account}/{location}/{name}"]["get"]
            assert {p["name"] for p in manifest["parameters"]} == {
                "account", "location", "name", "includeEvents",
            }  # fmt: skip


async def test_openapi_documents_every_route_and_nothing_else(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            doc = (await api.client.get("/openapi.json")).json()
            app = api.client._transport.app  # type: ignore[attr-defined]
    routed: set[tuple[str, str]] = set()
    for route in app.routes:
        if isinstance(route, WebSocketRoute):
            routed.add((route.path, "get"))
        else:
            assert isinstance(route, Route)
            routed |= {(route.path, m.lower()) for m in route.methods or () if m != "HEAD"}
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert routed == documented
    assert len(routed) == len(ENDPOINTS)
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert op["summary"], path
            assert op["responses"], path
            path_params = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert path_params == set(re.findall(r"{(\w+)}", path)), path


async def test_a_failed_store_answers_503_with_a_message(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path, standalone=True) as api:
            store = api.store
            assert isinstance(store, SqliteStore)
            await store.aclose()
            r = await api.client.get("/v1/objects")
            assert r.status_code == 503
            assert r.json()["message"].startswith("the cache store failed")
