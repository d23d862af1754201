"""The change-feed follower (server/_feed_follower.py) on a real PostgreSQL: store ``a`` is
another replica's, writing; store ``b`` is this replica's, read by its follower into a
ChangeFeed. Wake-ups are sent by the test (a memory channel, polls an hour apart) unless a
test is about the poll or the real LISTEN connection."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from server._errors import StoreError
from server._feed import ChangeFeed, SubscriberLagged, Subscription
from server._feed_follower import ChangeFollower
from server._freshness import object_key
from server.store import CHANGES_CHANNEL, Notification, Store, notice_writer
from server.store._changes import change_notice
from wire import EventRecord, EventType

from ._stores import StoreBackend

ACCOUNT = "a1"
HOUR = 3600.0
ADDED, MODIFIED, DELETED = int(EventType.ADDED), int(EventType.MODIFIED), int(EventType.DELETED)


def pod(name: str, rv: str, etype: EventType = EventType.ADDED) -> EventRecord:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
    }
    return EventRecord(
        int(etype), ACCOUNT, "v1", "Pod", "ns", name, f"u-{name}", rv, json.dumps(body).encode()
    )


def marker(etype: EventType, rv: str = "") -> EventRecord:
    return EventRecord(int(etype), ACCOUNT, "v1", "Pod", "", "", "", rv, b"", "")


@dataclass
class Replicas:
    a: Store  # the other replica's store: it writes
    b: Store  # this replica's
    feed: ChangeFeed
    follower: ChangeFollower
    wake: trio.MemorySendChannel[Notification]

    async def caught_up(self) -> None:
        """Wake the follower and wait for a round of reading begun after this call (it
        reads what was committed before)."""
        follower = self.follower
        begun = follower.rounds_begun  # a round under way may have read before our writes
        await self.wake.send(Notification(CHANGES_CHANNEL, ""))
        while follower.rounds_done <= begun:
            await follower.caught_up.wait()


@asynccontextmanager
async def replicas(
    backend: StoreBackend, *, poll_seconds: float = HOUR, notifications: bool = True
) -> AsyncIterator[Replicas]:
    wake, woken = trio.open_memory_channel[Notification](16)
    async with backend.open() as a, backend.open() as b, trio.open_nursery() as nursery:
        feed = ChangeFeed()
        follower = ChangeFollower(
            b, feed, notifications=woken if notifications else None, poll_seconds=poll_seconds
        )
        await nursery.start(follower.run)
        yield Replicas(a, b, feed, follower, wake)
        nursery.cancel_scope.cancel()


async def messages(sub: Subscription, count: int) -> list[dict[str, Any]]:
    return [json.loads(await sub.receive()) for _ in range(count)]


def brief(message: dict[str, Any]) -> tuple[str, str, str]:
    return message["type"], message.get("name", ""), message.get("resourceVersion", "")


async def test_another_replicas_changes_reach_subscribers_with_bodies_in_order(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with replicas(pg_backend) as r:
            with r.feed.subscribe(accounts=[ACCOUNT]) as sub:
                await r.a.apply_batch(ACCOUNT, [pod("p1", "1"), pod("p2", "2")])
                await r.caught_up()
                first = await messages(sub, 2)
                assert [brief(m) for m in first] == [("ADDED", "p1", "1"), ("ADDED", "p2", "2")]
                assert first[0]["object"]["metadata"]["resourceVersion"] == "1"  # the body

                # a relist that no longer has p2: swept at SYNC_END, as on the writing replica
                await r.a.apply_batch(
                    ACCOUNT,
                    [
                        marker(EventType.SYNC_BEGIN),
                        pod("p1", "3", EventType.MODIFIED),
                        marker(EventType.SYNC_END, "3"),
                    ],
                )
                await r.caught_up()
                relist = await messages(sub, 3)
                assert [brief(m) for m in relist] == [
                    ("MODIFIED", "p1", "3"),
                    ("DELETED", "p2", ""),
                    ("SYNC_END", "", ""),
                ]
                assert relist[1]["object"] is None
                # and an operation's result (written by the replica holding the stream)
                await r.a.apply_operation_objects([pod("p1", "4", EventType.MODIFIED)])
                await r.caught_up()
                assert [brief(m) for m in await messages(sub, 1)] == [("MODIFIED", "p1", "4")]
                # this replica's own writes are not published twice (its ingest did it)
                published = r.feed.statistics().published_records
                await r.b.apply_batch(ACCOUNT, [pod("mine", "5")])
                await r.caught_up()
                assert r.feed.statistics().published_records == published
            stats = r.follower.statistics()
            assert (stats.changes, stats.resyncs, stats.errors) == (3, 0, 0)


async def test_a_superseded_version_is_left_out_and_each_object_stays_in_order(
    pg_backend: StoreBackend,
) -> None:
    """Read after later writes of the same objects: what the subscriber sees of each object
    is its newest state, never an older one after a newer."""
    with trio.fail_after(30):
        async with replicas(pg_backend) as r:
            with r.feed.subscribe() as sub:
                await r.a.apply_batch(ACCOUNT, [pod("p1", "1"), pod("p3", "2")])
                await r.a.apply_batch(ACCOUNT, [pod("p1", "3", EventType.MODIFIED)])
                await r.a.apply_batch(ACCOUNT, [pod("p3", "4", EventType.DELETED)])
                await r.caught_up()
                got = [brief(m) for m in await messages(sub, 2)]
                assert got == [("MODIFIED", "p1", "3"), ("DELETED", "p3", "4")]
            assert r.follower.statistics().superseded == 2  # p1 at 1, p3 at 2


async def test_changes_nobody_here_subscribes_to_read_no_body_but_meet_read_your_writes(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with replicas(pg_backend) as r:
            written = pod("p1", "7")
            r.feed.freshness.expect([written])  # an operation here wrote p1 at 7
            key = object_key(ACCOUNT, "", "Pod", "ns", "p1")
            assert not r.feed.freshness.caught_up(key, None)
            with r.feed.subscribe(accounts=["another-account"]):
                await r.a.apply_batch(ACCOUNT, [written])  # the agent's watch, elsewhere
                await r.caught_up()
            assert len(r.feed.freshness) == 0  # the watermark is met: reads stop waiting
            assert r.follower.statistics().records == 0


async def test_without_a_notification_the_poll_delivers(pg_backend: StoreBackend) -> None:
    """A notification missed (none comes at all here) costs at most the poll interval."""
    with trio.fail_after(30):
        async with replicas(pg_backend, poll_seconds=0.1, notifications=False) as r:
            with r.feed.subscribe() as sub:
                await r.a.apply_batch(ACCOUNT, [pod("p1", "1")])
                assert [brief(m) for m in await messages(sub, 1)] == [("ADDED", "p1", "1")]


async def test_the_writers_notify_wakes_the_follower(pg_backend: StoreBackend) -> None:
    """The real seam: b's follower LISTENs (Store.listen) and hears a's NOTIFY (the poll is
    an hour)."""
    with trio.fail_after(30):
        async with pg_backend.open() as a, pg_backend.open() as b, trio.open_nursery() as n:
            feed = ChangeFeed()
            follower = ChangeFollower(b, feed, listen=True, poll_seconds=HOUR)
            await n.start(follower.run)
            with trio.fail_after(10):
                await follower.listening.wait()
            with feed.subscribe() as sub:
                outcome = await a.apply_batch(ACCOUNT, [pod("p1", "1")])
                assert outcome.change_seq > 0
                assert [brief(m) for m in await messages(sub, 1)] == [("ADDED", "p1", "1")]
            n.cancel_scope.cancel()


def test_a_notice_names_its_writer_and_an_older_replicas_bare_seq_is_anyones() -> None:
    assert notice_writer(change_notice("r1/ab12", 42)) == "r1/ab12"
    assert notice_writer("42") is None  # a replica of an older version: read on it


async def test_a_replicas_own_notifications_do_not_wake_its_follower(
    pg_backend: StoreBackend,
) -> None:
    """b's own writes are never read back, so their NOTIFYs (which name b) cost no read; a's
    still wake b's follower at once (the poll is an hour)."""
    with trio.fail_after(30):
        async with pg_backend.open() as a, pg_backend.open() as b, trio.open_nursery() as n:
            feed = ChangeFeed()
            follower = ChangeFollower(b, feed, listen=True, writer=b.writer, poll_seconds=HOUR)
            await n.start(follower.run)
            with trio.fail_after(10):
                await follower.listening.wait()
            while follower.rounds_done < follower.rounds_begun:  # the resync's round
                await follower.caught_up.wait()
            rounds = follower.rounds_begun
            for rv in ("1", "2", "3"):
                assert (await b.apply_batch(ACCOUNT, [pod("own", rv)])).change_seq > 0
            with feed.subscribe() as sub:
                await a.apply_batch(ACCOUNT, [pod("theirs", "4")])
                assert [brief(m) for m in await messages(sub, 1)] == [("ADDED", "theirs", "4")]
            # The notifications come in commit order: b's three were heard before a's.
            assert follower.ignored == 3
            assert follower.rounds_begun == rounds + 1
            n.cancel_scope.cancel()


async def test_a_follower_behind_a_trim_tells_its_subscribers_to_resync(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with replicas(pg_backend) as r:
            with r.feed.subscribe() as sub, r.feed.subscribe(accounts=["none"]) as idle:
                for i in range(3):
                    await r.a.apply_batch(ACCOUNT, [pod(f"p{i}", str(i + 1))])
                assert await r.a.trim_changes(600_000, 0) == 3  # before the follower read them
                await r.caught_up()
                with pytest.raises(SubscriberLagged):
                    await sub.receive()
                with pytest.raises(SubscriberLagged):  # whatever its filter: it cannot know
                    await idle.receive()
            assert r.follower.statistics().resyncs == 1
            # and it reads on: a new subscriber gets the next change
            with r.feed.subscribe() as sub:
                await r.a.apply_batch(ACCOUNT, [pod("p9", "9")])
                await r.caught_up()
                assert [brief(m) for m in await messages(sub, 1)] == [("ADDED", "p9", "9")]


async def test_a_store_fault_is_retried_and_nothing_is_lost(pg_backend: StoreBackend) -> None:
    with trio.fail_after(60):
        async with replicas(pg_backend, poll_seconds=0.05, notifications=False) as r:
            with r.feed.subscribe() as sub:
                await r.a.apply_batch(ACCOUNT, [pod("p1", "1")])
                assert [brief(m) for m in await messages(sub, 1)] == [("ADDED", "p1", "1")]
                # every connection of both stores is cut (a database restart, as they see it)
                pg_backend.sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                with pytest.raises(StoreError):  # a's pooled connection was cut too
                    await r.a.apply_batch(ACCOUNT, [pod("p2", "2")])
                await r.a.apply_batch(ACCOUNT, [pod("p2", "2")])  # a new connection
                assert [brief(m) for m in await messages(sub, 1)] == [("ADDED", "p2", "2")]
            assert r.follower.statistics().errors >= 1
