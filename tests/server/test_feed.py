"""The change feed fan-out: filters, bounded queues, the lagging-subscriber rule."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import trio
import trio.testing

from server._feed import ChangeFeed, FeedClosed, FeedError, SubscriberLagged, encode_record


@dataclass(frozen=True)
class Record:
    """Structurally a wire.EventRecord (the feed reads records by attribute)."""

    type: int
    account: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = "u"
    resource_version: str = "1"
    object: bytes = b""
    scope: str = ""


def pod(name: str, account: str = "a1", type_: int = 1) -> Record:
    body = json.dumps({"kind": "Pod", "metadata": {"name": name}}).encode()
    return Record(type_, account, "v1", "Pod", "ns", name, object=body)


def test_encode_splices_the_object_bytes() -> None:
    message = encode_record(pod("p1"))
    assert message is not None
    assert json.loads(message) == {
        "type": "ADDED",
        "account": "a1",
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ns",
        "name": "p1",
        "uid": "u",
        "resourceVersion": "1",
        "object": {"kind": "Pod", "metadata": {"name": "p1"}},
    }


def test_encode_markers() -> None:
    assert encode_record(Record(4, "a1", "v1", "Pod", "", "")) is None  # bookmark
    assert encode_record(Record(5, "a1", "v1", "Pod", "", "")) is None  # sync begin
    end = encode_record(Record(6, "a1", "v1", "Pod", "", "", scope="ns"))
    assert end is not None
    assert json.loads(end) == {
        "type": "SYNC_END",
        "account": "a1",
        "apiVersion": "v1",
        "kind": "Pod",
        "scope": "ns",
    }
    deleted = encode_record(Record(3, "a1", "v1", "Pod", "ns", "gone"))
    assert deleted is not None
    assert json.loads(deleted)["object"] is None


async def test_filters_by_account_and_kind() -> None:
    feed = ChangeFeed()
    with (
        feed.subscribe(accounts=["a1"], kinds=["pod"]) as pods_a1,
        feed.subscribe() as everything,
    ):
        deploy = Record(1, "a1", "apps/v1", "Deployment", "ns", "d")
        feed.publish([pod("p1"), pod("p2", account="a2"), deploy])
        with trio.fail_after(1):
            assert json.loads(await pods_a1.receive())["name"] == "p1"
            names = [json.loads(await everything.receive())["name"] for _ in range(3)]
        assert names == ["p1", "p2", "d"]
        with trio.move_on_after(0.01) as scope:
            await pods_a1.receive()
        assert scope.cancelled_caught
    assert feed.statistics().subscribers == 0


async def test_receive_waits_for_publish() -> None:
    feed = ChangeFeed()
    got: list[str] = []
    with feed.subscribe() as sub:
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                got.append(await sub.receive())

            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            feed.publish([pod("p1")])
    assert json.loads(got[0])["name"] == "p1"


async def test_a_subscriber_that_falls_behind_is_told_to_resync() -> None:
    feed = ChangeFeed(max_messages=3)
    with feed.subscribe() as slow, feed.subscribe(max_messages=100) as fast:
        feed.publish([pod(f"p{i}") for i in range(5)])  # never blocks, whatever the readers do
        with trio.fail_after(1):
            with pytest.raises(SubscriberLagged):
                await slow.receive()
            with pytest.raises(SubscriberLagged):  # it stays lagged: the handler disconnects it
                await slow.receive()
            assert [json.loads(await fast.receive())["name"] for _ in range(5)] == [
                f"p{i}" for i in range(5)
            ]
    stats = feed.statistics()
    assert stats.lagged_subscribers == 1
    assert stats.published_records == 5


async def test_byte_bound_also_counts() -> None:
    feed = ChangeFeed(max_messages=1000, max_bytes=300)
    with feed.subscribe() as sub:
        feed.publish([pod(f"p{i}") for i in range(3)])
        with trio.fail_after(1), pytest.raises(SubscriberLagged):
            await sub.receive()


async def test_close_drains_then_ends() -> None:
    feed = ChangeFeed()
    with feed.subscribe() as sub:
        feed.publish([pod("p1")])
        feed.close()
        with trio.fail_after(1):
            assert json.loads(await sub.receive())["name"] == "p1"
            with pytest.raises(FeedClosed):
                await sub.receive()
    with pytest.raises(FeedClosed), feed.subscribe():
        pass


def test_subscriber_limit() -> None:
    feed = ChangeFeed(max_subscribers=1)
    with feed.subscribe(), pytest.raises(FeedError, match="too many"), feed.subscribe():
        pass


async def test_receive_is_cancellable_and_loses_nothing() -> None:
    feed = ChangeFeed()
    with feed.subscribe() as sub:
        with trio.move_on_after(0.01):
            await sub.receive()
        feed.publish([pod("p1")])
        with trio.fail_after(1):
            assert json.loads(await sub.receive())["name"] == "p1"


async def test_swept_objects_become_deletions_before_their_sync_end() -> None:
    @dataclass(frozen=True)
    class Ref:
        account: str
        api_version: str
        kind: str
        namespace: str
        name: str

    feed = ChangeFeed()
    with feed.subscribe() as sub:
        records = [
            Record(5, "a1", "v1", "Pod", "", ""),
            pod("kept"),
            Record(6, "a1", "v1", "Pod", "", "", scope="ns"),
            Record(6, "a1", "v1", "Service", "", ""),
        ]
        swept = [
            Ref("a1", "v1", "Service", "ns", "old-svc"),
            Ref("a1", "v1", "Pod", "ns", "old-pod"),
            Ref("a1", "v1", "ConfigMap", "ns", "orphan"),  # no SYNC_END in this batch: sent last
        ]
        feed.publish(records, swept=swept)
        with trio.fail_after(1):
            got = [json.loads(await sub.receive()) for _ in range(6)]
    assert [(m["type"], m.get("name", m["kind"])) for m in got] == [
        ("ADDED", "kept"),
        ("DELETED", "old-pod"),
        ("SYNC_END", "Pod"),
        ("DELETED", "old-svc"),
        ("SYNC_END", "Service"),
        ("DELETED", "orphan"),
    ]
    assert got[1]["object"] is None


def test_feed_errors_are_server_errors() -> None:
    """One exception tree per package: the feed's errors root under ServerError."""
    from server import ServerError
    from server._feed import FeedClosed, FeedError, SubscriberLagged

    assert issubclass(FeedError, ServerError)
    assert issubclass(FeedClosed, ServerError)
    assert issubclass(SubscriberLagged, ServerError)
