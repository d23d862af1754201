"""The change feed across replicas: each replica's follower publishes, to its own ChangeFeed,
what the OTHER replicas committed (DESIGN 5a; issue 13, "the feed and queries are global").

Theory of operation. On PostgreSQL every object write appends one row to the store's change
log in its own transaction (server/store/_changes.py). The replica that wrote it publishes it
to its own feed right after the commit, as on SQLite; every other replica's follower finds it
in the log and publishes it to its feed:

- When it reads: on a notification (the writer's store NOTIFYs CHANGES_CHANNEL after its
  commits, naming itself: a replica's own notifications do not wake its follower), else every
  ``poll_seconds``: a notification missed (the listener reconnecting, a writer that died right
  after its commit) costs at most one poll interval.
- What it reads: ``Store.read_changes`` from its cursor, in pages of at most ``page_rows``
  writes, until caught up. The store reads by transaction snapshots, not "seq > the last
  seen", so a write that commits late under a lower seq is read, not skipped
  (server/store/_pg_changes.py explains the hazard and the choice). Its own store's rows are
  not read back: they were published at their commit.
- Bodies: a log row holds identities and resourceVersions. For each ADDED/MODIFIED record a
  subscriber here wants (``ChangeFeed.wants``), the follower reads the object and publishes
  it if the stored object is still at that resourceVersion. If it is not, a later write of
  the object committed after it (and is in the log after it): the record is superseded and
  left out. So a subscriber on another replica sees each object's states in order, though not
  always every intermediate one (the agent's watch coalesces the same way); DELETED, swept
  objects and SYNC_END always come. The writing replica's own subscribers see every record.
- Read-your-writes: records nobody here subscribes to still pass the feed's watermarks
  (``Freshness.observed``), so a read on this replica can wait for an object another
  replica's agent reported.
- Falling behind: when the log was trimmed past writes the follower had not read (a long
  store outage, a paused process), or a row cannot be read, every subscriber is told to
  resync (``ChangeFeed.resync``) and the follower reads on: nothing is missed silently.
- Faults: a store error is logged and the same read tried again after a backoff (0.5 s
  doubling to 10 s), from the same cursor and change, so nothing is skipped or published
  twice. Nothing here ends the process.

Bounded: one page (``page_rows`` writes, each at most one agent batch) in memory at a time;
the notification channel is bounded and extra wake-ups coalesce.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec
import trio

from wire import EventRecord, EventType

from ._errors import StoreError
from ._feed import ChangeFeed
from .store import (
    CHANGES_CHANNEL,
    Change,
    ChangeCursor,
    ChangePage,
    Notification,
    Store,
    StoredObject,
    group_of,
    notice_writer,
)

__all__ = ["ChangeFollower", "FollowerStatistics"]

log = logging.getLogger("server.feed")
T = TypeVar("T")

DEFAULT_POLL_SECONDS = 0.5
NOTIFICATION_BUFFER = 16  # wake-ups coalesce: a few waiting are as good as many
# A row is one write: up to an agent's batch (sessions.maxBatchEvents records, within the
# gRPC message's bytes). A page of 8 holds at most ~80k identities; bodies are read one
# write at a time, as much as the writer's own ingest held.
DEFAULT_PAGE_ROWS = 8
BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 10.0
_UPSERTS = frozenset((int(EventType.ADDED), int(EventType.MODIFIED)))

_Key = tuple[str, str, str, str, str]  # account, group, kind (lower), namespace, name


def _record_key(r: EventRecord) -> _Key:
    return (r.account, group_of(r.api_version), r.kind.lower(), r.namespace, r.name)


def _stored_key(s: StoredObject) -> _Key:
    return (s.account, s.group, s.kind.lower(), s.namespace, s.name)


@dataclass(frozen=True, slots=True)
class FollowerStatistics:
    changes: int  # log rows (other replicas' writes) published
    records: int  # records published to subscribers
    superseded: int  # records left out: a later write of the object was already stored
    resyncs: int  # times the subscribers were told to resync
    errors: int  # store errors met (each retried)


class ChangeFollower:
    """Publishes other replicas' changes to ``feed`` (see the module docstring). ``run`` in a
    nursery. With ``listen`` it LISTENs on CHANGES_CHANNEL itself (``Store.listen``, a
    connection of its own); ``notifications`` (tests) is a channel of wake-ups instead.
    ``writer`` is this replica's name in the change log: its own notifications are ignored."""

    def __init__(
        self,
        store: Store,
        feed: ChangeFeed,
        *,
        notifications: trio.MemoryReceiveChannel[Notification] | None = None,
        listen: bool = False,
        writer: str = "",
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        page_rows: int = DEFAULT_PAGE_ROWS,
    ) -> None:
        if poll_seconds <= 0 or page_rows < 1:
            raise ValueError("a follower needs poll_seconds > 0 and page_rows >= 1")
        self._store = store
        self._feed = feed
        self._notifications = notifications
        self._listen = listen
        self._writer = writer
        self.ignored = 0  # notifications of this replica's own changes (tests)
        #: set once listening started (its first resync marker came): for tests
        self.listening = trio.Event()
        self._poll_seconds = poll_seconds
        self._page_rows = page_rows
        self._changes = self._records = self._superseded = self._resyncs = self._errors = 0
        #: rounds of reading (each until caught up) begun and finished; ``caught_up`` is set
        #: at the end of each (then replaced): for waiters
        self.rounds_begun = self.rounds_done = 0
        self.caught_up = trio.Event()

    def statistics(self) -> FollowerStatistics:
        return FollowerStatistics(
            self._changes, self._records, self._superseded, self._resyncs, self._errors
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Take the cursor "now" (retrying while the store fails), report started, then
        follow until cancelled. Start it before subscribers can connect: what was committed
        before it started is not published."""
        if not self._listen:
            await self._follow(task_status=task_status)
            return
        send, receive = trio.open_memory_channel[Notification](NOTIFICATION_BUFFER)
        self._notifications = receive
        async with trio.open_nursery() as nursery:
            await nursery.start(self._store.listen, [CHANGES_CHANNEL], send)
            await nursery.start(self._follow)
            task_status.started()

    async def _follow(self, *, task_status: trio.TaskStatus[None]) -> None:
        page: ChangePage = await self._retrying(
            "start the change feed's cursor", lambda: self._store.read_changes(None)
        )
        cursor = page.cursor
        task_status.started()
        while True:
            self.rounds_begun += 1
            cursor = await self._catch_up(cursor)
            self.rounds_done = self.rounds_begun
            self.caught_up.set()
            self.caught_up = trio.Event()
            await self._wait()

    async def _wait(self) -> None:
        """Until a notification of another writer's change (or a resync marker) or the poll
        interval; then take the other wake-ups already waiting (before the read, so none that
        comes during it is lost)."""
        with trio.move_on_after(self._poll_seconds):
            while True:
                channel = self._notifications
                if channel is None:
                    await trio.sleep_forever()  # the listener ended: polls alone from now on
                try:
                    notification = await channel.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    self._notifications = None
                    continue
                if self._heard(notification):
                    break
        while self._notifications is not None:
            try:
                self._heard(self._notifications.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break

    def _heard(self, notification: Notification) -> bool:
        """Whether ``notification`` calls for a read (not one of this replica's own)."""
        if notification.resync:
            self.listening.set()
            return True
        if self._writer and notice_writer(notification.payload) == self._writer:
            self.ignored += 1
            return False
        return True

    async def _catch_up(self, cursor: ChangeCursor) -> ChangeCursor:
        """Read and publish pages until none is waiting; the cursor to read on from."""
        while True:
            page = await self._retrying(
                "read the change log",
                lambda: self._store.read_changes(cursor, self._page_rows),  # noqa: B023
            )
            if page.lagged:
                told = self._feed.resync()
                self._resyncs += 1
                log.warning(
                    "change feed: the change log was trimmed past changes this replica had "
                    "not read (or a change could not be read): %d subscriber(s) told to resync",
                    told,
                )
            for change in page.changes:
                await self._publish(change)
            cursor = page.cursor
            if not page.more:
                return cursor

    async def _publish(self, change: Change) -> None:
        feed = self._feed
        wants: dict[tuple[str, str], bool] = {}  # per account and kind: a batch repeats them

        def wanted_by_someone(r: EventRecord) -> bool:
            scope = (r.account, r.kind)
            if scope not in wants:
                wants[scope] = feed.wants(r.account, r.kind)
            return wants[scope]

        wanted = [r.type in _UPSERTS and wanted_by_someone(r) for r in change.records]
        stored: dict[_Key, StoredObject] = {}
        if any(wanted):
            keys = [
                (r.account, r.api_version, r.kind, r.namespace, r.name)
                for r, want in zip(change.records, wanted, strict=True)
                if want
            ]
            found = await self._retrying(
                "read the changed objects", lambda: self._store.get_objects(keys)
            )
            stored = {_stored_key(s): s for s in found}
        published: list[EventRecord] = []
        unseen: list[EventRecord] = []
        for record, want in zip(change.records, wanted, strict=True):
            if record.type not in _UPSERTS:
                published.append(record)
            elif not want:
                unseen.append(record)
            else:
                current = stored.get(_record_key(record))
                if current is None or current.resource_version != record.resource_version:
                    self._superseded += 1
                    continue
                published.append(msgspec.structs.replace(record, object=current.body))
        feed.publish(published, swept=change.swept)
        feed.freshness.observed(unseen)
        self._changes += 1
        self._records += len(published)

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` until it succeeds: a store error is logged and retried after a
        backoff (the follower's only job is to catch up; it never gives up)."""
        backoff = BACKOFF_SECONDS
        while True:
            try:
                return await call()
            except StoreError as exc:
                self._errors += 1
                log.error("change feed: could not %s (again in %g s): %s", what, backoff, exc)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
