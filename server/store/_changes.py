"""The change log's messages: what one committed write changed, for the replicas that did not
make it (DESIGN 5a, "the change feed reads what every replica ingested"). No I/O here.

Theory of operation. On PostgreSQL every transaction that writes objects (a session's batch,
an operation's result) appends ONE row to ``changes`` (schema step 4) as its last statement:
the feed's records of that write, in order (ADDED, MODIFIED, DELETED, SYNC_END; bookmarks and
SYNC_BEGIN carry nothing a subscriber uses), and the objects its sync brackets swept. A row
holds the records' identities and resourceVersions, not their bodies: the bodies are already
in ``objects`` and writing them twice cost ingest what the feed does not need (see
``server/_feed_follower.py``, which reads a body from ``objects`` when a subscriber wants it).
One row per transaction, not per record: one more statement per batch, small (lz4 compresses
the repeated names), however large the batch.

Why insert it LAST: two transactions that write the same object are serialized by that
object's row lock, and the second takes its sequence number only after the first committed.
So for any one object, ``seq`` order is commit order, which is the order the feed promises.
Transactions that touch disjoint objects may commit in another order than their seqs; the
reader (``_pg_changes``) therefore does not read "seq > the last seq seen" (it would skip a
lower seq that commits late) but by transaction snapshots, as PgQ does.

Messages are msgpack, versioned (the first field); a reader that meets a version it does not
know skips the row and tells its subscribers to resync rather than guess.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from wire import EventRecord, EventType

from .._errors import StoreError
from ._records import ObjectRef

__all__ = [
    "CHANGES_CHANNEL",
    "FEED_TYPES",
    "change_message",
    "change_notice",
    "notice_writer",
    "read_change_message",
]

#: The NOTIFY channel a replica signals its committed changes on (the payload:
#: ``change_notice``; a hint only, readers read the log).
CHANGES_CHANNEL = "kubesvc_changes"


def change_notice(writer: str, seq: int) -> str:
    """The payload announcing change ``seq`` of ``writer``: ``"<seq> <writer>"``. The writer
    is there so that its own follower, which never reads its own rows back, need not wake."""
    return f"{seq} {writer}"


def notice_writer(payload: str) -> str | None:
    """The writer named in a ``change_notice`` payload; None for a payload without one (a
    replica of an older version sends the seq alone: treat it as anyone's)."""
    _, space, writer = payload.partition(" ")
    return writer if space else None


#: The record types the feed forwards; the others are not logged.
FEED_TYPES = frozenset(
    int(t) for t in (EventType.ADDED, EventType.MODIFIED, EventType.DELETED, EventType.SYNC_END)
)
_VERSION = 1


class _Logged(msgspec.Struct, array_like=True, frozen=True):
    type: int
    account: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    scope: str


class _Swept(msgspec.Struct, array_like=True, frozen=True):
    account: str
    api_version: str
    kind: str
    namespace: str
    name: str


class _Message(msgspec.Struct, array_like=True, frozen=True):
    version: int
    records: list[_Logged]
    swept: list[_Swept]


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(_Message).decode


def change_message(
    records: Sequence[EventRecord], swept: Sequence[ObjectRef]
) -> tuple[bytes, int] | None:
    """The log message for a committed write and how many changes it holds; None when it
    changed nothing a feed subscriber would see."""
    logged = [
        _Logged(
            r.type,
            r.account,
            r.api_version,
            r.kind,
            r.namespace,
            r.name,
            r.uid,
            r.resource_version,
            r.scope,
        )
        for r in records
        if r.type in FEED_TYPES
    ]
    if not logged and not swept:
        return None
    gone = [_Swept(s.account, s.api_version, s.kind, s.namespace, s.name) for s in swept]
    return _encode(_Message(_VERSION, logged, gone)), len(logged) + len(gone)


def read_change_message(
    message: bytes,
) -> tuple[tuple[EventRecord, ...], tuple[ObjectRef, ...]]:
    """The records (with empty bodies) and swept objects of a log message. Raises StoreError
    for a message this version cannot read."""
    try:
        decoded = _decode(message)
    except msgspec.DecodeError as exc:
        raise StoreError(f"an unreadable change-log message: {exc}") from exc
    if decoded.version != _VERSION:
        raise StoreError(
            f"a change-log message of version {decoded.version} (this server reads {_VERSION})"
        )
    records = tuple(
        EventRecord(
            r.type,
            r.account,
            r.api_version,
            r.kind,
            r.namespace,
            r.name,
            r.uid,
            r.resource_version,
            b"",
            r.scope,
        )
        for r in decoded.records
    )
    swept = tuple(
        ObjectRef(s.account, s.api_version, s.kind, s.namespace, s.name) for s in decoded.swept
    )
    return records, swept
