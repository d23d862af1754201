"""Client-side apply's patch, computed like ``kubectl apply`` (sans-I/O).

Three inputs: *original* (the last-applied-configuration annotation of the live object, what
we applied last time), *modified* (what we apply now) and *current* (the live object). The
patch sets every field of *modified* that differs from *current* and deletes (``null``)
every field that *original* had and *modified* no longer has, leaving fields that others
(controllers, defaulting, other tools) set alone. Maps are merged key by key; lists are
replaced whole when they differ (JSON merge patch semantics, as kubectl does for kinds
without a strategic-merge schema), so the patch is sent as ``application/merge-patch+json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["three_way_merge_patch"]


def three_way_merge_patch(
    original: Mapping[str, Any] | None,
    modified: Mapping[str, Any],
    current: Mapping[str, Any],
) -> dict[str, Any]:
    """The merge patch that takes ``current`` to ``modified`` while keeping foreign fields.

    Returns ``{}`` when nothing needs to change.
    """
    patch: dict[str, Any] = {}
    for key, want in modified.items():
        have = current.get(key)
        if isinstance(want, Mapping) and isinstance(have, Mapping):
            before = (original or {}).get(key)
            nested = three_way_merge_patch(
                before if isinstance(before, Mapping) else None, want, have
            )
            if nested:
                patch[key] = nested
        elif key not in current or have != want:
            # A null in a merge patch means "delete": send a JSON null for a wanted null only
            # when the live value is set, which also deletes it (as kubectl does).
            patch[key] = _plain(want)
    for key in original or ():
        if key not in modified and key in current:
            patch[key] = None
    return patch


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
