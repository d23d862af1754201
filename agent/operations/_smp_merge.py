"""Merging two strategic merge patches into one, and the list helpers the diff shares.

kubectl's three-way patch is two diffs (``_smp_diff``) merged: the deletions (what the last
applied configuration had and the new one drops) and the delta (what the live object lacks
or has differently), merged as k8s.io/apimachinery's ``mergeMap`` does with
``MergeOptions{MergeParallelList: false, IgnoreUnmatchedNulls: false}``: nulls and the
directive lists (``$setElementOrder/``, ``$deleteFromPrimitiveList/``, ``$retainKeys``) are
kept for the API server, and keyed lists are merged item by item and put in the order
``$setElementOrder`` gives. This is a port of that code (names follow it, so the two can be
read side by side); Go's typed values become :func:`same_value` and :func:`go_string`.

Values are JSON values (dict, list, str, int, float, bool, None). The functions change the
dicts and lists of the patches they are given, which the diff creates for them.
"""

from __future__ import annotations

from typing import Any

from ._errors import InvalidOperation
from ._smp_schema import FieldPatch, PatchSchema

__all__ = [
    "DELETE_FROM_PRIMITIVE_LIST",
    "DIRECTIVE",
    "RETAIN_KEYS",
    "SET_ELEMENT_ORDER",
    "deduplicate_scalars",
    "go_string",
    "merge_key_value_equal",
    "merge_map",
    "normalize_slice_order",
    "same_value",
    "slice_element_kind",
]

DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
SET_ELEMENT_ORDER = "$setElementOrder"
DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList"


class SmpError(InvalidOperation):
    """The strategic merge patch cannot be computed (a keyed list item without its key, ...)."""


def fail(message: str) -> SmpError:
    return SmpError(f"cannot compute the strategic merge patch: {message}")


# -- Go's view of JSON values -------------------------------------------------------------


_KINDS = {
    dict: "map",
    list: "slice",
    str: "string",
    int: "number",
    float: "number",
    bool: "bool",
    type(None): "nil",
}


def _kind(value: Any) -> str:
    """A value's type as Go's decoded JSON has it (integral numbers are int64 there)."""
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    for base, name in _KINDS.items():  # a subclass (decoded by something else)
        if isinstance(value, base):
            return "bool" if isinstance(value, bool) else name
    return "nil"


def same_type(left: Any, right: Any) -> bool:
    return _kind(left) == _kind(right)


def same_value(left: Any, right: Any) -> bool:
    """``reflect.DeepEqual`` of two JSON values (so ``True`` is not ``1``)."""
    if left is right:
        return True
    kind = _kind(left)
    if kind != _kind(right):
        return False
    if kind == "map":
        return left.keys() == right.keys() and all(same_value(v, right[k]) for k, v in left.items())
    if kind == "slice":
        return len(left) == len(right) and all(map(same_value, left, right))
    return bool(left == right)


def go_string(value: Any) -> str:
    """``fmt.Sprintf("%v", value)``: how the Go code orders merge keys and scalars."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 2**63 else repr(value)
    if value is None:
        return "<nil>"
    return str(value)


def slice_element_kind(*slices: list[Any]) -> str:
    """The one kind of the items of ``slices`` ("map" or a scalar kind); raises SmpError for
    mixed kinds, lists of lists, or no items at all (as ``sliceElementType``)."""
    found = ""
    for items in slices:
        for item in items:
            kind = _kind(item)
            if kind == "slice":
                raise fail("lists of lists are not supported")
            if found and kind != found:
                raise fail(f"list element types are not identical: {slices}")
            found = kind
    if not found:
        raise fail("no elements in any of the given slices")
    return found


def merge_key_value_equal(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return same_type(left, right) and left == right
    if not isinstance(left, dict) or not isinstance(right, dict):
        raise fail(f"expected maps in a list merged by {merge_key}, got {left!r} and {right!r}")
    for item in (left, right):
        if merge_key not in item:
            raise fail(f"map {item} does not contain declared merge key: {merge_key}")
    return same_type(left[merge_key], right[merge_key]) and left[merge_key] == right[merge_key]


def deduplicate_scalars(items: list[Any]) -> list[Any]:
    """Go's ``deduplicateScalars``: a duplicate is replaced by the last item (order moves)."""
    items = list(items)
    length = len(items) - 1
    i = 0
    while i < length:
        j = i + 1
        while j <= length:
            if same_type(items[i], items[j]) and items[i] == items[j]:
                items[j] = items[length]
                del items[length:]
                length -= 1
                j -= 1
            j += 1
        i += 1
    return items


def _identity(item: Any, merge_key: str, is_map: bool) -> tuple[str, Any]:
    """What Go's ``index`` compares with ``==``: the merge key's value, or the scalar."""
    value = item
    if is_map:
        value = item.get(merge_key) if isinstance(item, dict) else None
    if isinstance(value, dict | list):  # not comparable in Go: never equal to another
        return ("object", id(value))
    return (_kind(value), value)


def _index(items: list[Any], value: Any, merge_key: str, is_map: bool) -> int:
    want = _identity(value, merge_key, is_map)
    for at, item in enumerate(items):
        if _identity(item, merge_key, is_map) == want:
            return at
    return -1


def _extract_to_delete_items(items: list[Any]) -> tuple[list[Any], list[Any]]:
    keep: list[Any] = []
    delete: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise fail(f"expected a map in a keyed list, got {item!r}")
        (delete if item.get(DIRECTIVE) == "delete" else keep).append(item)
    return keep, delete


def normalize_slice_order(
    to_sort: list[Any], order: list[Any], merge_key: str, is_map: bool
) -> list[Any]:
    """``to_sort`` sorted (stably) by the positions its items have in ``order``, the
    ``$patch: delete`` items of a keyed list last."""
    to_delete: list[Any] = []
    if is_map:
        for item in (*to_sort, *order):
            if not isinstance(item, dict) or merge_key not in item:
                raise fail(f"map {item} does not contain declared merge key: {merge_key}")
        to_sort, to_delete = _extract_to_delete_items(to_sort)
    ranked = sorted(
        to_sort,
        key=lambda item: _index(order, item, merge_key, is_map) % (len(order) + 1),
    )
    return ranked + to_delete


def _merge_sorted_slice(
    left: list[Any], right: list[Any], server_order: list[Any], merge_key: str, is_map: bool
) -> list[Any]:
    """Go's ``mergeSortedSlice``: interleave two sorted lists by the live list's order."""
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            at_left = _index(server_order, left[i], merge_key, is_map)
            at_right = _index(server_order, right[j], merge_key, is_map)
            if at_left >= 0 and at_right >= 0 and at_left < at_right:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _normalize_element_order(
    patch: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    merge_key: str,
    is_map: bool,
) -> list[Any]:
    patch = normalize_slice_order(patch, patch_order, merge_key, is_map)
    server_only = normalize_slice_order(server_only, server_order, merge_key, is_map)
    return _merge_sorted_slice(server_only, patch, server_order, merge_key, is_map)


def _find_by_key(items: list[Any], merge_key: str, value: Any) -> int:
    for at, item in enumerate(items):
        if not isinstance(item, dict):
            raise fail(f"value for key {at} is not a map")
        if merge_key in item and same_type(item[merge_key], value) and item[merge_key] == value:
            return at
    return -1


def _partition(merged: list[Any], by: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    """(the items of ``merged`` that ``by`` has, those it has not)."""
    inside: list[Any] = []
    outside: list[Any] = []
    if not merge_key:
        present = {(_kind(v), v) for v in by if not isinstance(v, dict | list)}
        for item in merged:
            wanted = not isinstance(item, dict | list) and (_kind(item), item) in present
            (inside if wanted else outside).append(item)
        return inside, outside
    for item in merged:
        if not isinstance(item, dict) or merge_key not in item:
            raise fail(f"map {item} does not contain declared merge key: {merge_key}")
        wanted = _find_by_key(by, merge_key, item[merge_key]) >= 0
        (inside if wanted else outside).append(item)
    return inside, outside


def remove_directives(value: Any) -> tuple[Any, bool]:
    """``value`` without the maps that carry a ``$patch`` (and whether to keep it at all)."""
    if isinstance(value, dict):
        if DIRECTIVE in value:
            return None, False
        for key, item in list(value.items()):
            cleaned, keep = remove_directives(item)
            if keep:
                value[key] = cleaned
            else:
                del value[key]
        return value, True
    if isinstance(value, list):
        out = []
        for item in value:
            cleaned, keep = remove_directives(item)
            if keep:
                out.append(cleaned)
        return out, True
    return value, True


# -- mergeMap with MergeParallelList=false, IgnoreUnmatchedNulls=false --------------------


def merge_map(
    original: dict[str, Any] | None, patch: dict[str, Any], schema: PatchSchema, node: str | None
) -> dict[str, Any]:
    """Merge ``patch`` into ``original`` (both patches; ``original`` is changed and returned)."""
    if DIRECTIVE in patch:
        directive = patch[DIRECTIVE]
        if directive == "replace":
            del patch[DIRECTIVE]
            return patch
        if directive == "delete":
            return {}
        raise fail(f"unknown $patch directive {directive!r}")
    if original is None:
        original = {}
    if RETAIN_KEYS in patch:
        retain = patch.pop(RETAIN_KEYS)
        if RETAIN_KEYS in original and not same_value(original[RETAIN_KEYS], retain):
            raise fail(f"{original[RETAIN_KEYS]} and {retain} differ in the two patches")
        original.setdefault(RETAIN_KEYS, retain)
    _merge_ordered_lists(original, patch, schema, node)
    for key, value in list(patch.items()):
        if key.startswith(DELETE_FROM_PRIMITIVE_LIST):
            original[key] = value  # kept for the API server, not applied here
            continue
        if value is None:
            original.pop(key, None)
        if key not in original or not same_type(original[key], value):
            cleaned, keep = remove_directives(value)
            if keep:
                original[key] = cleaned
            else:
                original.pop(key, None)
            continue
        if isinstance(value, dict):
            meta = schema.field(node, key)
            if meta.strategy == "replace":
                original[key] = value
            else:
                original[key] = merge_map(original[key], value, schema, meta.node)
        elif isinstance(value, list):
            original[key] = _merge_slice_handler(
                original[key], value, schema, schema.field(node, key)
            )
        else:
            original[key] = value
    return original


def _merge_slice_handler(
    original: list[Any], patch: list[Any], schema: PatchSchema, meta: FieldPatch
) -> list[Any]:
    if meta.strategy == "merge":
        return _merge_slice(original, patch, schema, meta.node, meta.merge_key)
    return patch


def _merge_slice(
    original: list[Any], patch: list[Any], schema: PatchSchema, node: str | None, merge_key: str
) -> list[Any]:
    if not original and not patch:
        return original
    kind = slice_element_kind(original, patch)
    if kind != "map":
        merged = deduplicate_scalars(original + patch)
    else:
        if not merge_key:
            raise fail(f"cannot merge lists without merge key for {node or 'a field'}")
        original, patch = _merge_special_elements(original, patch, merge_key)
        merged = _merge_plain_elements(original, patch, schema, node, merge_key)
    inside, outside = _partition(merged, patch, merge_key)
    return _normalize_element_order(inside, outside, patch, original, merge_key, kind == "map")


def _merge_special_elements(
    original: list[Any], patch: list[Any], merge_key: str
) -> tuple[list[Any], list[Any]]:
    plain: list[Any] = []
    replace = False
    for item in patch:
        directive = item.get(DIRECTIVE) if isinstance(item, dict) else None
        if directive is None:
            plain.append(item)
        elif directive == "delete":
            if merge_key not in item:
                raise fail(f"map {item} does not contain declared merge key: {merge_key}")
            value = item[merge_key]
            original = [
                o
                for o in original
                if not (
                    isinstance(o, dict)
                    and same_type(o.get(merge_key), value)
                    and o.get(merge_key) == value
                )
            ]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise fail("merging lists cannot yet be specified in the patch")
        else:
            raise fail(f"unknown $patch directive {directive!r}")
    if replace:
        return plain, []
    return original, plain


def _merge_plain_elements(
    original: list[Any],
    patch: list[Any],
    schema: PatchSchema,
    node: str | None,
    merge_key: str,
) -> list[Any]:
    original = list(original)
    for item in patch:
        if merge_key not in item:
            raise fail(f"map {item} does not contain declared merge key: {merge_key}")
        at = _find_by_key(original, merge_key, item[merge_key])
        if at >= 0:
            original[at] = merge_map(original[at], item, schema, node)
        else:
            original.append(item)
    return original


def _validate_order(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """Every item of the patch's list is in its ``$setElementOrder`` list, in that order."""
    if not order or not patch_list:
        return
    plain = _extract_to_delete_items(patch_list)[0] if merge_key else patch_list
    p = s = 0
    while p < len(plain) and s < len(order):
        if isinstance(plain[p], dict) and DIRECTIVE in plain[p]:
            p += 1
            continue
        if merge_key_value_equal(plain[p], order[s], merge_key):
            p += 1
        s += 1
    if p < len(plain):
        raise fail(f"the order in patch list {patch_list} doesn't match {order}")


def _merge_ordered_lists(
    original: dict[str, Any], patch: dict[str, Any], schema: PatchSchema, node: str | None
) -> None:
    """Go's ``mergePatchIntoOriginal``: each ``$setElementOrder/<field>`` moves to
    ``original``, and ``<field>`` is merged there and put in that order."""
    for key in [k for k in patch if k.startswith(SET_ELEMENT_ORDER)]:
        order = patch.pop(key)
        if key in original and not same_value(original[key], order):
            raise fail(f"the two patches order {key} differently")
        original.setdefault(key, order)
        prefix, _, field = key.partition("/")
        if prefix != SET_ELEMENT_ORDER or not field:
            raise fail(f"invalid {SET_ELEMENT_ORDER} key {key!r}")
        if not isinstance(order, list):
            raise fail(f"{key} must be a list")
        have, want = original.get(field), patch.get(field)
        if (have is not None and not isinstance(have, list)) or (
            want is not None and not isinstance(want, list)
        ):
            raise fail(f"{field} must be a list beside {key}")
        meta = schema.field(node, field)
        _validate_order(want or [], order, meta.merge_key)
        if have is not None and want is None:
            merged = have
        elif have is None and want is not None:
            merged = remove_directives(want)[0]
        elif have is not None and want is not None:
            merged = _merge_slice_handler(have, want, schema, meta)
        else:
            continue
        inside, outside = _partition(merged, order, meta.merge_key)
        is_map = slice_element_kind(have or [], want or []) == "map"
        original[field] = _normalize_element_order(
            inside, outside, order, have or [], meta.merge_key, is_map
        )
        patch.pop(field, None)
