"""What the change feed saw lately: object events per account and in total (the status page).

Theory of operation. Every committed change passes ``ChangeFeed.publish`` (this replica's
ingest, and on PostgreSQL the other replicas' changes its follower reads), which calls
``Activity.observed(records, swept)``. Object events (ADDED, MODIFIED, DELETED, and the
deletions a relist's SYNC_END swept) are counted into time buckets of ``bucket_ms``: one ring
of ``history`` buckets for the whole server (events and their object bytes: the bytes that,
once acknowledged, free room in the agents' budgets) and, per account, a ring covering the
last minute and the wall-clock time of its newest event. Bookmarks and sync markers are not
events: a quiet cluster shows as quiet.

Nothing runs in the background: a bucket nobody wrote reads as zero. ``snapshot()`` copies
what a reader needs. Sans-I/O (the clock is a parameter). Bounds: the rings are fixed;
at most ``max_accounts`` accounts are tracked (past it, the one quiet the longest is
forgotten). Counting is in memory: a restarted server starts again from zero, and the
newest event's time is "since this process started" (the page says so).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["AccountActivity", "Activity", "ActivitySnapshot"]

_OBJECT_EVENTS = frozenset({1, 2, 3})  # wire.EventType ADDED, MODIFIED, DELETED
DEFAULT_BUCKET_MS = 5_000
DEFAULT_HISTORY = 120  # buckets: ten minutes of 5 s
ACCOUNT_WINDOW_MS = 60_000
DEFAULT_MAX_ACCOUNTS = 10_000


class _Record(Protocol):
    @property
    def type(self) -> int: ...
    @property
    def account(self) -> str: ...
    @property
    def object(self) -> bytes: ...


class _Swept(Protocol):
    @property
    def account(self) -> str: ...


def _wall_ms() -> int:
    return int(time.time() * 1000)


class _Ring:
    """Counts per bucket number for the newest ``len(slots)`` buckets."""

    __slots__ = ("newest", "slots")

    def __init__(self, size: int) -> None:
        self.slots = [0] * size
        self.newest: int | None = None

    def add(self, bucket: int, value: int) -> None:
        size = len(self.slots)
        if self.newest is None or bucket - self.newest >= size:
            self.slots = [0] * size
            self.newest = bucket
        elif bucket > self.newest:
            for b in range(self.newest + 1, bucket + 1):
                self.slots[b % size] = 0
            self.newest = bucket
        elif bucket <= self.newest - size:
            return  # older than the ring (the wall clock went back): dropped
        self.slots[bucket % size] += value

    def series(self, now_bucket: int, count: int) -> list[int]:
        """The ``count`` buckets up to ``now_bucket``, oldest first; unwritten ones are 0."""
        newest = self.newest
        size = len(self.slots)
        out = []
        for b in range(now_bucket - count + 1, now_bucket + 1):
            fresh = newest is not None and newest - size < b <= newest
            out.append(self.slots[b % size] if fresh else 0)
        return out


class _Account:
    __slots__ = ("newest_ms", "ring", "total")

    def __init__(self, size: int) -> None:
        self.ring = _Ring(size)
        self.newest_ms = 0
        self.total = 0


@dataclass(frozen=True, slots=True)
class AccountActivity:
    """One account: its newest event's wall-clock time (ms), events in the last minute and
    since this process started."""

    newest_event_ms: int
    events_last_minute: int
    events_total: int


@dataclass(frozen=True, slots=True)
class ActivitySnapshot:
    """The server's events and object bytes per bucket (``bucket_ms`` wide, oldest first,
    the last one ending at ``now_ms``), and each tracked account's activity."""

    now_ms: int
    bucket_ms: int
    events: list[int]
    bytes: list[int]
    accounts: dict[str, AccountActivity]


class Activity:
    """Counts object events as the feed publishes them (see the module's docstring)."""

    def __init__(
        self,
        *,
        now_ms: Callable[[], int] = _wall_ms,
        bucket_ms: int = DEFAULT_BUCKET_MS,
        history: int = DEFAULT_HISTORY,
        max_accounts: int = DEFAULT_MAX_ACCOUNTS,
    ) -> None:
        if bucket_ms <= 0 or history <= 0 or max_accounts <= 0:
            raise ValueError("bucket_ms, history and max_accounts must be positive")
        self._now_ms = now_ms
        self.bucket_ms = bucket_ms
        self._history = history
        self._account_buckets = max(1, -(-ACCOUNT_WINDOW_MS // bucket_ms))
        self._max_accounts = max_accounts
        self._events = _Ring(history)
        self._bytes = _Ring(history)
        self._accounts: dict[str, _Account] = {}

    def observed(self, records: Sequence[_Record], swept: Sequence[_Swept] = ()) -> None:
        """Count the object events of one committed batch (and the objects it swept)."""
        per_account: dict[str, int] = {}
        size = 0
        for record in records:
            if record.type in _OBJECT_EVENTS:
                per_account[record.account] = per_account.get(record.account, 0) + 1
                size += len(record.object)
        for ref in swept:
            per_account[ref.account] = per_account.get(ref.account, 0) + 1
        if not per_account:
            return
        now = self._now_ms()
        bucket = now // self.bucket_ms
        self._events.add(bucket, sum(per_account.values()))
        self._bytes.add(bucket, size)
        for name, count in per_account.items():
            account = self._accounts.get(name)
            if account is None:
                account = self._track(name)
            account.ring.add(bucket, count)
            account.newest_ms = max(account.newest_ms, now)
            account.total += count

    def _track(self, name: str) -> _Account:
        if len(self._accounts) >= self._max_accounts:
            quietest = min(self._accounts, key=lambda n: self._accounts[n].newest_ms)
            del self._accounts[quietest]
        account = self._accounts[name] = _Account(self._account_buckets)
        return account

    def snapshot(self) -> ActivitySnapshot:
        now = self._now_ms()
        bucket = now // self.bucket_ms
        window = self._account_buckets
        return ActivitySnapshot(
            now_ms=now,
            bucket_ms=self.bucket_ms,
            events=self._events.series(bucket, self._history),
            bytes=self._bytes.series(bucket, self._history),
            accounts={
                name: AccountActivity(a.newest_ms, sum(a.ring.series(bucket, window)), a.total)
                for name, a in self._accounts.items()
            },
        )
