"""Read-your-writes on ``GET /manifests``: a read the cache is behind for waits, bounded.

After an operation succeeded, the object it wrote has a watermark (``server._freshness``):
the resourceVersion the write produced, or "deleted". A read whose stored object is older
(or still there after the deletion) waits for the ingest path to commit the watch's catch-up
(an event, no polling) for at most ``Freshness.wait_seconds``, reading the store again each
time the watermark changes. When the bound passes it answers with what the store has, adds
the header ``X-Kubesvc-Stale`` ("resourceVersion <have> < <want>", or "deleted object still
cached") and logs a warning.

The listings Orca reads right after a deploy (a Spinnaker cluster, ``.../cluster/{app}/
{cluster}``, and its dynamic targets, ``.../dynamic/{criteria}``) honour the same watermarks,
all those of the listed account, kind and namespace (``list_fresh``): each listed object at
least as new as written, each deleted one absent, under the same bound and header.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from .._freshness import Freshness, FreshnessKey, object_key
from .._kinds import KindRef
from ..store import StoredObject

__all__ = ["STALE_HEADER", "list_fresh", "read_fresh"]

log = logging.getLogger("server.api.fresh")
STALE_HEADER = "X-Kubesvc-Stale"


async def read_fresh(
    freshness: Freshness,
    find: Callable[[], Awaitable[StoredObject | None]],
    account: str,
    ref: KindRef,
    namespace: str,
    name: str,
) -> tuple[StoredObject | None, dict[str, str]]:
    """``find()``'s answer once the cache honours the object's watermark (or the bound
    passed: then with the stale header). Raises what ``find`` raises."""
    stored = await find()
    group = stored.group if stored is not None else ref.group
    if group is None:  # a custom kind named without its group and not cached: no key
        return stored, {}
    key = object_key(account, group, ref.kind if stored is None else stored.kind, namespace, name)
    if freshness.caught_up(key, stored):
        return stored, {}
    want = freshness.watermark(key)
    with trio.move_on_after(freshness.wait_seconds):
        while not freshness.caught_up(key, stored):
            await freshness.wait(key)
            stored = await find()
        return stored, {}
    have = stored.resource_version if stored is not None else "none"
    if want == "deleted":
        note = "deleted object still cached"
    else:
        note = f"resourceVersion {have} < {want}"
    log.warning(
        "GET manifest %s %s/%s in %s: the cache did not catch up with the last write within "
        "%.1f s (%s); answering what it has",
        ref.token,
        namespace,
        name,
        account,
        freshness.wait_seconds,
        note,
    )
    return stored, {STALE_HEADER: note}


def _lagging(
    freshness: Freshness, keys: Sequence[FreshnessKey], found: Sequence[StoredObject]
) -> FreshnessKey | None:
    """The first of ``keys`` whose watermark the listing ``found`` does not honour."""
    by_key = {(o.group, o.kind.lower(), o.name): o for o in found}
    for key in keys:
        if not freshness.caught_up(key, by_key.get((key[1], key[2], key[4]))):
            return key
    return None


async def list_fresh(
    freshness: Freshness,
    list_all: Callable[[], Awaitable[list[StoredObject]]],
    account: str,
    ref: KindRef,
    namespace: str,
) -> tuple[list[StoredObject], dict[str, str]]:
    """``list_all()``'s answer (the objects of ``ref`` in ``account`` and ``namespace``) once
    it honours every watermark of that scope (or the bound passed: then with the stale
    header). Raises what ``list_all`` raises."""
    found = await list_all()
    if not freshness.pending(account, ref.group, ref.kind, namespace):
        return found, {}
    with trio.move_on_after(freshness.wait_seconds):
        while True:
            key = _lagging(
                freshness, freshness.pending(account, ref.group, ref.kind, namespace), found
            )
            if key is None:
                return found, {}
            await freshness.wait(key)
            found = await list_all()
    key = _lagging(freshness, freshness.pending(account, ref.group, ref.kind, namespace), found)
    if key is None:  # caught up as the bound passed
        return found, {}
    want = freshness.watermark(key)
    note = f"{key[4]}: " + (
        "deleted object still cached" if want == "deleted" else f"resourceVersion < {want}"
    )
    log.warning(
        "list %s in %s/%s: the cache did not catch up with the last write within %.1f s (%s); "
        "answering what it has",
        ref.token,
        account,
        namespace or "_",
        freshness.wait_seconds,
        note,
    )
    return found, {STALE_HEADER: note}
