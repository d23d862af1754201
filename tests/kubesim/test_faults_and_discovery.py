"""Injected faults, request counters, the admin endpoint, and discovery."""

from __future__ import annotations

import math
import ssl
from typing import Any

import httpx
import pytest
import trio

import kubesim
from tests._widgets import widget_crd


def _cm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
    }


async def test_429_with_retry_after_then_5xx_then_normal(
    server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        server.faults.fail_next(2, status=429, retry_after=3, resource="configmaps")
        server.faults.fail_next(1, status=503)
        first = await http.get("/api/v1/configmaps")
        assert first.status_code == 429
        assert first.headers["retry-after"] == "3"
        assert first.json()["reason"] == "TooManyRequests"
        assert (await http.get("/api/v1/configmaps")).status_code == 429
        assert (await http.get("/api/v1/pods")).status_code == 503
        assert (await http.get("/api/v1/configmaps")).status_code == 200


async def test_counters_tell_lists_from_watches(
    server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        await http.get("/api/v1/pods")
        await http.get("/api/v1/pods", params={"watch": "true", "timeoutSeconds": "1"})
        await http.get("/apis/apps/v1/deployments")
        assert server.requests.count("list", "pods") == 1
        assert server.requests.count("watch", "pods") == 1
        assert server.requests.count("list", "deployments.apps") == 1
        assert server.requests.count("list") == 2
        remote = (await http.get("/kubesim/requests")).json()
        assert remote["watch pods"] == 1
        await http.delete("/kubesim/requests")
        assert server.requests.count("list") == 0


async def test_counters_tell_a_full_listing_over_a_watch_from_a_resumed_watch(
    server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    """A streaming list (or a watch from resourceVersion 0) sends every object: it is counted
    as a watch and as a ``watchlist``; a watch resumed from a resourceVersion is not."""
    with trio.fail_after(10):
        rv = (await http.get("/api/v1/pods")).json()["metadata"]["resourceVersion"]
        await http.get(
            "/api/v1/pods",
            params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "1"},
        )
        assert server.requests.count("watch", "pods") == 1
        assert server.requests.count("watchlist") == 0
        await http.get(
            "/api/v1/pods",
            params={
                "watch": "true",
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "1",
            },
        )
        await http.get("/api/v1/pods", params={"watch": "true", "timeoutSeconds": "1"})
        assert server.requests.count("watch", "pods") == 3
        assert server.requests.count("watchlist", "pods") == 2


async def test_dropped_watch_is_cut_after_n_events(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        for i in range(5):
            sim.create(_cm(f"cm-{i}"))
        armed = await http.post("/kubesim/faults", json={"drop_watches": {"after_events": 2}})
        assert armed.status_code == 200
        lines: list[str] = []

        async def read_watch() -> None:
            async with http.stream("GET", "/api/v1/configmaps", params={"watch": "true"}) as resp:
                async for line in resp.aiter_lines():
                    if line:
                        lines.append(line)

        with pytest.raises(httpx.RemoteProtocolError):
            await read_watch()
        assert len(lines) == 2
        bad = await http.post("/kubesim/faults", json={"explode": {}})
        assert bad.status_code == 400


async def test_stalled_watch_sends_nothing(
    sim: kubesim.Cluster, server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        sim.create(_cm("a"))
        server.faults.stall_watches(after_events=0, seconds=5)
        got: list[str] = []
        with trio.move_on_after(1):
            async with http.stream(
                "GET",
                "/api/v1/configmaps",
                params={"watch": "true", "resourceVersion": str(sim.resource_version)},
            ) as resp:
                sim.create(_cm("b"))
                async for line in resp.aiter_lines():
                    got.append(line)
        # the first chunk went out before the stall began; nothing after it
        assert len([g for g in got if g]) <= 1


async def test_discovery_documents(sim: kubesim.Cluster, http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        core = (await http.get("/api/v1")).json()
        pods = next(r for r in core["resources"] if r["name"] == "pods")
        assert pods["namespaced"] is True
        assert "watch" in pods["verbs"]
        assert pods["shortNames"] == ["po"]
        assert any(
            r["name"] == "deployments/scale"
            for r in (await http.get("/apis/apps/v1")).json()["resources"]
        )
        groups = (await http.get("/apis")).json()
        assert "apps" in [g["name"] for g in groups["groups"]]
        for version in ("v2", "v2beta1"):
            accept = (
                f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList,"
                "application/json"
            )
            aggregated = await http.get("/apis", headers={"accept": accept})
            assert aggregated.headers["content-type"].startswith(
                f"application/json;g=apidiscovery.k8s.io;v={version}"
            )
            body = aggregated.json()
            assert body["kind"] == "APIGroupDiscoveryList"
            apps = next(i for i in body["items"] if i["metadata"]["name"] == "apps")
            deployments = next(
                r for r in apps["versions"][0]["resources"] if r["resource"] == "deployments"
            )
            assert deployments["scope"] == "Namespaced"
        core_aggregated = (await http.get("/api", headers={"accept": accept})).json()
        assert core_aggregated["items"][0]["metadata"]["name"] == ""
        assert (await http.get("/version")).json()["major"] == "1"
        assert (await http.get("/healthz")).text == "ok"
        assert (await http.get("/apis/nope.example.com/v1")).status_code == 404
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
        created = await http.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd
        )
        assert created.status_code == 201
        listed = (await http.get("/apis/example.com/v1")).json()
        assert [r["name"] for r in listed["resources"]] == ["widgets"]


async def test_drop_after_bytes_stall_and_slow_responses(
    sim: kubesim.Cluster, server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        for i in range(20):
            sim.create(_cm(f"cm-{i}"))
        server.faults.drop_watches(after_bytes=1)  # cut right after the first chunk
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/api/v1/configmaps", params={"watch": "true"})
        server.faults.stall_responses(seconds=0.3, count=1)
        server.faults.slow(0.1)
        start = trio.current_time()
        assert (await http.get("/api/v1/configmaps")).status_code == 200
        stalled = trio.current_time() - start
        start = trio.current_time()
        assert (await http.get("/api/v1/configmaps")).status_code == 200
        slowed = trio.current_time() - start
        assert stalled >= 0.4  # stalled once (0.3 s) and slowed (0.1 s)
        assert slowed >= 0.1  # only slowed (no upper bound: the machine may be busy)
        cleared = await http.delete("/kubesim/faults")
        assert cleared.json() == {"cleared": True}
        assert server.faults.delay == 0


async def test_unknown_paths_and_methods(http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        for path in (
            "/",
            "/openapi/v3/apis/nonsense/v1",
            "/api/v1/nonsense",
            "/api/v1/namespaces/default/pods/a/b/c",
        ):
            answer = await http.get(path)
            assert answer.status_code == 404, path
            assert answer.json()["kind"] == "Status"
        assert (await http.post("/api/v1/namespaces/default/pods/p")).status_code == 405
        assert (await http.post("/apis")).status_code == 405


async def test_dropped_watch_over_http2_cuts_the_connection(sim: kubesim.Cluster) -> None:
    with trio.fail_after(10):
        for i in range(5):
            sim.create(_cm(f"cm-{i}"))
        async with kubesim.open_server(sim, tls=True) as server:
            assert server.ca_pem is not None
            server.faults.drop_watches(after_events=2)
            verify = ssl.create_default_context(cadata=server.ca_pem.decode())
            headers = {"authorization": f"Bearer {server.users['admin'].token}"}
            async with httpx.AsyncClient(
                base_url=server.url, verify=verify, http2=True, headers=headers
            ) as client:
                lines: list[str] = []

                async def read_watch() -> None:
                    params = {"watch": "true"}
                    async with client.stream("GET", "/api/v1/configmaps", params=params) as resp:
                        assert resp.http_version == "HTTP/2"
                        async for line in resp.aiter_lines():
                            lines.append(line)

                with pytest.raises(httpx.RemoteProtocolError):
                    await read_watch()
                assert len([line for line in lines if line]) == 2
                assert (await client.get("/api/v1/configmaps")).status_code == 200  # reconnects


async def test_grants_by_qualified_resource_and_admin_only_endpoints(
    server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        user = server.add_user(
            "deployer", grants={"deployments.apps": ("get", "list"), "pods": ("list",)}
        )
        headers = {"authorization": f"Bearer {user.token}"}
        assert (await http.get("/apis/apps/v1/deployments", headers=headers)).status_code == 200
        assert (await http.get("/api/v1/pods", headers=headers)).status_code == 200
        refused = await http.get("/api/v1/pods", params={"watch": "1"}, headers=headers)
        assert refused.status_code == 403
        assert refused.json()["message"] == (
            'pods is forbidden: User "deployer" cannot watch resource "pods" in API group "" '
            "at the cluster scope"
        )
        assert (await http.get("/apis/apps/v1/replicasets", headers=headers)).status_code == 403
        assert (await http.get("/kubesim/requests", headers=headers)).status_code == 403
        anonymous = await http.get("/version", headers={"authorization": ""})
        assert anonymous.status_code == 401
        wrong = await http.get("/api/v1/pods", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401


async def test_a_cut_resets_open_connections_and_new_ones_until_it_ends(
    server: kubesim.Server,
) -> None:
    token = server.users["admin"].token
    headers = {"authorization": f"Bearer {token}"}
    with trio.fail_after(10):
        async with (
            httpx.AsyncClient(base_url=server.url, headers=headers, timeout=5) as http,
            http.stream("GET", "/api/v1/pods", params={"watch": "1"}) as watch,
        ):
            assert watch.status_code == 200
            assert server.open_connections == 1
            # Until it is ended below: a cut timed in seconds could be over before the second
            # client connects on a busy machine.
            server.cut(math.inf)
            with pytest.raises(httpx.TransportError):
                async for _ in watch.aiter_raw():
                    pass
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=5) as http:
            with pytest.raises(httpx.TransportError):
                await http.get("/api/v1/pods")  # accepted, then reset at once
            server.faults.end_cut()  # the cut is over
            assert (await http.get("/api/v1/pods")).status_code == 200


async def test_grants_change_at_runtime_per_namespace_and_through_the_admin_endpoint(
    server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        user = server.add_user("agent", grants={"*": kubesim.READ_VERBS})
        headers = {"authorization": f"Bearer {user.token}"}
        assert (await http.get("/api/v1/namespaces/b/pods", headers=headers)).status_code == 200
        # A RoleBinding taken away in namespace b only: the token stays the same.
        server.set_grants("agent", {"*": kubesim.READ_VERBS, "b/pods": ()})
        refused = await http.get("/api/v1/namespaces/b/pods", headers=headers)
        assert refused.status_code == 403
        assert refused.json()["message"] == (
            'pods is forbidden: User "agent" cannot list resource "pods" in API group "" '
            'in the namespace "b"'
        )
        assert (await http.get("/api/v1/namespaces/a/pods", headers=headers)).status_code == 200
        assert (await http.get("/api/v1/pods", headers=headers)).status_code == 200
        # The admin endpoint does the same from outside the process (the admin's token).
        revoke = await http.put("/kubesim/users/agent/grants", json={"*": [], "pods": ["list"]})
        assert revoke.status_code == 200
        assert (await http.get("/api/v1/pods", headers=headers)).status_code == 200
        assert (await http.get("/api/v1/configmaps", headers=headers)).status_code == 403
        bad = await http.put("/kubesim/users/agent/grants", json={"pods": ["fly"]})
        assert bad.status_code == 400
        unknown = await http.put("/kubesim/users/nobody/grants", json={})
        assert unknown.status_code == 404


async def test_aggregated_discovery_answers_304_to_its_etag(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    """As kube-apiserver: an ETag on aggregated documents, 304 with no body when matched."""
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    with trio.fail_after(10):
        first = await http.get("/apis", headers={"accept": accept})
        etag = first.headers["etag"]
        assert etag.startswith('"')
        assert etag.endswith('"')
        same = await http.get("/apis", headers={"accept": accept, "if-none-match": etag})
        assert (same.status_code, same.content, same.headers["etag"]) == (304, b"", etag)
        other = await http.get("/apis", headers={"accept": accept, "if-none-match": '"x"'})
        assert other.status_code == 200
        assert other.json()["kind"] == "APIGroupDiscoveryList"
        sim.create(widget_crd())
        changed = await http.get("/apis", headers={"accept": accept, "if-none-match": etag})
        assert changed.status_code == 200
        assert changed.headers["etag"] != etag
