"""Read-your-writes: the watermarks (offline) and GET /manifests waiting on them (the REST app
over a real SQLite store and change feed, the ingest path played by apply_batch + publish)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from server._freshness import Freshness, object_key
from wire import EventType

from .test_api_support import ACCOUNT, Harness, k8s, open_api, record

KEY = object_key(ACCOUNT, "apps", "Deployment", "prod", "web")
PATH = f"/manifests/{ACCOUNT}/prod/deployment%20web"


def web(rv: str, replicas: int = 1) -> dict[str, Any]:
    return k8s(
        "apps/v1", "Deployment", "web", "prod",
        metadata={"resourceVersion": rv}, spec={"replicas": replicas},
    )  # fmt: skip


class _Stored:
    def __init__(self, rv: str, uid: str = "uid-Deployment-web") -> None:
        self.resource_version = rv
        self.uid = uid


def test_watermarks_offline() -> None:
    f = Freshness()
    f.expect([record(web("7"), type_=EventType.MODIFIED)])
    assert len(f) == 1
    assert not f.caught_up(KEY, _Stored("5"))
    assert f.watermark(KEY) == "7"
    f.observed([record(web("6"), type_=EventType.MODIFIED)])
    assert len(f) == 1  # older than the write: still waiting
    f.observed([record(web("9"), type_=EventType.MODIFIED)])
    assert len(f) == 0
    assert f.caught_up(KEY, _Stored("5"))  # no watermark: nothing to wait for
    f.expect([record(web("7"), type_=EventType.DELETED)])
    assert not f.caught_up(KEY, _Stored("7"))
    assert f.caught_up(KEY, None)
    # A read that found the cache caught up leaves the watermark: a relist begun before the
    # deletion could still put the object back; only the watch's DELETED clears it.
    assert len(f) == 1
    assert not f.caught_up(KEY, _Stored("7"))
    f.observed([record(web("7"), type_=EventType.DELETED)])
    assert len(f) == 0
    f.expect([record(web("x1"), type_=EventType.MODIFIED)])  # not ordered: never waits
    assert len(f) == 0


def test_a_late_deletion_of_an_earlier_object_keeps_the_watermark() -> None:
    # An operation deleted the Job and ran it again (written at 7); the watch's DELETED of the
    # earlier object (at 5) does not remove the new one from the store, nor clear the mark.
    f = Freshness()
    f.expect([record(web("7"), type_=EventType.ADDED)])
    f.observed([record(web("5"), type_=EventType.DELETED)])
    assert f.watermark(KEY) == "7"
    f.observed([record(web("9"), type_=EventType.DELETED)])  # deleted after the write
    assert len(f) == 0


def test_a_deletion_is_honoured_by_an_object_created_again_under_its_name() -> None:
    """Deck deleted pod web-0 and its StatefulSet made a new one: the watch's DELETED came
    before the operation's result, so nothing after it is a deletion; the new object (another
    uid) honours the deletion, stored or arriving, and reads do not stall (found in review)."""
    f = Freshness()
    f.expect([record(web("7"), type_=EventType.DELETED)])  # uid-Deployment-web went
    assert not f.caught_up(KEY, _Stored("9"))  # the deleted object itself, still cached
    assert f.caught_up(KEY, _Stored("12", uid="uid-new"))  # a later object of the name
    assert len(f) == 1  # a read leaves the watermark
    again = web("12")
    again["metadata"]["uid"] = "uid-new"
    f.observed([record(again, type_=EventType.MODIFIED)])  # the old object's late MODIFIED
    assert len(f) == 0
    # Without the uid (an agent that does not say it) any cached object holds the read back.
    unsaid = web("7")
    unsaid["metadata"]["uid"] = ""
    f.expect([record(unsaid, type_=EventType.DELETED)])
    assert not f.caught_up(KEY, _Stored("12", uid="uid-new"))
    assert f.caught_up(KEY, None)


async def test_a_watermark_past_its_ttl_stops_holding_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    f = Freshness(ttl_seconds=300.0)
    f.expect([record(web("7"), type_=EventType.MODIFIED)])
    assert not f.caught_up(KEY, _Stored("5"))
    await trio.sleep(301)
    assert f.caught_up(KEY, _Stored("5"))  # a kind not watched: its watch never reports it
    assert len(f) == 0


def test_listings_find_the_watermarks_of_their_scope() -> None:
    f = Freshness()
    f.expect([record(web("7"), type_=EventType.MODIFIED)])
    other = web("8")
    other["metadata"]["namespace"] = "dev"
    f.expect([record(other, type_=EventType.MODIFIED)])
    assert f.pending(ACCOUNT, "apps", "deployment", "prod") == [KEY]
    assert f.pending(ACCOUNT, None, "Deployment", "prod") == [KEY]  # any group
    assert f.pending(ACCOUNT, "", "Deployment", "prod") == []
    assert f.pending("other", "apps", "Deployment", "prod") == []
    f.observed([record(web("7"), type_=EventType.MODIFIED)])
    assert f.pending(ACCOUNT, "apps", "Deployment", "prod") == []
    assert len(f.pending(ACCOUNT, "apps", "Deployment", "dev")) == 1


def test_watermarks_are_bounded() -> None:
    f = Freshness(max_entries=2)
    for name in ("a", "b", "c"):
        obj = web("3")
        obj["metadata"]["name"] = name
        f.expect([record(obj, type_=EventType.MODIFIED)])
    assert len(f) == 2
    assert f.watermark(object_key(ACCOUNT, "apps", "Deployment", "prod", "a")) == ""


async def ingest(api: Harness, obj: dict[str, Any], type_: EventType) -> None:
    records = [record(obj, type_=type_)]
    await api.store.apply_batch(ACCOUNT, records)
    api.feed.publish(records)


async def test_a_read_behind_the_last_write_waits_for_the_watch(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_api(tmp_path, standalone=True) as api:
            await api.account()
            await ingest(api, web("5"), EventType.ADDED)
            # The operation wrote resourceVersion 7 (the ops service's expect), and a late
            # watch event put version 5 back in the cache.
            api.feed.freshness.expect([record(web("7", 3), type_=EventType.MODIFIED)])
            answers: list[Any] = []

            async def read() -> None:
                answers.append(await api.client.get(PATH))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await trio.testing.wait_all_tasks_blocked()
                assert answers == []  # parked on the watermark, not answering version 5
                await ingest(api, web("7", 3), EventType.MODIFIED)
            answer = answers[0]
            assert answer.status_code == 200
            assert answer.json()["manifest"]["metadata"]["resourceVersion"] == "7"
            assert answer.json()["manifest"]["spec"]["replicas"] == 3
            assert "x-kubesvc-stale" not in answer.headers


async def test_a_deleted_object_is_waited_out_of_the_cache(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_api(tmp_path, standalone=True) as api:
            await api.account()
            await ingest(api, web("5"), EventType.ADDED)
            api.feed.freshness.expect([record(web("5"), type_=EventType.DELETED)])
            answers: list[Any] = []

            async def read() -> None:
                answers.append(await api.client.get(PATH))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await trio.testing.wait_all_tasks_blocked()
                assert answers == []
                await ingest(api, web("8"), EventType.DELETED)
            assert answers[0].status_code == 404


async def test_the_wait_is_bounded_and_says_so(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_api(tmp_path, standalone=True) as api:
            await api.account()
            await ingest(api, web("5"), EventType.ADDED)
            api.feed.freshness.wait_seconds = 0.2
            api.feed.freshness.expect([record(web("7"), type_=EventType.MODIFIED)])
            answer = await api.client.get(PATH)
            assert answer.status_code == 200
            assert answer.json()["manifest"]["metadata"]["resourceVersion"] == "5"
            assert answer.headers["x-kubesvc-stale"] == "resourceVersion 5 < 7"
