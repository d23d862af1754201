"""A watch's position in a resource's history, and the bytes it should send next (sans-I/O).

Theory of operation: :class:`WatchCursor` decides where a watch starts (synthetic ADDED events
from a snapshot of object versions, then the ring from the snapshot's sequence number; or the
ring from the first event after a given resourceVersion), and :meth:`WatchCursor.take` hands
out the ready events as ONE bytes chunk of newline-delimited JSON of at most about
``max_bytes``: joining pre-serialized object bytes, never encoding an object. The server loop
sends each chunk with one ASGI send, because per-send overhead, not JSON, bounds a watch's
event rate. When the ring laps the cursor, the next chunk is the 410 ERROR event and the
cursor is finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from kubesim import _status
from kubesim._cluster import Cluster, parse_rv
from kubesim._errors import ApiError
from kubesim._resources import ResourceType
from kubesim._selectors import Selector
from kubesim._store import ADDED, DELETED, EVENT_TYPES, MODIFIED, Stored

__all__ = ["WatchCursor", "WatchOptions"]

_encode = msgspec.json.Encoder().encode
_PREFIX = tuple(b'{"type":"' + t.encode() + b'","object":' for t in EVENT_TYPES)
_SUFFIX = b"}\n"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_ANY = Selector()


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """The query parameters of a watch request that decide what it sends."""

    namespace: str | None = None
    selector: Selector = _ANY
    metadata_only: bool = False
    resource_version: str | None = None
    resource_version_match: str | None = None
    send_initial_events: bool | None = None
    allow_bookmarks: bool = False


class WatchCursor:
    """Where one watch is in its resource's history. Raises ApiError at construction for
    starts the API server refuses (410 too old, 504 too new, 422 bad streaming-list params)."""

    def __init__(self, cluster: Cluster, rtype: ResourceType, options: WatchOptions) -> None:
        self.cluster = cluster
        self.rtype = rtype
        self.options = options
        self.namespace = options.namespace if rtype.namespaced else None
        self.store = cluster.store(rtype)
        self.finished = False
        self.events_sent = 0
        self.last_rv = 0  # the resourceVersion of the last event taken from the ring
        self.seq = 0  # the ring sequence number of the next event to look at (set below)
        self._initial: list[Stored] = []
        self._initial_index = 0
        self._end_marker_rv: int | None = None
        #: this watch starts with every current object (a streaming list, or a watch from
        #: resourceVersion "" or "0"): a full listing, as costly as a list
        self.lists = False
        rv_text = options.resource_version or ""
        if options.send_initial_events is not None:
            if not cluster.config.watch_list:
                raise ApiError(
                    422,
                    "Invalid",
                    "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch "
                    "unless the WatchList feature gate is enabled",
                )
            if options.resource_version_match != "NotOlderThan":
                raise ApiError(
                    422,
                    "Invalid",
                    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
                    "resourceVersionMatch to NotOlderThan",
                )
            if options.send_initial_events and not options.allow_bookmarks:
                raise ApiError(
                    422,
                    "Invalid",
                    "allowWatchBookmarks: Forbidden: sendInitialEvents requires "
                    "allowWatchBookmarks=true",
                )
        elif options.resource_version_match:
            raise ApiError(
                422,
                "Invalid",
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch "
                "unless sendInitialEvents is provided",
            )
        if rv_text not in ("", "0"):
            rv = parse_rv(rv_text)
            if rv > cluster.resource_version:
                raise _status.too_large_rv(rv, cluster.resource_version)
        if options.send_initial_events or (
            options.send_initial_events is None and rv_text in ("", "0")
        ):
            self.lists = True
            self._snapshot()
            if options.send_initial_events:
                self._end_marker_rv = cluster.resource_version
            return
        if rv_text in ("", "0"):  # sendInitialEvents=false: only what happens from now on
            self.seq = self.store.ring.next_seq
            return
        rv = int(rv_text)
        seq = self.store.ring.seq_after(rv)
        if seq is None:
            raise _status.gone(rv, self.store.ring.evicted_rv)
        self.seq = seq

    def _snapshot(self) -> None:
        keys, lo, hi = self.store.key_range(self.namespace, None)
        objects = self.store.objects
        self._initial = [objects[k] for k in keys[lo:hi]]
        self.seq = self.store.ring.next_seq

    @property
    def ready(self) -> bool:
        """Something to send now (initial events, the end marker, or new history)."""
        return (
            self._initial_index < len(self._initial)
            or self._end_marker_rv is not None
            or self.seq < self.store.ring.next_seq
        )

    @property
    def caught_up(self) -> bool:
        return not self.ready

    def take(self, max_bytes: int, max_events: int | None = None) -> bytes:
        """The next ready events (at least one if ``ready``), about ``max_bytes`` at most and
        no more than ``max_events`` (used to cut a watch after an exact number of events)."""
        # The hot path of every watch: a few list appends per event and one join per chunk.
        limit = max_events if max_events is not None else 1 << 62
        parts: list[bytes] = []
        append = parts.append
        size = 0
        count = 0
        selector = self.options.selector
        check = not selector.empty
        meta_only = self.options.metadata_only
        initial = self._initial
        if initial:
            prefix = _PREFIX[0]
            index, end = self._initial_index, len(initial)
            while index < end and size < max_bytes and count < limit:
                stored = initial[index]
                index += 1
                if check and not selector.matches(stored.namespace, stored.name, stored.labels):
                    continue
                body = stored.meta_raw() if meta_only else stored.raw
                append(prefix)
                append(body)
                append(_SUFFIX)
                size += len(body)
                count += 1
            self._initial_index = index
            if index >= end:
                self._initial = []
                self._initial_index = 0
            else:
                return self._finish_take(parts, count)
        if self._end_marker_rv is not None:
            if size >= max_bytes or count >= limit:
                return self._finish_take(parts, count)
            append(self.bookmark(self._end_marker_rv, initial_end=True))
            self._end_marker_rv = None
            count += 1
        ring = self.store.ring
        namespace = self.namespace
        seq, next_seq = self.seq, ring.next_seq
        if seq < next_seq and seq < ring.first_seq:
            if parts:  # send what we have; the error comes with the next take
                return self._finish_take(parts, count)
            self.finished = True
            return self._error_line(_status.gone(self.last_rv, ring.evicted_rv))
        while seq < next_seq and size < max_bytes and count < limit:
            rv, event_type, stored, previous = ring.get(seq)
            seq += 1
            self.last_rv = rv
            if namespace is not None and stored.namespace != namespace:
                continue
            if check:
                now_in = selector.matches(stored.namespace, stored.name, stored.labels)
                if event_type == MODIFIED and previous is not None:
                    was_in = selector.matches(previous.namespace, previous.name, previous.labels)
                    if not (now_in or was_in):
                        continue
                    if not was_in:
                        event_type = ADDED  # the change moved it into the selection
                    elif not now_in:
                        event_type = DELETED  # ... or out of it
                elif not now_in:
                    continue
            body = stored.meta_raw() if meta_only else stored.raw
            append(_PREFIX[event_type])
            append(body)
            append(_SUFFIX)
            size += len(body)
            count += 1
        self.seq = seq
        return self._finish_take(parts, count)

    def _finish_take(self, parts: list[bytes], count: int) -> bytes:
        self.events_sent += count
        return b"".join(parts)

    def _error_line(self, error: ApiError) -> bytes:
        return b'{"type":"ERROR","object":' + _encode(error.status()) + _SUFFIX

    def bookmark(self, rv: int | None = None, *, initial_end: bool = False) -> bytes:
        """A BOOKMARK event line at ``rv`` (default: the cluster's current resourceVersion,
        valid only when the cursor is caught up)."""
        metadata: dict[str, Any] = {
            "resourceVersion": str(self.cluster.resource_version if rv is None else rv),
            "creationTimestamp": None,
        }
        if initial_end:
            metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
        if self.options.metadata_only:
            kind, api_version = "PartialObjectMetadata", "meta.k8s.io/v1"
        else:
            kind, api_version = self.rtype.kind, self.rtype.api_version
        obj = {"kind": kind, "apiVersion": api_version, "metadata": metadata}
        return b'{"type":"BOOKMARK","object":' + _encode(obj) + _SUFFIX
