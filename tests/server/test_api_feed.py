"""The live change feed over WebSocket (/v1/events), with a trio-websocket client against the
app served by Hypercorn on a real socket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from server import ChangeFeed
from wire import EventRecord, EventType

from .._wait import wait_until
from .test_api_support import ACCOUNT, Harness, k8s, open_api, record


async def receive_json(ws: Any) -> dict[str, Any]:
    message = await ws.get_message()
    assert isinstance(message, str)
    result: dict[str, Any] = json.loads(message)
    return result


async def release_client_socket(ws: Any) -> None:
    """Close the client's TCP stream after the server closed the WebSocket.

    trio-websocket 0.12's client waits for the server's TCP close, reads EOF, and then never
    closes its own socket (its aclose() returns early on a closed WebSocket), which leaks
    the socket (a ResourceWarning, an error under our warning filter).
    """
    await ws._stream.aclose()


async def drain(ws: Any) -> None:
    while True:
        await ws.get_message()


async def ingest(api: Harness, objects: list[dict[str, Any]], account: str = ACCOUNT) -> None:
    """What the ingest path does: commit the batch, then publish it."""
    records = [record(o, account=account) for o in objects]
    await api.store.apply_batch(account, records)
    api.feed.publish(records)


async def test_feed_sends_committed_changes_filtered(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_api(tmp_path, over_socket=True) as api:
            url = f"ws://127.0.0.1:{api.port}/v1/events?account={ACCOUNT}&kind=pod,Service"
            async with open_websocket_url(url) as ws:
                hello = await receive_json(ws)
                assert hello == {
                    "type": "subscribed",
                    "account": [ACCOUNT],
                    "kind": ["pod", "Service"],
                }
                await ingest(api, [k8s("v1", "Pod", "p1", "ns"), k8s("v1", "ConfigMap", "c", "ns")])
                await ingest(api, [k8s("v1", "Pod", "p2", "ns")], account="other")
                await ingest(api, [k8s("v1", "Service", "s1", "ns")])
                first = await receive_json(ws)
                assert first["type"] == "ADDED"
                assert (first["kind"], first["name"], first["namespace"]) == ("Pod", "p1", "ns")
                assert first["object"] == k8s("v1", "Pod", "p1", "ns")
                second = await receive_json(ws)
                assert (second["kind"], second["name"]) == ("Service", "s1")
                deleted = record(k8s("v1", "Pod", "p1", "ns"), type_=EventType.DELETED)
                await api.store.apply_batch(ACCOUNT, [deleted])
                api.feed.publish([deleted])
                gone = await receive_json(ws)
                assert (gone["type"], gone["name"]) == ("DELETED", "p1")
            # the server notices the client left and drops the subscription
            await wait_until(
                lambda: not api.feed.statistics().subscribers, what="the subscription dropped"
            )


async def test_slow_subscriber_gets_resync_and_is_disconnected(tmp_path: Path) -> None:
    feed = ChangeFeed(max_messages=5)
    with trio.fail_after(20):
        async with open_api(tmp_path, over_socket=True, feed=feed) as api:
            async with open_websocket_url(f"ws://127.0.0.1:{api.port}/v1/events") as slow:
                assert (await receive_json(slow))["type"] == "subscribed"
                url = f"ws://127.0.0.1:{api.port}/v1/events?account=none"
                async with open_websocket_url(url) as idle:
                    assert (await receive_json(idle))["type"] == "subscribed"
                    # 50 changes in one committed batch: publish never waits for the readers
                    await ingest(api, [k8s("v1", "Pod", f"p{i}", "ns") for i in range(50)])
                    received: list[dict[str, Any]] = []
                    while not received or received[-1]["type"] != "resync":
                        received.append(await receive_json(slow))
                    with pytest.raises(ConnectionClosed) as closed:
                        await slow.get_message()
                    await release_client_socket(slow)
                    assert len(received) <= 6  # at most the queue's worth, then resync
                    assert closed.value.reason is not None
                    assert closed.value.reason.code == 1013
                    # a subscriber whose filter matched nothing is untouched
                    assert not idle.closed
                    await idle.send_message("still here")
            stats = api.feed.statistics()
            assert stats.lagged_subscribers == 1
            assert stats.published_records == 50


async def test_sync_end_and_swept_objects_are_forwarded(tmp_path: Path) -> None:
    """A relist that no longer has p2: the store sweeps it at SYNC_END, the feed says DELETED."""

    def marker(type_: EventType) -> EventRecord:
        return EventRecord(
            type=int(type_), account=ACCOUNT, api_version="v1", kind="Pod", namespace="",
            name="", uid="", resource_version="9", object=b"", scope="ns",
        )  # fmt: skip

    with trio.fail_after(20):
        async with open_api(tmp_path, over_socket=True) as api:
            await api.add(k8s("v1", "Pod", "p1", "ns"), k8s("v1", "Pod", "p2", "ns"))
            async with open_websocket_url(f"ws://127.0.0.1:{api.port}/v1/events") as ws:
                await receive_json(ws)
                relist = [
                    marker(EventType.SYNC_BEGIN),
                    record(k8s("v1", "Pod", "p1", "ns"), type_=EventType.MODIFIED),
                    marker(EventType.SYNC_END),
                ]
                outcome = await api.store.apply_batch(ACCOUNT, relist)
                api.feed.publish(relist, swept=outcome.swept)
                assert (await receive_json(ws))["name"] == "p1"
                gone = await receive_json(ws)
                assert (gone["type"], gone["name"], gone["object"]) == ("DELETED", "p2", None)
                assert await receive_json(ws) == {
                    "type": "SYNC_END", "account": ACCOUNT, "apiVersion": "v1", "kind": "Pod",
                    "scope": "ns",
                }  # fmt: skip
            r = await api.client.get("/v1/objects", params={"kind": "Pod"})
            assert [i["name"] for i in r.json()["items"]] == ["p1"]


async def test_feed_close_ends_subscriptions(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with (
            open_api(tmp_path, over_socket=True) as api,
            open_websocket_url(f"ws://127.0.0.1:{api.port}/v1/events") as ws,
        ):
            await receive_json(ws)
            api.feed.close()
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            await release_client_socket(ws)
            assert closed.value.reason is not None
            assert closed.value.reason.code == 1001


async def test_a_client_that_stops_reading_is_dropped_without_slowing_ingest(
    tmp_path: Path,
) -> None:
    """A client that reads nothing more: publishing goes on unhindered, and once the client
    lags its subscription ends on the server's side without any help from the client (the
    sender may be blocked in a socket write; the lag watcher interrupts it)."""
    feed = ChangeFeed(max_messages=1000, max_bytes=512 * 1024)
    padding = "x" * 64 * 1024
    with trio.fail_after(60):  # generous: 2 shared cores, ~10 MB through a socket
        async with (
            open_api(tmp_path, over_socket=True, feed=feed) as api,
            open_websocket_url(f"ws://127.0.0.1:{api.port}/v1/events") as ws,
        ):
            assert (await receive_json(ws))["type"] == "subscribed"
            published = 0
            while not feed.statistics().lagged_subscribers:
                assert published < 2000, "the subscriber never lagged"
                obj = k8s("v1", "Pod", f"p{published}", "ns", spec={"pad": padding})
                feed.publish([record(obj)])  # never blocks, whatever the client does
                published += 1
                await trio.sleep(0.001)  # pacing the publisher, as ingest would
            await wait_until(
                lambda: not feed.statistics().subscribers, what="the lagging subscriber dropped"
            )
            # now drain what the sockets held; the connection then ends
            with pytest.raises(ConnectionClosed):
                await drain(ws)
            await release_client_socket(ws)
