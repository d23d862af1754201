"""Many clusters in one kubesim, each under /clusters/{name} (kubesim._member), over TLS."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import trio

import kubesim
from kubesim._store import EventRing, Stored


def _cm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": name},
    }


def _crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }


@asynccontextmanager
async def _client(server: kubesim.Server, token: str) -> AsyncIterator[httpx.AsyncClient]:
    assert server.ca_pem is not None
    verify = ssl.create_default_context(cadata=server.ca_pem.decode())
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=server.url, verify=verify, http2=True, headers=headers, timeout=10
    ) as client:
        yield client


async def test_each_member_is_its_own_cluster() -> None:
    with trio.fail_after(20):
        root = kubesim.Cluster()
        async with kubesim.open_server(root, tls=True) as server:
            a = server.add_cluster("17", kubesim.Cluster())
            b = server.add_cluster("18", kubesim.Cluster(kubesim.SimConfig(namespaces=("x",))))
            assert a.url == f"{server.url}/clusters/17"
            a.cluster.create(_cm("only-in-17"))
            a.cluster.create(_crd("example.com", "Widget", "widgets"))
            async with _client(server, a.users["admin"].token) as http:
                listed = (await http.get("/clusters/17/api/v1/configmaps")).json()
                assert [i["metadata"]["name"] for i in listed["items"]] == ["only-in-17"]
                # Its own resourceVersion counter: 4 namespaces, a ConfigMap, a CRD.
                assert listed["metadata"]["resourceVersion"] == str(a.cluster.resource_version)
                assert a.cluster.resource_version != b.cluster.resource_version
                # Its own CRDs in its own discovery.
                groups = (await http.get("/clusters/17/apis")).json()
                assert "example.com" in [g["name"] for g in groups["groups"]]
                widgets = await http.get("/clusters/17/apis/example.com/v1/widgets")
                assert widgets.status_code == 200
                version = (await http.get("/clusters/17/version")).json()
                assert version["gitVersion"] == a.cluster.config.version["gitVersion"]
                openapi = (await http.get("/clusters/17/openapi/v3")).json()
                assert "apis/example.com/v1" in openapi["paths"]
                # 17's token is nobody in 18 nor in the server's own cluster.
                assert (await http.get("/clusters/18/api/v1/configmaps")).status_code == 401
                assert (await http.get("/api/v1/configmaps")).status_code == 401
                missing = await http.get("/clusters/19/api/v1/configmaps")
                assert missing.status_code == 404
                assert missing.json()["kind"] == "Status"
            async with _client(server, b.users["admin"].token) as http:
                listed = (await http.get("/clusters/18/api/v1/configmaps")).json()
                assert listed["items"] == []
                names = (await http.get("/clusters/18/api/v1/namespaces")).json()["items"]
                assert [n["metadata"]["name"] for n in names] == ["x"]
                gone = await http.get("/clusters/18/apis/example.com/v1/widgets")
                assert gone.status_code == 404
            # Each member counts its own requests; the server's own cluster saw none.
            assert a.requests.count("list", "configmaps") == 1
            assert b.requests.count("list", "configmaps") == 1
            assert server.requests.count("list", "configmaps") == 0
            # The server's own cluster is served at the root as before.
            async with _client(server, server.users["admin"].token) as http:
                assert (await http.get("/api/v1/configmaps")).status_code == 200


async def test_a_watch_sees_only_its_own_clusters_changes() -> None:
    with trio.fail_after(20):
        async with kubesim.open_server(kubesim.Cluster(), tls=True) as server:
            a = server.add_cluster("a", kubesim.Cluster())
            b = server.add_cluster("b", kubesim.Cluster())
            start = str(a.cluster.resource_version)
            async with _client(server, a.users["admin"].token) as http:
                seen: list[dict[str, Any]] = []
                got_one = trio.Event()

                async def watch() -> None:
                    params = {"watch": "1", "resourceVersion": start}
                    path = "/clusters/a/api/v1/namespaces/default/configmaps"
                    async with http.stream("GET", path, params=params) as response:
                        assert response.status_code == 200
                        async for line in response.aiter_lines():
                            if line:
                                seen.append(msgspec.json.decode(line))
                                got_one.set()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch)
                    b.cluster.create(_cm("in-b"))  # wakes nothing in a
                    a.cluster.create(_cm("in-a"))
                    await got_one.wait()
                    nursery.cancel_scope.cancel()
                assert [e["object"]["metadata"]["name"] for e in seen] == ["in-a"]


async def test_members_added_while_serving_and_removed() -> None:
    with trio.fail_after(20):
        async with kubesim.open_server(kubesim.Cluster(), tls=True) as server:
            member = server.add_cluster("late", kubesim.Cluster())
            async with _client(server, member.users["admin"].token) as http:
                assert (await http.get("/clusters/late/api")).status_code == 200
                server.remove_cluster("late")
                assert (await http.get("/clusters/late/api")).status_code == 404


def test_member_names_are_one_path_segment() -> None:
    server = kubesim.Server(kubesim.Cluster(), kubesim.Users(), False, "127.0.0.1")
    server.add_cluster("one", kubesim.Cluster())
    for bad in ("", "a/b", "one"):
        try:
            server.add_cluster(bad, kubesim.Cluster())
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")


def test_event_ring_grows_as_events_come_then_wraps() -> None:
    # A thousand quiet clusters must not each hold watch_history slots per resource.
    ring = EventRing(3)
    assert ring.next_seq == 0
    assert ring.seq_after(0) == 0
    stored = Stored("", "n", "", 0, {}, b"{}")
    for rv in (5, 6, 7, 8):
        ring.append((rv, 0, stored, None))
    assert ring.first_seq == 1
    assert ring.evicted_rv == 5
    assert [ring.get(seq)[0] for seq in range(ring.first_seq, ring.next_seq)] == [6, 7, 8]
    assert ring.seq_after(6) == 2
    assert ring.seq_after(4) is None
