"""The live change feed: a fan-out from the ingest path to WebSocket subscribers.

Theory of operation: after the store commits a batch, the ingest side calls
`ChangeFeed.publish(records)`. Publishing never blocks and never waits for a subscriber: each
record that a subscriber's filters accept is encoded once (shared by every subscriber) and
appended to that subscriber's queue. Each queue is bounded in messages and in bytes; a
subscriber whose queue would exceed either bound is marked *lagged*, its queue is dropped, and
its next `receive()` raises `SubscriberLagged` so the WebSocket handler can send
`{"type": "resync"}` and disconnect it. Ingest therefore runs at the same speed whatever the
subscribers do, and a slow client learns that it missed changes rather than silently missing
them.

Messages are JSON text, one per object change:
    {"type": "ADDED"|"MODIFIED"|"DELETED", "account", "apiVersion", "kind", "namespace",
     "name", "uid", "resourceVersion", "object": {...the object...} | null}
and one per completed full listing:
    {"type": "SYNC_END", "account", "apiVersion", "kind", "scope"}
The objects the store deleted at a SYNC_END because the listing no longer had them arrive as
DELETED messages (uid and resourceVersion "", object null) just before that SYNC_END, when the
ingest side passes them (`publish(records, swept=outcome.swept)`).
Bookmarks and SYNC_BEGIN markers carry nothing a subscriber can use and are not forwarded.

Several replicas (PostgreSQL): each publishes what it ingests itself, as above, and its
follower (server/_feed_follower.py) publishes what the others ingested, read from the store's
change log; a change it knows it cannot deliver makes every subscriber resync (``resync``).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import msgspec
import trio

from ._activity import Activity
from ._errors import ServerError
from ._freshness import Freshness, ObjectRef

__all__ = [
    "ChangeFeed",
    "FeedClosed",
    "FeedError",
    "FeedRecord",
    "FeedStatistics",
    "SubscriberLagged",
    "Subscription",
    "SweptObject",
]

# wire.EventType values (the feed only needs these four; it reads records structurally).
_ADDED, _MODIFIED, _DELETED, _SYNC_END = 1, 2, 3, 6
_OBJECT_TYPES = {_ADDED: "ADDED", _MODIFIED: "MODIFIED", _DELETED: "DELETED"}

DEFAULT_MAX_MESSAGES = 1_000
DEFAULT_MAX_BYTES = 16 * 2**20


class FeedError(ServerError):
    """Root of the feed's errors (under the server package's root, ServerError).

    FeedError
    ├── SubscriberLagged   the subscriber fell behind; its queue was dropped (resync)
    └── FeedClosed         the feed was closed (server shutting down) or the subscription ended
    """


class SubscriberLagged(FeedError):
    """The subscriber's queue overflowed; it missed changes and must resync."""


class FeedClosed(FeedError):
    """The feed or the subscription is closed; no more messages will come."""


#: An object a sync bracket deleted (`server.store.ObjectRef`), read by attribute.
SweptObject = ObjectRef


class FeedRecord(SweptObject, Protocol):
    """What the feed reads from a record: the fields of `wire.EventRecord` it needs (the
    object's identity as SweptObject names it, and these)."""

    @property
    def type(self) -> int: ...
    @property
    def uid(self) -> str: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def object(self) -> bytes: ...
    @property
    def scope(self) -> str: ...


@dataclass(frozen=True, slots=True)
class FeedStatistics:
    subscribers: int
    published_records: int
    delivered_messages: int
    lagged_subscribers: int


class Subscription:
    """One subscriber's bounded queue of encoded messages. Made by `ChangeFeed.subscribe`."""

    def __init__(
        self,
        accounts: frozenset[str],
        kinds: frozenset[str],
        max_messages: int,
        max_bytes: int,
    ) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError("a subscription needs max_messages >= 1 and max_bytes >= 1")
        self.accounts = accounts
        self.kinds = kinds  # lower-cased
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._queue: deque[str] = deque()
        self._queued_bytes = 0
        self._lagged = False
        self._closed = False
        self._lot = trio.lowlevel.ParkingLot()
        self._lagged_event = trio.Event()

    def accepts(self, account: str, kind_lower: str) -> bool:
        return (not self.accounts or account in self.accounts) and (
            not self.kinds or kind_lower in self.kinds
        )

    @property
    def lagged(self) -> bool:
        return self._lagged

    def offer(self, message: str) -> bool:
        """Queue a message without blocking; False when this made the subscriber lag."""
        if self._lagged or self._closed:
            return True
        size = len(message)
        if len(self._queue) >= self._max_messages or self._queued_bytes + size > self._max_bytes:
            self.lag()
            return False
        self._queue.append(message)
        self._queued_bytes += size
        self._lot.unpark_all()
        return True

    def lag(self) -> None:
        """Mark the subscriber lagged: its queue is dropped, its next ``receive()`` raises
        SubscriberLagged (an overflow, or changes the server knows it cannot deliver)."""
        self._lagged = True
        self._lagged_event.set()
        self._queue.clear()
        self._queued_bytes = 0
        self._lot.unpark_all()

    async def wait_lagged(self) -> None:
        """Return once the subscriber has fallen behind (for a sender blocked on a slow peer)."""
        await self._lagged_event.wait()

    def close(self) -> None:
        """End the subscription: a parked `receive()` raises FeedClosed once the queue drains."""
        self._closed = True
        self._lot.unpark_all()

    async def receive(self) -> str:
        """The next message, oldest first; waits for one.

        Raises SubscriberLagged once the queue has overflowed (the queued messages are gone),
        FeedClosed when the subscription or the feed is closed and nothing is left.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._lagged:
                raise SubscriberLagged("the subscriber fell behind the change feed")
            if self._queue:
                message = self._queue.popleft()
                self._queued_bytes -= len(message)
                await trio.lowlevel.cancel_shielded_checkpoint()
                return message
            if self._closed:
                raise FeedClosed("the change feed subscription is closed")
            await self._lot.park()


class ChangeFeed:
    """The fan-out. One per server; `publish` is called from the ingest path (sync, no I/O)."""

    def __init__(
        self,
        *,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_subscribers: int = 1_000,
    ) -> None:
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._max_subscribers = max_subscribers
        self._subscribers: set[Subscription] = set()
        self._closed = False
        self._published = 0
        self._delivered = 0
        self._lagged = 0
        #: read-your-writes watermarks; every committed change passes here (see _freshness)
        self.freshness = Freshness()
        #: object events per account and in total, lately (the status page; see _activity)
        self.activity = Activity()

    @contextmanager
    def subscribe(
        self,
        *,
        accounts: Iterable[str] = (),
        kinds: Iterable[str] = (),
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> Iterator[Subscription]:
        """Register a subscriber for the `with` block; empty filters accept everything.

        Kinds match case-insensitively. Raises FeedClosed when the feed is closed, and
        FeedError when `max_subscribers` are already connected (every buffer has a bound).
        """
        if self._closed:
            raise FeedClosed("the change feed is closed")
        if len(self._subscribers) >= self._max_subscribers:
            raise FeedError(f"too many feed subscribers (limit {self._max_subscribers})")
        subscription = Subscription(
            frozenset(accounts),
            frozenset(k.lower() for k in kinds),
            max_messages or self._max_messages,
            max_bytes or self._max_bytes,
        )
        self._subscribers.add(subscription)
        try:
            yield subscription
        finally:
            self._subscribers.discard(subscription)
            subscription.close()

    def publish(self, records: Sequence[FeedRecord], *, swept: Sequence[SweptObject] = ()) -> None:
        """Offer committed records to every subscriber whose filters accept them; never blocks.

        Call it after the batch's transaction committed, so that a subscriber never sees a
        change the store does not hold. `swept` are the objects the store deleted at the
        batch's SYNC_END markers (`BatchOutcome.swept`): each becomes a DELETED message (with
        `"object": null`), sent just before the SYNC_END of its account and kind.
        """
        self._published += len(records)
        self.freshness.observed(records, swept)
        self.activity.observed(records, swept)
        if not self._subscribers:
            return
        pending: dict[tuple[str, str], list[SweptObject]] = {}
        for ref in swept:
            pending.setdefault((ref.account, ref.kind.lower()), []).append(ref)
        subscribers = list(self._subscribers)
        for record in records:
            if record.type == _SYNC_END and pending:
                for ref in pending.pop((record.account, record.kind.lower()), ()):
                    self._offer(
                        subscribers, ref.account, ref.kind, functools.partial(encode_swept, ref)
                    )
            self._offer(
                subscribers, record.account, record.kind, functools.partial(encode_record, record)
            )
        for refs in pending.values():
            for ref in refs:
                self._offer(
                    subscribers, ref.account, ref.kind, functools.partial(encode_swept, ref)
                )

    def wants(self, account: str, kind: str) -> bool:
        """Whether a subscriber would take a change of ``kind`` in ``account`` now (the
        follower reads an object's body only then)."""
        kind_lower = kind.lower()
        return any(not s.lagged and s.accepts(account, kind_lower) for s in self._subscribers)

    def resync(self) -> int:
        """Tell every subscriber it missed changes (each is marked lagged: it gets
        ``{"type": "resync"}`` and is disconnected); how many. For changes the server knows
        it could not deliver (another replica's, trimmed from the log before this one read
        them)."""
        told = 0
        for subscriber in list(self._subscribers):
            if not subscriber.lagged:
                subscriber.lag()
                told += 1
            self._subscribers.discard(subscriber)  # done for: see _offer
        self._lagged += told
        return told

    def _offer(
        self,
        subscribers: list[Subscription],
        account: str,
        kind: str,
        encode: Callable[[], str | None],
    ) -> None:
        kind_lower = kind.lower()
        takers = [s for s in subscribers if not s.lagged and s.accepts(account, kind_lower)]
        if not takers:
            return
        message = encode()  # once, shared by every subscriber that takes it
        if message is None:
            return
        for subscriber in takers:
            if subscriber.offer(message):
                self._delivered += 1
            else:
                # Lagged: it is told to resync and disconnected, so the feed lets go of it
                # now. Its connection's task may stay blocked in a socket write for as long as
                # the client reads nothing (Hypercorn shields its sends from cancellation).
                self._lagged += 1
                self._subscribers.discard(subscriber)

    def close(self) -> None:
        """Close the feed: subscribers drain what they have, then get FeedClosed."""
        self._closed = True
        for subscriber in list(self._subscribers):
            subscriber.close()

    def statistics(self) -> FeedStatistics:
        return FeedStatistics(
            subscribers=len(self._subscribers),
            published_records=self._published,
            delivered_messages=self._delivered,
            lagged_subscribers=self._lagged,
        )


_encoder = msgspec.json.Encoder()


def encode_record(record: FeedRecord) -> str | None:
    """The feed's JSON text for one record, or None for records the feed does not forward.

    The object's JSON bytes are spliced in as they are (not decoded and re-encoded): they are
    the API server's JSON, already validated when the agent read them.
    """
    change = _OBJECT_TYPES.get(record.type)
    if change is None:
        if record.type != _SYNC_END:
            return None
        header = {
            "type": "SYNC_END",
            "account": record.account,
            "apiVersion": record.api_version,
            "kind": record.kind,
            "scope": record.scope,
        }
        return _encoder.encode(header).decode()
    header = {
        "type": change,
        "account": record.account,
        "apiVersion": record.api_version,
        "kind": record.kind,
        "namespace": record.namespace,
        "name": record.name,
        "uid": record.uid,
        "resourceVersion": record.resource_version,
    }
    head = _encoder.encode(header)
    body = record.object if record.object else b"null"
    return (head[:-1] + b',"object":' + body + b"}").decode()


def encode_swept(ref: SweptObject) -> str:
    """The DELETED message for an object a sync bracket swept away (its body is gone)."""
    header = {
        "type": "DELETED",
        "account": ref.account,
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "namespace": ref.namespace,
        "name": ref.name,
        "uid": "",
        "resourceVersion": "",
        "object": None,
    }
    return _encoder.encode(header).decode()
