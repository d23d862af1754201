"""Lists and watches over real HTTP (httpx on loopback), with the API server's semantics."""

from __future__ import annotations

import ssl
from dataclasses import replace
from typing import Any

import httpx
import msgspec
import trio

import kubesim

META_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
META = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "data": {"k": name},
    }


async def _watch(
    http: httpx.AsyncClient,
    path: str,
    params: dict[str, str],
    *,
    headers: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every event of a watch that the server ends (timeoutSeconds): reading to the end
    keeps httpx's stream generators from being abandoned half-way."""
    events: list[dict[str, Any]] = []
    async with http.stream(
        "GET", path, params={"watch": "true", **params}, headers=headers
    ) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if line:
                events.append(msgspec.json.decode(line))
    return events


async def test_paged_list_and_expired_continue(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        for i in range(5):
            sim.create(_cm(f"cm-{i}"))
        first = (
            await http.get("/api/v1/namespaces/default/configmaps", params={"limit": 2})
        ).json()
        assert first["kind"] == "ConfigMapList"
        assert len(first["items"]) == 2
        assert first["metadata"]["remainingItemCount"] == 3
        token = first["metadata"]["continue"]
        second = (
            await http.get(
                "/api/v1/namespaces/default/configmaps", params={"limit": 2, "continue": token}
            )
        ).json()
        assert [o["metadata"]["name"] for o in second["items"]] == ["cm-2", "cm-3"]
        await trio.sleep(0.6)  # time must pass, not an event: the fixture's continue_ttl is 0.5 s
        expired = await http.get(
            "/api/v1/namespaces/default/configmaps",
            params={"limit": 2, "continue": second["metadata"]["continue"]},
        )
        assert expired.status_code == 410
        assert expired.json()["reason"] == "Expired"
        assert expired.json()["kind"] == "Status"


async def test_metadata_only_secrets_carry_no_data(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s", "namespace": "default"},
                "data": {"password": "aHVudGVyMg=="},
            }
        )
        listed = await http.get(
            "/api/v1/secrets", headers={"accept": META_LIST + ", application/json"}
        )
        assert listed.headers["content-type"] == META_LIST
        body = listed.json()
        assert body["kind"] == "PartialObjectMetadataList"
        assert body["items"][0]["kind"] == "PartialObjectMetadata"
        assert "data" not in body["items"][0]
        assert b"aHVudGVyMg" not in listed.content
        one = await http.get("/api/v1/namespaces/default/secrets/s", headers={"accept": META})
        assert one.json()["metadata"]["name"] == "s"
        assert b"aHVudGVyMg" not in one.content
        events = await _watch(
            http, "/api/v1/secrets", {"timeoutSeconds": "1"}, headers={"accept": META}
        )
        assert events[0]["object"]["kind"] == "PartialObjectMetadata"
        assert "data" not in events[0]["object"]
        refused = await http.get(
            "/api/v1/secrets", headers={"accept": "application/vnd.kubernetes.protobuf"}
        )
        assert refused.status_code == 406


async def test_watch_from_each_kind_of_resource_version(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        sim.create(_cm("a"))
        rv = sim.resource_version
        sim.create(_cm("b"))
        path = "/api/v1/namespaces/default/configmaps"
        unset = await _watch(http, path, {"timeoutSeconds": "1"})
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in unset] == [
            ("ADDED", "a"),
            ("ADDED", "b"),
        ]
        zero = await _watch(http, path, {"resourceVersion": "0", "timeoutSeconds": "1"})
        assert len(zero) == 2
        given = await _watch(http, path, {"resourceVersion": str(rv), "timeoutSeconds": "1"})
        assert [e["object"]["metadata"]["name"] for e in given] == [
            "b"
        ]  # only later events, then timeout


async def test_live_events_selector_and_timeout(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        rv = sim.resource_version
        got: list[dict[str, Any]] = []

        async def watcher() -> None:
            got.extend(
                await _watch(
                    http,
                    "/api/v1/configmaps",
                    {"resourceVersion": str(rv), "labelSelector": "app=web", "timeoutSeconds": "1"},
                )
            )

        async with trio.open_nursery() as nursery:
            # The watch starts at rv: it gets these events whether it opens before or after.
            nursery.start_soon(watcher)
            sim.create(_cm("web", app="web"))
            sim.create(_cm("db", app="db"))
            sim.patch("", "v1", "configmaps", "default", "web", {"data": {"k": "2"}})
            sim.delete("", "v1", "configmaps", "default", "web")
        assert [e["type"] for e in got] == ["ADDED", "MODIFIED", "DELETED"]
        deleted_rv = int(got[-1]["object"]["metadata"]["resourceVersion"])
        assert deleted_rv == sim.resource_version


async def test_410_at_start_and_as_error_event(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        sim.create(_cm("first"))
        old = sim.resource_version
        for i in range(60):  # the fixture keeps 50 events of history
            sim.create(_cm(f"n{i}"))
        refused = await http.get(
            "/api/v1/configmaps", params={"watch": "true", "resourceVersion": str(old - 1)}
        )
        assert refused.status_code == 410
        assert refused.json()["reason"] == "Expired"
        # An open watch that falls behind the ring gets the ERROR event: stall it, then write.
        start = sim.resource_version
        server_faults: list[dict[str, Any]] = []
        async with http.stream(
            "GET", "/api/v1/configmaps", params={"watch": "true", "resourceVersion": str(start)}
        ) as resp:
            assert resp.status_code == 200
            for i in range(60):
                sim.create(_cm(f"m{i}"))
            async for line in resp.aiter_lines():
                if line:
                    server_faults.append(msgspec.json.decode(line))
        assert server_faults[-1]["type"] == "ERROR"
        assert server_faults[-1]["object"]["code"] == 410


async def test_bookmarks_and_streaming_list(sim: kubesim.Cluster, http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        sim.create(_cm("a"))
        events = await _watch(
            http,
            "/api/v1/configmaps",
            {
                "resourceVersion": str(sim.resource_version),
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "1",
            },
        )
        bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
        assert len(bookmarks) >= 2  # interval 0.2 s over 1 s
        assert bookmarks[0]["object"]["metadata"]["resourceVersion"] == str(sim.resource_version)
        stream = await _watch(
            http,
            "/api/v1/configmaps",
            {
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "1",
            },
        )
        assert [e["type"] for e in stream][:2] == ["ADDED", "BOOKMARK"]  # then periodic bookmarks
        annotations = stream[1]["object"]["metadata"]["annotations"]
        assert annotations == {"k8s.io/initial-events-end": "true"}


async def test_a_streaming_list_is_refused_with_the_watch_list_feature_off(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        sim.config = replace(sim.config, watch_list=False)  # as after a restart
        sim.create(_cm("a"))
        params = {
            "watch": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
        }
        answer = await http.get("/api/v1/configmaps", params=params)
        assert answer.status_code == 422
        status = answer.json()
        assert status["reason"] == "Invalid"
        assert "WatchList feature gate" in status["message"]
        # Lists and plain watches are served as before.
        listed = (await http.get("/api/v1/configmaps")).json()
        assert [i["metadata"]["name"] for i in listed["items"]] == ["a"]


async def test_two_watchers_and_a_writer_agree_with_a_fresh_list(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(20):
        for i in range(10):
            sim.create(_cm(f"seed-{i}"))
        listed = (await http.get("/api/v1/configmaps", params={"limit": 4})).json()
        list_rv = listed["metadata"]["resourceVersion"]
        states: list[dict[str, str]] = [{}, {}]

        async def replay(state: dict[str, str], params: dict[str, str]) -> None:
            for event in await _watch(
                http, "/api/v1/configmaps", {"timeoutSeconds": "2", **params}
            ):
                meta = event["object"]["metadata"]
                key = f"{meta['namespace']}/{meta['name']}"
                if event["type"] == "DELETED":
                    state.pop(key, None)
                else:
                    state[key] = meta["resourceVersion"]

        async def writer() -> None:
            for step in range(40):
                name = f"w-{step % 7}"
                try:
                    sim.create(_cm(name))
                except kubesim.ApiError:
                    if step % 3:
                        sim.patch(
                            "", "v1", "configmaps", "default", name, {"data": {"k": str(step)}}
                        )
                    else:
                        sim.delete("", "v1", "configmaps", "default", name)
                await trio.sleep(0.005)  # pacing: live events interleave with the replays
            sim.create(_cm("the-end"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(replay, states[0], {})  # rv unset: synthetic ADDED, then live
            nursery.start_soon(replay, states[1], {"resourceVersion": "1"})  # from the very start
            nursery.start_soon(writer)
        fresh = (await http.get("/api/v1/configmaps")).json()
        expected = {
            f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"][
                "resourceVersion"
            ]
            for o in fresh["items"]
        }
        assert states[0] == expected
        assert states[1] == expected
        assert int(list_rv) < int(fresh["metadata"]["resourceVersion"])


async def test_http2_watches_share_one_connection(sim: kubesim.Cluster) -> None:
    """Two big watches and a list multiplexed on one HTTP/2 connection (batched DATA frames)."""
    with trio.fail_after(30):
        kubesim.load_pods(sim, 300, namespaces=2)
        async with kubesim.open_server(sim, tls=True) as server:
            assert server.ca_pem is not None
            verify = ssl.create_default_context(cadata=server.ca_pem.decode())
            headers = {"authorization": f"Bearer {server.users['admin'].token}"}
            async with httpx.AsyncClient(
                base_url=server.url, verify=verify, http2=True, headers=headers
            ) as client:
                counts: dict[str, int] = {}

                async def watch(namespace: str) -> None:
                    events = await _watch(
                        client, f"/api/v1/namespaces/{namespace}/pods", {"timeoutSeconds": "2"}
                    )
                    counts[namespace] = len(events)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch, "load-0")
                    nursery.start_soon(watch, "load-1")
                    listed = await client.get("/api/v1/pods")
                assert listed.http_version == "HTTP/2"
                assert len(listed.json()["items"]) == 300
                assert counts == {"load-0": 150, "load-1": 150}


async def test_a_watcher_that_stops_reading_gets_410_not_a_growing_buffer(
    sim: kubesim.Cluster, server: kubesim.Server
) -> None:
    """TCP backpressure stops the server's sends; the ring moves on; the watcher's next
    chunk is the 410 ERROR event. Nothing between the ring and the socket grows."""
    with trio.fail_after(30):
        start = sim.resource_version
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        token = server.users["admin"].token
        request = (
            f"GET /api/v1/pods?watch=true&resourceVersion={start} HTTP/1.1\r\n"
            f"Host: kubesim\r\nAuthorization: Bearer {token}\r\n\r\n"
        )
        await stream.send_all(request.encode())
        # The watch is open (its headers are here) before the ring moves past ``start``, so
        # the 410 comes as the ERROR event, not as the answer.
        received = bytearray()
        while b"\r\n\r\n" not in received:
            data = await stream.receive_some(1 << 20)
            assert data, "the server closed the connection before answering"
            received += data
        assert received.startswith(b"HTTP/1.1 200"), bytes(received)
        for _ in range(10):  # ~9 MB of pods against a 50-event ring: far past any socket buffer
            kubesim.load_pods(sim, 200)
            await trio.sleep(0.05)  # pacing: the server sends until the socket pushes back
        while b'"type":"ERROR"' not in received:
            data = await stream.receive_some(1 << 20)
            assert data, "the server closed the watch without the ERROR event"
            received += data
        await stream.aclose()
        assert b'"code":410' in received
        assert received.count(b'"type":"ADDED"') < 2000  # it did not get everything
