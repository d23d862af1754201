"""Client-side apply's strategic merge patch, computed as ``kubectl apply`` does (sans-I/O).

Theory of operation (k8s.io/apimachinery's ``strategicpatch.CreateThreeWayMergePatch``,
ported; the names follow it). Three documents: *original* (the last-applied-configuration
annotation: what was applied last time), *modified* (what is applied now) and *current* (the
live object). Two diffs, walking *modified* with the kind's schema (``_smp_schema``):

- the delta, current -> modified without deletions: what to add or change. A field of
  modified that current lacks or has differently is set; a list merged by key
  (``containers`` by ``name``, ``env`` by ``name``, ``volumeMounts`` by ``mountPath``...)
  is diffed item by item, so items only the live object has (a ``kubectl set env`` entry,
  an injected sidecar, a webhook's volume) are not mentioned and stay;
- the deletions, original -> modified without changes: a map key we applied before and no
  longer do becomes ``null``; a keyed list item we dropped becomes
  ``{<key>: <value>, "$patch": "delete"}``; a value dropped from a merged scalar list goes
  to ``$deleteFromPrimitiveList/<field>``.

Where either diff touches a merged list it adds ``$setElementOrder/<field>`` (modified's
order, by key) so the API server orders the result as the manifest does, with the live
object's own items kept where they were; a map or list item whose field has the
``retainKeys`` strategy (a volume, a Deployment's strategy) gets ``$retainKeys`` (the keys
modified sets), so switching a volume's source or the strategy's type drops the old one's
fields. The two patches are then merged into one (``_smp_merge``), sent as
``application/strategic-merge-patch+json``. kubectl's default ``--overwrite`` is assumed: a
field changed by someone else and by us is set to ours, with no conflict check.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ._smp_merge import (
    DELETE_FROM_PRIMITIVE_LIST,
    DIRECTIVE,
    RETAIN_KEYS,
    SET_ELEMENT_ORDER,
    deduplicate_scalars,
    fail,
    go_string,
    merge_key_value_equal,
    merge_map,
    normalize_slice_order,
    same_type,
    same_value,
    slice_element_kind,
)
from ._smp_schema import PatchSchema

__all__ = ["three_way_strategic_merge_patch"]


@dataclass(frozen=True, slots=True)
class _DiffOptions:
    set_element_order: bool = True
    ignore_changes_and_additions: bool = False
    ignore_deletions: bool = False
    build_retain_keys: bool = False


_DELTA = _DiffOptions(ignore_deletions=True)
_DELETIONS = _DiffOptions(ignore_changes_and_additions=True)


def _retaining(options: _DiffOptions, retain_keys: bool) -> _DiffOptions:
    if options.build_retain_keys == retain_keys:
        return options
    return replace(options, build_retain_keys=retain_keys)


def three_way_strategic_merge_patch(
    original: dict[str, Any] | None,
    modified: dict[str, Any],
    current: dict[str, Any],
    schema: PatchSchema,
    root: str,
) -> dict[str, Any]:
    """The strategic merge patch taking ``current`` to ``modified`` and removing what
    ``original`` had and ``modified`` drops, for an object whose definition in ``schema`` is
    ``root``. Returns ``{}`` when nothing needs to change; the inputs are not changed.

    Raises InvalidOperation (SmpError) where kubectl fails too: a keyed list item without
    its merge key, a list mixing objects and scalars, an unknown ``$patch`` directive."""
    delta = _diff_maps(current, modified, schema, root, _DELTA)
    deletions = _diff_maps(original or {}, modified, schema, root, _DELETIONS)
    return merge_map(deletions, _copy(delta), schema, root)


def _copy(value: Any) -> Any:
    # The delta holds parts of ``modified``, and merging changes what it is given.
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _diff_maps(
    original: dict[str, Any],
    modified: dict[str, Any],
    schema: PatchSchema,
    node: str | None,
    options: _DiffOptions,
) -> dict[str, Any]:
    """Go's ``diffMaps``: the patch taking ``original`` to ``modified`` under ``options``."""
    patch: dict[str, Any] = {}
    retain: list[str] = []
    for key, want in modified.items():
        if options.build_retain_keys and want is not None:
            retain.append(key)
        if key not in original:
            if not options.ignore_changes_and_additions:
                patch[key] = want
            continue
        have = original[key]
        if have == want and same_type(have, want):
            # Equal values give an empty patch (no order or retainKeys to send either); a
            # deep comparison in C first keeps a re-apply of an unchanged manifest cheap.
            # (Python's == takes a nested True for 1, which Go's DeepEqual does not: a
            # manifest swapping those in one field keeps the live value.)
            continue
        if key == DIRECTIVE:
            if not isinstance(have, str) or not isinstance(want, str):
                raise fail(f"invalid value for special key: {DIRECTIVE}")
            if have != want:
                patch[key] = want
            continue
        if not same_type(have, want):
            if not options.ignore_changes_and_additions:
                patch[key] = want
            continue
        if isinstance(want, dict):
            _map_diff(key, have, want, patch, schema, node, options)
        elif isinstance(want, list):
            _slice_diff(key, have, want, patch, schema, node, options)
        elif not options.ignore_changes_and_additions and not same_value(have, want):
            patch[key] = want
    if not options.ignore_deletions:
        for key in original:
            if key not in modified:
                patch[key] = None
    if retain and (patch or _has_additional_new_field(original, modified)):
        patch[RETAIN_KEYS] = sorted(retain, key=go_string)
    return patch


def _has_additional_new_field(original: dict[str, Any], modified: dict[str, Any]) -> bool:
    return any(v is not None and k not in modified for k, v in original.items())


def _map_diff(
    key: str,
    have: dict[str, Any],
    want: dict[str, Any],
    patch: dict[str, Any],
    schema: PatchSchema,
    node: str | None,
    options: _DiffOptions,
) -> None:
    meta = schema.field(node, key)
    if meta.strategy == "replace":
        if not options.ignore_changes_and_additions:
            patch[key] = want
        return
    nested = _diff_maps(have, want, schema, meta.node, _retaining(options, meta.retain_keys))
    if nested:
        patch[key] = nested


def _slice_diff(
    key: str,
    have: list[Any],
    want: list[Any],
    patch: dict[str, Any],
    schema: PatchSchema,
    node: str | None,
    options: _DiffOptions,
) -> None:
    meta = schema.field(node, key)
    if meta.strategy != "merge":  # replaced whole when it differs
        if not options.ignore_changes_and_additions and not same_value(have, want):
            patch[key] = want
        return
    added, deleted, order = _diff_lists(
        have,
        want,
        schema,
        meta.node,
        meta.merge_key,
        _retaining(options, meta.retain_keys),
    )
    if added:
        patch[key] = added
    if deleted:
        patch[f"{DELETE_FROM_PRIMITIVE_LIST}/{key}"] = deleted
    if order:
        patch[f"{SET_ELEMENT_ORDER}/{key}"] = order


def _diff_lists(
    original: list[Any],
    modified: list[Any],
    schema: PatchSchema,
    node: str | None,
    merge_key: str,
    options: _DiffOptions,
) -> tuple[list[Any], list[Any], list[Any]]:
    """Go's ``diffLists``: (the patch's list, the scalars to delete, the order list)."""
    if not original:
        if not modified or options.ignore_changes_and_additions:
            return [], [], []
        return modified, [], []
    if slice_element_kind(original, modified) == "map":
        changed, deletions = _diff_lists_of_maps(
            original, modified, schema, node, merge_key, options
        )
        changed = normalize_slice_order(changed, modified, merge_key, True) + deletions
        order: list[Any] = []
        if options.set_element_order and (
            (
                not options.ignore_changes_and_additions
                and (changed or not _is_order_same(original, modified, merge_key))
            )
            or (not options.ignore_deletions and changed)
        ):
            order = [{merge_key: item[merge_key]} for item in modified]
        return changed, [], order
    added, removed = _diff_lists_of_scalars(original, modified, options)
    added = normalize_slice_order(added, modified, merge_key, False)
    order = []
    if options.set_element_order and (
        (not options.ignore_deletions and removed)
        or (not options.ignore_changes_and_additions and not same_value(original, modified))
    ):
        order = modified
    return added, removed, order


def _is_order_same(original: list[Any], modified: list[Any], merge_key: str) -> bool:
    if len(original) != len(modified):
        return False
    return all(
        merge_key_value_equal(o, m, merge_key) for o, m in zip(original, modified, strict=True)
    )


def _diff_lists_of_scalars(
    original: list[Any], modified: list[Any], options: _DiffOptions
) -> tuple[list[Any], list[Any]]:
    """Walks both lists sorted by their text (as Go prints them): (added, removed)."""
    left = sorted(original, key=go_string)
    right = sorted(modified, key=go_string)
    added: list[Any] = []
    removed: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        have = go_string(left[i]) if i < len(left) else None
        want = go_string(right[j]) if j < len(right) else None
        if have is not None and want is not None and have == want:
            i += 1
            j += 1
        elif have is None or (want is not None and have > want):
            if not options.ignore_changes_and_additions:
                added.append(right[j])
            j += 1
        else:
            if not options.ignore_deletions:
                removed.append(left[i])
            i += 1
    return added, deduplicate_scalars(removed)


def _diff_lists_of_maps(
    original: list[Any],
    modified: list[Any],
    schema: PatchSchema,
    node: str | None,
    merge_key: str,
    options: _DiffOptions,
) -> tuple[list[Any], list[Any]]:
    """Walks both lists sorted by merge key: (the changed and added items, the items to
    delete as ``{key: value, "$patch": "delete"}``)."""
    left = _sorted_by_key(original, merge_key)
    right = _sorted_by_key(modified, merge_key)
    patch: list[Any] = []
    deletions: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        have = go_string(left[i][merge_key]) if i < len(left) else None
        want = go_string(right[j][merge_key]) if j < len(right) else None
        if have is not None and want is not None and have == want:
            nested = _diff_maps(left[i], right[j], schema, node, options)
            if nested:
                nested[merge_key] = right[j][merge_key]
                patch.append(nested)
            i += 1
            j += 1
        elif have is None or (want is not None and have > want):
            if not options.ignore_changes_and_additions:
                patch.append(right[j])
            j += 1
        else:
            if not options.ignore_deletions:
                deletions.append({merge_key: left[i][merge_key], DIRECTIVE: "delete"})
            i += 1
    return patch, deletions


def _sorted_by_key(items: list[Any], merge_key: str) -> list[dict[str, Any]]:
    for item in items:
        if not isinstance(item, dict):
            raise fail(f"expected a map in a list merged by {merge_key}, got {item!r}")
        if merge_key not in item:
            raise fail(f"map {item} does not contain declared merge key: {merge_key}")
    return sorted(items, key=lambda item: go_string(item[merge_key]))
