"""What producers put into the event channel, and how two pending entries of one key merge.

The merge table (``old`` is pending, ``new`` was just sent with the same key; the merged
entry takes the new one's place in the queue, at the back, and carries the new value and
size):

==================  ==================  =================
old                 new                 merged kind
==================  ==================  =================
any object event    DELETED             DELETED
ADDED or DELETED    ADDED / MODIFIED    ADDED
MODIFIED            ADDED / MODIFIED    the new kind
BOOKMARK            BOOKMARK            BOOKMARK
BOOKMARK            an object event     (no merge: appended)
an object event     BOOKMARK            (no merge: appended)
==================  ==================  =================

"Object event" means ADDED, MODIFIED or DELETED. A bookmark and an object event sharing a key
is a producer's mistake, but it must never lose an object event, so they are kept apart.
BARRIER entries and entries whose key is None never merge (the channel does not look them up).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass


class EntryKind(enum.IntEnum):
    """The kind of an entry; the numbers match the wire's EventType where they overlap."""

    UPSERT_ADDED = 1
    UPSERT_MODIFIED = 2
    DELETED = 3
    BARRIER = 4
    BOOKMARK = 5


_ADDED = EntryKind.UPSERT_ADDED
_MODIFIED = EntryKind.UPSERT_MODIFIED
_DELETED = EntryKind.DELETED
_BOOKMARK = EntryKind.BOOKMARK


@dataclass(slots=True)
class Entry:
    """One event for the channel.

    ``key`` groups entries that coalesce (None: never coalesces); ``size`` is the number of
    bytes charged against the budget while the entry is pending or in flight; ``value`` is
    opaque to the channel. The constructor checks the fields and raises ``ValueError`` (bad
    kind or size) or ``TypeError`` (unhashable key, size not an int). An Entry must not be
    changed after it was sent: the channel keeps it until the batch holding it is taken.
    """

    key: Hashable | None
    kind: EntryKind
    size: int
    value: object

    def __post_init__(self) -> None:
        if type(self.kind) is not EntryKind:
            try:
                self.kind = EntryKind(self.kind)
            except ValueError:
                raise ValueError(f"Entry.kind: {self.kind!r} is not an EntryKind") from None
        if type(self.size) is not int:
            raise TypeError(f"Entry.size: expected an int, got {type(self.size).__name__}")
        if self.size < 0:
            raise ValueError(f"Entry.size: must be >= 0, got {self.size}")
        try:
            hash(self.key)
        except TypeError:
            raise TypeError(f"Entry.key: must be hashable, got {type(self.key).__name__}") from None


def merge(old: Entry, new: Entry) -> Entry | None:
    """The entry that replaces pending ``old`` when ``new`` (same key) is sent, or None.

    None means the two do not merge (a bookmark meets an object event): ``new`` is queued on
    its own. Both must be keyed, non-BARRIER entries; see the module's table.
    """
    new_kind = new.kind
    old_kind = old.kind
    if (old_kind is _BOOKMARK) is not (new_kind is _BOOKMARK):
        return None
    if new_kind is _DELETED or new_kind is _BOOKMARK:
        return new
    # new is ADDED or MODIFIED from here on.
    if old_kind is _ADDED or old_kind is _DELETED:
        if new_kind is _ADDED:
            return new
        return Entry(new.key, _ADDED, new.size, new.value)
    return new
