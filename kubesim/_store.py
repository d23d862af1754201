"""The object store of one resource and its bounded event history.

Theory of operation: every object version is kept as one immutable :class:`Stored` holding the
object's JSON bytes, serialized once when the object changes. Lists and watches only join
those bytes (never re-encode per reader). Every change also appends ``(rv, type, stored)`` to
the resource's :class:`EventRing`, a fixed-capacity ring addressed by an ever-growing sequence
number; a watcher keeps the sequence number of the next event it wants, so when the ring
laps it the watcher learns it fell behind (and gets 410 Gone) instead of anything buffering
without bound.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from typing import Any

import msgspec

from kubesim._resources import ResourceType

__all__ = ["ADDED", "DELETED", "MODIFIED", "Event", "EventRing", "ResourceStore", "Stored"]

ADDED, MODIFIED, DELETED = 0, 1, 2
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class Stored:
    """One version of one object: its JSON bytes plus what selectors and paging need."""

    __slots__ = ("_meta", "labels", "name", "namespace", "raw", "rv", "uid")

    def __init__(
        self, namespace: str, name: str, uid: str, rv: int, labels: Mapping[str, str], raw: bytes
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.rv = rv
        self.labels = labels
        self.raw = raw
        self._meta: bytes | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def decode(self) -> dict[str, Any]:
        """A fresh dict of the object (the caller may change it)."""
        obj: dict[str, Any] = _decode(self.raw)
        return obj

    def meta_raw(self) -> bytes:
        """The object as ``PartialObjectMetadata`` JSON (computed once per version)."""
        if self._meta is None:
            metadata = self.decode().get("metadata", {})
            self._meta = _encode(
                {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": metadata,
                }
            )
        return self._meta


# (resourceVersion, ADDED|MODIFIED|DELETED, object version, the version before it or None):
# the previous version lets a watch with a label selector turn a MODIFIED that moves an
# object into or out of its selection into ADDED or DELETED, as the API server does, and
# lets a paged list rebuild the store as it was at its resourceVersion (_listing).
Event = tuple[int, int, Stored, Stored | None]


class EventRing:
    """The last ``capacity`` events of one resource, addressed by sequence number."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"watch history capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        # Grows up to ``capacity`` as events come, then wraps: a quiet resource of one of a
        # thousand simulated clusters costs a few slots, not ``capacity`` of them.
        self._buf: list[Event | None] = []
        self.next_seq = 0
        # The resourceVersion of the newest event that fell off the ring: a watch from any
        # resourceVersion >= this one still sees every later event.
        self.evicted_rv = 0

    @property
    def first_seq(self) -> int:
        return max(0, self.next_seq - self.capacity)

    def append(self, event: Event) -> None:
        if len(self._buf) < self.capacity:
            self._buf.append(event)
            self.next_seq += 1
            return
        slot = self.next_seq % self.capacity
        old = self._buf[slot]
        if old is not None:
            self.evicted_rv = old[0]
        self._buf[slot] = event
        self.next_seq += 1

    def get(self, seq: int) -> Event:
        """The event at ``seq``; the caller checks ``first_seq <= seq < next_seq``."""
        event = self._buf[seq % self.capacity]
        assert event is not None
        return event

    def seq_after(self, rv: int) -> int | None:
        """The sequence number of the first event newer than ``rv``; None if already evicted."""
        if rv < self.evicted_rv:
            return None
        lo, hi = self.first_seq, self.next_seq
        while lo < hi:
            mid = (lo + hi) // 2
            if self.get(mid)[0] <= rv:
                lo = mid + 1
            else:
                hi = mid
        return lo


class ResourceStore:
    """The objects of one resource type keyed by (namespace, name), plus its event ring."""

    def __init__(self, rtype: ResourceType, history: int) -> None:
        self.rtype = rtype
        self.objects: dict[tuple[str, str], Stored] = {}
        self.ring = EventRing(history)
        self.last_change_rv = 0
        self._sorted: list[tuple[str, str]] | None = []

    def put(self, stored: Stored, event_type: int) -> None:
        previous = self.objects.get(stored.key)
        if previous is None:
            self._sorted = None
        self.objects[stored.key] = stored
        self.last_change_rv = stored.rv
        self.ring.append((stored.rv, event_type, stored, previous))

    def remove(self, final: Stored) -> None:
        """Drop the object; ``final`` is its last version, stamped with the deletion's rv."""
        previous = self.objects.pop(final.key)
        self._sorted = None
        self.last_change_rv = final.rv
        self.ring.append((final.rv, DELETED, final, previous))

    def sorted_keys(self) -> list[tuple[str, str]]:
        """All keys in (namespace, name) order, as the API server lists them (cached)."""
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def key_range(
        self, namespace: str | None, start: tuple[str, str] | None
    ) -> tuple[list[tuple[str, str]], int, int]:
        """(sorted keys, lo, hi): keys after ``start`` (exclusive), in ``namespace`` if given."""
        keys = self.sorted_keys()
        lo, hi = 0, len(keys)
        if namespace is not None:
            lo = bisect_left(keys, (namespace, ""))
            hi = bisect_left(keys, (namespace + "\x00", ""))
        if start is not None:
            lo = max(lo, bisect_left(keys, start, lo, hi))
            if lo < hi and keys[lo] == start:
                lo += 1
        return keys, lo, hi
