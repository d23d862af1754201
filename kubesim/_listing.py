"""Paged lists that are consistent snapshots, like the API server's (sans-I/O).

Theory of operation: a continued page (or an ``Exact`` read) must show the objects as they
were at the list's resourceVersion R, not as they are now. kubesim keeps no old copies of
the store; it rebuilds "the store at R" from the resource's event ring instead: walking the
events after R, the first event of each key says what that key held at R (nothing for an
ADDED, the previous version for a MODIFIED or a DELETED). Every other key is unchanged since
R. When the ring no longer reaches back to R, the snapshot is gone: 410 Expired, as when etcd
has compacted a continue token's revision.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterator

from kubesim._resources import ResourceType
from kubesim._selectors import Selector
from kubesim._store import ResourceStore, Stored

__all__ = ["Page", "read_page"]

Key = tuple[str, str]


def versions_at(store: ResourceStore, rv: int) -> dict[Key, Stored | None] | None:
    """Key -> its version at ``rv`` (None: absent then), for keys changed since ``rv``.

    Returns None when the ring no longer reaches back to ``rv`` (the snapshot is gone).
    """
    ring = store.ring
    seq = ring.seq_after(rv)
    if seq is None:
        return None
    changed: dict[Key, Stored | None] = {}
    for position in range(seq, ring.next_seq):
        _, _, stored, previous = ring.get(position)
        if stored.key not in changed:
            changed[stored.key] = previous
    return changed


class Page:
    """One page: the versions, and the key to continue after (None when it was the last)."""

    __slots__ = ("items", "last_key", "remaining")

    def __init__(self, items: list[Stored], last_key: Key | None, remaining: int | None) -> None:
        self.items = items
        self.last_key = last_key
        self.remaining = remaining


def _in_range(key: Key, namespace: str | None, start: Key | None) -> bool:
    if namespace is not None and key[0] != namespace:
        return False
    return start is None or key > start


def read_page(
    store: ResourceStore,
    rtype: ResourceType,
    *,
    namespace: str | None,
    selector: Selector,
    limit: int,
    start: Key | None,
    overrides: dict[Key, Stored | None],
) -> Page:
    """Up to ``limit`` (0: all) matching versions after ``start``, as of the snapshot that
    ``overrides`` describes (``{}``: now)."""
    if not rtype.namespaced:
        namespace = None
    keys, lo, hi = store.key_range(namespace, start)
    objects = store.objects
    if not overrides and selector.empty:  # the common case: a straight slice of the store
        end = hi if limit <= 0 else min(hi, lo + limit)
        sliced = [objects[k] for k in keys[lo:end]]
        more = end < hi
        return Page(sliced, sliced[-1].key if more and sliced else None, hi - end if more else None)
    # Keys deleted since the snapshot are not in the store any more: merge them back in.
    extra = sorted(
        k
        for k, v in overrides.items()
        if v is not None and k not in objects and _in_range(k, namespace, start)
    )
    # A generator over indexes starts at lo in O(1) (islice would walk up to it).
    merged: Iterator[Key] = heapq.merge((keys[i] for i in range(lo, hi)), extra)
    items: list[Stored] = []
    name = selector.name
    check = not selector.empty
    last: Key | None = None
    for key in merged:
        if limit > 0 and len(items) >= limit:
            last = items[-1].key
            break
        if name is not None and key[1] != name:
            continue
        version = overrides[key] if key in overrides else objects[key]
        if version is None:
            continue
        if check and not selector.matches(version.namespace, version.name, version.labels):
            continue
        items.append(version)
    remaining = None
    if last is not None and not check:
        after = hi - bisect_right(keys, last, lo, hi)
        after += sum(1 for k in extra if k > last)
        after -= sum(1 for k, v in overrides.items() if v is None and k in objects and k > last
                     and _in_range(k, namespace, None))  # fmt: skip
        remaining = max(0, after)
    return Page(items, last, remaining)
