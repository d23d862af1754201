"""server/_activity.py: object events per account and in total, in time buckets (sans-I/O)."""

from __future__ import annotations

from server._activity import Activity, ActivitySnapshot
from server._feed import ChangeFeed
from server.store import ObjectRef
from wire import EventRecord, EventType


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def event(account: str, etype: EventType = EventType.MODIFIED, size: int = 10) -> EventRecord:
    return EventRecord(int(etype), account, "v1", "Pod", "ns", "p", "u", "1", b"x" * size, "")


def marker(account: str, etype: EventType) -> EventRecord:
    return EventRecord(int(etype), account, "v1", "Pod", "", "", "", "9", b"", "")


def test_object_events_are_counted_and_markers_are_not() -> None:
    clock = Clock()
    activity = Activity(now_ms=clock, bucket_ms=1000, history=5)
    activity.observed(
        [
            marker("a", EventType.SYNC_BEGIN),
            event("a", EventType.ADDED),
            event("a", size=30),
            event("b", EventType.DELETED, size=0),
            marker("a", EventType.BOOKMARK),
            marker("a", EventType.SYNC_END),
        ],
        swept=[ObjectRef("b", "v1", "Pod", "ns", "gone")],
    )
    snap = activity.snapshot()
    assert snap.events == [0, 0, 0, 0, 4]
    assert snap.bytes == [0, 0, 0, 0, 40]
    assert snap.accounts["a"].events_total == 2
    assert snap.accounts["b"].events_total == 2  # the deletion and the swept object
    assert snap.accounts["a"].newest_event_ms == 1_000_000
    activity.observed([marker("c", EventType.BOOKMARK)])
    assert "c" not in activity.snapshot().accounts  # a bookmark is not an event


def test_buckets_slide_and_quiet_ones_read_zero() -> None:
    clock = Clock()
    activity = Activity(now_ms=clock, bucket_ms=1000, history=4)
    activity.observed([event("a")])
    clock.ms += 1000
    activity.observed([event("a"), event("a")])
    clock.ms += 2000
    snap = activity.snapshot()
    assert snap.events == [1, 2, 0, 0]  # nobody wrote the last two
    clock.ms += 3000
    activity.observed([event("a")])
    assert activity.snapshot().events == [0, 0, 0, 1]  # the old ones slid out
    clock.ms += 10_000
    assert activity.snapshot().events == [0, 0, 0, 0]


def test_an_accounts_last_minute_and_newest_event() -> None:
    clock = Clock()
    activity = Activity(now_ms=clock, bucket_ms=5000)
    for _ in range(3):
        activity.observed([event("a")])
        clock.ms += 20_000
    snap = activity.snapshot()
    assert snap.accounts["a"].events_last_minute == 2  # the first is 60 s old
    assert snap.accounts["a"].newest_event_ms == 1_040_000
    assert snap.accounts["a"].events_total == 3


def test_a_clock_that_went_back_loses_nothing_it_can_place() -> None:
    clock = Clock()
    activity = Activity(now_ms=clock, bucket_ms=1000, history=3)
    activity.observed([event("a")])
    clock.ms -= 1000
    activity.observed([event("a")])  # one bucket back: still in the ring
    clock.ms -= 10_000
    activity.observed([event("a")])  # far back: dropped, the newest time kept
    clock.ms += 11_000
    snap = activity.snapshot()
    assert snap.events == [0, 1, 1]
    assert snap.accounts["a"].newest_event_ms == 1_000_000


def test_accounts_past_the_cap_forget_the_quietest() -> None:
    clock = Clock()
    activity = Activity(now_ms=clock, max_accounts=2)
    for name in ("a", "b", "c"):
        activity.observed([event(name)])
        clock.ms += 1
    assert sorted(activity.snapshot().accounts) == ["b", "c"]


def test_the_feed_counts_what_it_publishes() -> None:
    feed = ChangeFeed()
    feed.publish([event("a"), marker("a", EventType.BOOKMARK)])
    snap: ActivitySnapshot = feed.activity.snapshot()
    assert sum(snap.events) == 1
    assert snap.accounts["a"].events_total == 1
