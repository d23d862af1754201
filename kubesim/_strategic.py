"""Kubernetes strategic merge patch (``application/strategic-merge-patch+json``).

Theory of operation: like a JSON merge patch (maps merge, ``null`` deletes a key), except
that lists follow the field's patch strategy (``_schema.smp_list_strategy``): a list of objects
with a merge key merges item by item (``containers`` by ``name``, ``volumeMounts`` by
``mountPath``, ...), a list of scalars with the merge strategy is a union
(``metadata.finalizers``), and any other list is replaced. Directives:

- ``{"$patch": "replace"}`` in a map: the map becomes the patch's map; as a list item: the
  list becomes the patch's other items.
- ``{"$patch": "delete"}`` in a map: the field is removed; in a keyed list item (with its
  merge key): that item is removed. ``"$patch": "merge"`` is the default.
- ``"$deleteFromPrimitiveList/<field>": [values]`` removes those values from a scalar list.
- ``"$setElementOrder/<field>": [items or keys]`` orders the merged list: the listed items in
  that order, the server-only items kept where they were relative to them.
- ``"$retainKeys": [names]`` drops the map's keys not named (after merging).
"""

from __future__ import annotations

from typing import Any

from ._errors import PatchError, nested_too_deeply
from ._jsonvalue import clone, type_name
from ._schema import BUILTIN_KINDS, smp_list_strategy

__all__ = ["apply_strategic_merge_patch"]

_DELETE_FROM = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


def apply_strategic_merge_patch(obj: dict[str, Any], patch: Any, kind: str) -> dict[str, Any]:
    """Apply a strategic merge patch to ``obj`` (an object of ``kind``); return a new object.

    Raises :class:`PatchError`: code 400 when ``patch`` is not a JSON object, 415 for a kind
    with no strategic merge schema (custom resources, like the apiserver), and 422 for a
    directive that does not apply (a keyed list item without its merge key, an unknown
    ``$patch`` value, ...); the message names the field's path.
    """
    if not isinstance(patch, dict):
        raise PatchError(
            f"strategic merge patch must be a JSON object, got {type_name(patch)}", code=400
        )
    if kind not in BUILTIN_KINDS:
        raise PatchError(
            f"strategic merge patch is not supported for {kind}: use "
            "application/merge-patch+json, application/json-patch+json or "
            "application/apply-patch+yaml",
            code=415,
        )
    try:
        # One deep copy up front; the merge then edits that copy in place.
        result = _merge_map(clone(obj), patch, kind, ())
    except RecursionError:
        raise nested_too_deeply("the strategic merge patch or the object") from None
    if result is None:
        raise PatchError('"$patch": "delete" cannot delete the whole object')
    return result


def _merge_map(
    original: Any, patch: dict[str, Any], kind: str, names: tuple[str, ...]
) -> dict[str, Any] | None:
    """Merge ``patch`` into ``original`` (ours to change); None means the map is deleted."""
    directive = patch.get("$patch")
    if directive is not None:
        if directive == "delete":
            return None
        if directive == "replace":
            return _merge_map({}, {k: v for k, v in patch.items() if k != "$patch"}, kind, names)
        if directive != "merge":
            raise PatchError(f"{_where(names)}: unknown $patch directive {directive!r}")
    result: dict[str, Any] = original if isinstance(original, dict) else {}
    retain: Any = None
    orders: dict[str, Any] = {}
    # The server's order of each list the patch orders, taken before merging changes it.
    server_lists = {
        key[len(_SET_ORDER) :]: list(result.get(key[len(_SET_ORDER) :]) or [])
        for key in patch
        if key.startswith(_SET_ORDER)
    }
    for key, value in patch.items():
        if key.startswith("$"):
            if key == "$retainKeys":
                retain = value
            elif key.startswith(_SET_ORDER):
                orders[key[len(_SET_ORDER) :]] = value
            elif key.startswith(_DELETE_FROM):
                field = key[len(_DELETE_FROM) :]
                _delete_from_list(result, field, value, names)
            elif key != "$patch":
                raise PatchError(f"{_where(names)}: unknown directive {key!r}")
            continue
        path = (*names, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value, kind, path)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, kind, path)
        else:
            result[key] = value
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            server = server_lists.get(field, [])
            result[field] = _set_order(result[field], order, server, kind, (*names, field))
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError(f"{_where(names)}: $retainKeys must be a list of field names")
        keep = set(retain)
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _merge_list(original: Any, patch: list[Any], kind: str, names: tuple[str, ...]) -> list[Any]:
    strategy = smp_list_strategy(kind, names)
    if strategy is None:
        return _without_directives(patch, kind, names)
    if strategy == "":  # a set of scalars: union in order
        base = list(original) if isinstance(original, list) else []
        for value in patch:
            if value not in base:
                base.append(value)
        return base
    key = strategy
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        rest = [i for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
        return _merge_list([], rest, kind, names)
    items: list[Any] = original if isinstance(original, list) else []
    position = {
        item[key]: index
        for index, item in enumerate(items)
        if isinstance(item, dict) and key in item
    }
    deleted: set[Any] = set()
    for index, item in enumerate(patch):
        if not isinstance(item, dict) or key not in item:
            raise PatchError(
                f"{_where(names)}[{index}]: does not contain declared merge key: {key}"
            )
        if isinstance(item[key], dict | list):
            raise PatchError(f"{_where(names)}[{index}].{key}: a merge key must be a scalar")
        at = position.get(item[key])
        if at is None or item[key] in deleted:
            if item.get("$patch") == "delete":
                continue  # deleting what is not there is not an error
            merged = _merge_map({}, item, kind, names)
            if merged is not None:
                position[item[key]] = len(items)
                deleted.discard(item[key])
                items.append(merged)
            continue
        merged = _merge_map(items[at], item, kind, names)
        if merged is None:
            deleted.add(item[key])
        else:
            items[at] = merged
    if deleted:
        items = [i for i in items if not (isinstance(i, dict) and i.get(key) in deleted)]
    return items


def _without_directives(patch: list[Any], kind: str, names: tuple[str, ...]) -> list[Any]:
    # A replaced list is taken as given, but maps inside it drop nulls and directives the way
    # the apiserver's merge into an empty original does.
    out: list[Any] = []
    for item in patch:
        if isinstance(item, dict):
            merged = _merge_map({}, item, kind, names)
            if merged is not None:
                out.append(merged)
        else:
            out.append(clone(item))
    return out


def _delete_from_list(
    result: dict[str, Any], field: str, values: Any, names: tuple[str, ...]
) -> None:
    if not isinstance(values, list):
        raise PatchError(f"{_where((*names, field))}: {_DELETE_FROM}{field} must be a list")
    current = result.get(field)
    if isinstance(current, list):
        result[field] = [v for v in current if v not in values]


def _set_order(
    items: list[Any], order: Any, server: list[Any], kind: str, names: tuple[str, ...]
) -> list[Any]:
    """Order the merged ``items`` as the apiserver does: the items the order names, sorted by
    it, merged with the server-only items, which keep their places in the ``server`` list."""
    if not isinstance(order, list):
        raise PatchError(f"{_where(names)}: {_SET_ORDER}{names[-1]} must be a list")
    key = smp_list_strategy(kind, names)

    def identity(item: Any) -> Any:
        if key and isinstance(item, dict):
            item = item.get(key)
        return None if isinstance(item, dict | list) else item

    # The order lists items ({"name": "x"}) for keyed lists and values for scalar lists.
    rank: dict[Any, int] = {}
    for index, entry in enumerate(order):
        if identity(entry) is not None:
            rank.setdefault(identity(entry), index)
    at_server = {identity(item): index for index, item in enumerate(server)}
    ordered = sorted((i for i in items if identity(i) in rank), key=lambda i: rank[identity(i)])
    server_only = [i for i in items if identity(i) not in rank]
    out: list[Any] = []
    left = right = 0
    while left < len(ordered) and right < len(server_only):
        here = at_server.get(identity(ordered[left]))
        if here is None or here < at_server.get(identity(server_only[right]), len(server)):
            out.append(ordered[left])
            left += 1
        else:
            out.append(server_only[right])
            right += 1
    return out + ordered[left:] + server_only[right:]


def _where(names: tuple[str, ...]) -> str:
    return ".".join(names) if names else "<root>"
