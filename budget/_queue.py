"""The sans-I/O coalescing queue: what is pending, what is in flight, and byte accounting.

Theory of operation. Pending entries sit in an insertion-ordered table of *slots*
(``[entry, key, size, slot id]``, an ``OrderedDict`` keyed by the slot id); an index maps each
key to its pending slot. Sending an entry whose key has a pending slot merges into that slot
(``_entries.merge``) and moves it to the back: the merged entry carries the newest value and
size and takes the newest position. So the pending order is always the order of the newest
events, and a consumer never sees one producer's values out of send order. That matters for
the agent: the server moves a kind's resume point (resourceVersion) forward with every
object event it commits, so an entry that overtook an older one (``a@7`` before ``b@6``)
would let a session that ends between the two resume past ``b@6`` and lose it.

A BARRIER starts a fresh index: slots queued before it are no longer found, so nothing ever
coalesces across a barrier, and the back of the queue, where a merged slot moves, is always
inside the segment after the last barrier. Taking pops slots from the front (bounded by count
and bytes) and moves their bytes to "in flight" until acknowledged. Every operation is O(1)
per entry: the ordered table appends, moves to the end and pops the front in constant time.

The queue does not own a budget. It reports byte deltas and the caller applies them:
``plan()`` says what ``admit()`` would cost right now (net bytes, new slots), ``admit()``
does it and returns the bytes of the entries it replaced, ``take()`` hands out a prefix, and
``clear()`` returns every byte it still accounts for. The size charged for a slot is the size
recorded when it was admitted, so a producer cannot change the accounting afterwards.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from ._entries import Entry, EntryKind, merge

_BARRIER = EntryKind.BARRIER
_BOOKMARK = EntryKind.BOOKMARK
_ADDED = EntryKind.UPSERT_ADDED
_DELETED = EntryKind.DELETED

# A pending slot: [entry, key-or-None-when-not-indexed, size charged, slot id]. A list,
# because the slot is rewritten when a newer entry of the same key coalesces into it (and
# moved to the back of the table under its id, which never changes).
_Slot = list[Any]


def _merged_kind(old: EntryKind, new: EntryKind) -> EntryKind | None:
    """The kind ``merge`` would produce, without building an Entry (for ``plan``)."""
    if (old is _BOOKMARK) is not (new is _BOOKMARK):
        return None
    if new is _DELETED or new is _BOOKMARK:
        return new
    if old is _ADDED or old is _DELETED:
        return _ADDED
    return new


class CoalescingQueue:
    """Pending entries (coalesced per key, barriers respected) plus in-flight accounting.

    Invariants: ``pending_bytes`` is the sum of the charged sizes of the pending slots;
    ``len(self)`` is the number of pending slots and never exceeds ``max_pending_entries``
    as long as the caller checks ``plan()``/``len`` before ``admit()`` (admit itself does
    not refuse: the channel decides when to wait).
    """

    __slots__ = (
        "_index",
        "_next_id",
        "_pending",
        "coalesced",
        "in_flight_batches",
        "in_flight_bytes",
        "in_flight_entries",
        "max_pending_entries",
        "pending_bookmarks",
        "pending_bytes",
        "sent",
        "taken",
    )

    def __init__(self, max_pending_entries: int) -> None:
        if type(max_pending_entries) is not int or max_pending_entries < 1:
            raise ValueError(
                f"max_pending_entries: must be an int >= 1, got {max_pending_entries!r}"
            )
        self.max_pending_entries = max_pending_entries
        # Slot id -> slot, in queue order. Ids only grow, so a slot's id is unique for as long
        # as it is pending; the order is the table's, not the ids'.
        self._pending: OrderedDict[int, _Slot] = OrderedDict()
        self._next_id = 0
        self._index: dict[Hashable, _Slot] = {}
        self.pending_bytes = 0
        # Pending slots holding a BOOKMARK (a bookmark merges only with a bookmark, so a
        # slot's kind never crosses that line): the link holds a batch of bookmarks alone.
        self.pending_bookmarks = 0
        self.in_flight_bytes = 0
        self.in_flight_entries = 0
        self.in_flight_batches = 0
        self.coalesced = 0
        self.sent = 0
        self.taken = 0

    def __len__(self) -> int:
        return len(self._pending)

    def plan(self, entries: Sequence[Entry]) -> tuple[int, int]:
        """(net bytes, new slots) that ``admit(entries)`` would add if called now.

        Net bytes may be negative (replacements smaller than what they replace).
        """
        index: dict[Hashable, _Slot] = self._index
        # Keys touched by this group so far: key -> (kind, size) of the slot they would hit.
        local: dict[Hashable, tuple[EntryKind, int]] = {}
        net = 0
        new = 0
        for entry in entries:
            kind = entry.kind
            size = entry.size
            key = entry.key
            if kind is _BARRIER:
                index = {}
                local = {}
            elif key is not None:
                target = local.get(key)
                if target is None:
                    slot = index.get(key)
                    if slot is not None:
                        target = (slot[0].kind, slot[2])
                if target is not None:
                    merged = _merged_kind(target[0], kind)
                    if merged is not None:
                        net += size - target[1]
                        local[key] = (merged, size)
                        continue
                local[key] = (kind, size)
            net += size
            new += 1
        return net, new

    def admit(self, entries: Sequence[Entry]) -> int:
        """Queue ``entries`` in order, coalescing; returns the bytes of the replaced entries.

        The caller must have reserved ``sum(e.size)`` minus what this returns (or more, and
        give the rest back). Cannot fail part-way: entries were checked when constructed.
        """
        pending = self._pending
        index = self._index
        move_to_end = pending.move_to_end
        sid = self._next_id
        replaced = 0
        added = 0
        coalesced = 0
        bookmarks = 0
        for entry in entries:
            size = entry.size
            added += size
            kind = entry.kind
            key = entry.key
            if kind is _BARRIER:
                pending[sid] = [entry, None, size, sid]
                sid += 1
                self._index = index = {}
                continue
            if key is None:
                pending[sid] = [entry, None, size, sid]
                sid += 1
                bookmarks += kind is _BOOKMARK
                continue
            slot = index.get(key)
            if slot is not None:
                merged = merge(slot[0], entry)
                if merged is not None:
                    # Newest value, newest place: the slot moves to the back (still after the
                    # last barrier, since the index only holds slots queued after it).
                    replaced += slot[2]
                    slot[0] = merged
                    slot[2] = size
                    move_to_end(slot[3])
                    coalesced += 1
                    continue
            slot = [entry, key, size, sid]
            pending[sid] = slot
            sid += 1
            index[key] = slot
            bookmarks += kind is _BOOKMARK
        self._next_id = sid
        self.pending_bookmarks += bookmarks
        self.pending_bytes += added - replaced
        self.coalesced += coalesced
        self.sent += len(entries)
        return replaced

    def take(self, max_entries: int, max_bytes: int) -> tuple[list[Entry], int]:
        """Pop up to ``max_entries`` pending entries, in order, totalling at most
        ``max_bytes`` (but always at least one if any is pending: a lone entry larger than
        ``max_bytes`` is taken alone). Their bytes move to in flight; returns (entries, bytes).
        """
        pending = self._pending
        if len(pending) <= max_entries and self.pending_bytes <= max_bytes:
            # Everything goes: every indexed slot is pending, so the index empties wholesale.
            out = [slot[0] for slot in pending.values()]
            total = self.pending_bytes
            pending.clear()
            self._index = {}
            self.pending_bookmarks = 0
        else:
            out, total = self._take_prefix(max_entries, max_bytes)
        if out:
            self.pending_bytes -= total
            self.in_flight_bytes += total
            self.in_flight_entries += len(out)
            self.in_flight_batches += 1
            self.taken += len(out)
        return out, total

    def _take_prefix(self, max_entries: int, max_bytes: int) -> tuple[list[Entry], int]:
        pending = self._pending
        index = self._index
        out: list[Entry] = []
        total = 0
        count = 0
        # Find the prefix first (iterating does not change the table), then pop it.
        for slot in pending.values():
            if count >= max_entries:
                break
            size: int = slot[2]
            if total + size > max_bytes and count:
                break
            count += 1
            total += size
        popitem = pending.popitem
        for _ in range(count):
            slot = popitem(last=False)[1]
            key = slot[1]
            if key is not None and index.get(key) is slot:
                del index[key]
            entry = slot[0]
            self.pending_bookmarks -= entry.kind is _BOOKMARK
            out.append(entry)
        return out, total

    def acknowledge(self, nbytes: int, nentries: int) -> None:
        """Forget an acknowledged batch of ``nentries`` entries and ``nbytes`` bytes."""
        if nbytes > self.in_flight_bytes or nentries > self.in_flight_entries:
            raise ValueError(
                f"acknowledge: {nentries} entries / {nbytes} bytes is more than is in flight "
                f"({self.in_flight_entries} / {self.in_flight_bytes})"
            )
        self.in_flight_bytes -= nbytes
        self.in_flight_entries -= nentries
        self.in_flight_batches -= 1

    def clear(self) -> int:
        """Drop everything pending and in flight; returns the bytes that were accounted."""
        total = self.pending_bytes + self.in_flight_bytes
        self._pending.clear()
        self._index = {}
        self.pending_bytes = 0
        self.pending_bookmarks = 0
        self.in_flight_bytes = 0
        self.in_flight_entries = 0
        self.in_flight_batches = 0
        return total
