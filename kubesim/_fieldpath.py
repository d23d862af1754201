"""Field sets: which fields of an object a manager owns, and their FieldsV1 encoding.

A field path is a tuple of path elements written the way FieldsV1 writes them:

- ``f:<name>``     a field of a map (``f:spec``, ``f:replicas``);
- ``k:<json>``     an item of an associative list, by its key fields (``k:{"name":"app"}``,
                   keys sorted, compact JSON, defaults filled in:
                   ``k:{"containerPort":80,"protocol":"TCP"}``);
- ``v:<json>``     an item of a set (``v:"example.com/finalizer"``);
- ``i:<n>``        never produced here (kubesim treats plain lists as atomic).

:func:`field_values` maps every owned path of an object to its value: scalars, atomic lists and
atomic maps are leaves; an associative-list item is owned as a whole (its path maps to
:data:`ITEM`) and field by field. FieldsV1 marks a node that is owned and has owned children
with a ``"."`` child; a leaf is ``{}``.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from ._schema import ListType, is_atomic_map, ssa_list_type

__all__ = [
    "ITEM",
    "Path",
    "describe_path",
    "field_values",
    "from_fields_v1",
    "item_key",
    "set_element",
    "to_fields_v1",
]

Path = tuple[str, ...]


class _Item:
    """Marks the path of an associative-list item itself; all items compare equal."""

    def __repr__(self) -> str:
        return "ITEM"


ITEM: Final = _Item()

# Fields the API server sets and no manager owns (the fieldmanager strips them before diffing).
_SERVER_METADATA: Final = frozenset(
    {
        "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
        "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
    }
)  # fmt: skip

_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def _dumps(value: Any) -> str:
    """Compact JSON with sorted keys, as FieldsV1 keys are written (msgspec: several times
    faster than the json module, on the path of every write)."""
    return _encode_sorted(value).decode()


def item_key(item: Any, list_type: ListType) -> str | None:
    """The ``k:`` element of an associative-list item, or None if it lacks a key field."""
    if not isinstance(item, dict):
        return None
    key: dict[str, Any] = {}
    defaults = dict(list_type.defaults)
    for name in list_type.keys:
        if name in item:
            key[name] = item[name]
        elif name in defaults:
            key[name] = defaults[name]
        else:
            return None
    return "k:" + _dumps(key)


def set_element(item: Any) -> str:
    """The ``v:`` element of a set item."""
    return "v:" + _dumps(item)


def field_values(obj: dict[str, Any], kind: str) -> dict[Path, Any]:
    """Every field path of ``obj`` a manager can own, mapped to the value there."""
    out: dict[Path, Any] = {}
    for name, value in obj.items():
        if name in ("apiVersion", "kind"):
            continue
        if name == "metadata" and isinstance(value, dict):
            for meta, meta_value in value.items():
                if meta not in _SERVER_METADATA:
                    _walk(meta_value, ("f:metadata", "f:" + meta), ("metadata", meta), kind, out)
            continue
        _walk(value, ("f:" + name,), (name,), kind, out)
    return out


def _walk(value: Any, path: Path, names: Path, kind: str, out: dict[Path, Any]) -> None:
    if isinstance(value, dict):
        if not value or is_atomic_map(kind, names):
            out[path] = value
            return
        for name, child in value.items():
            _walk(child, (*path, "f:" + name), (*names, name), kind, out)
        return
    if isinstance(value, list) and value:
        list_type = ssa_list_type(kind, names)
        if list_type.kind == "map":
            keyed = [(item_key(item, list_type), item) for item in value]
            unique = {key for key, _ in keyed}
            if None not in unique and len(unique) == len(keyed):
                for key, item in keyed:
                    item_path = (*path, str(key))
                    out[item_path] = ITEM
                    for name, child in item.items():
                        _walk(child, (*item_path, "f:" + name), (*names, name), kind, out)
                return
        elif list_type.kind == "set" and not any(isinstance(v, dict | list) for v in value):
            for item in value:
                out[(*path, set_element(item))] = item
            return
    out[path] = value  # a scalar, an empty list, or an atomic list


def to_fields_v1(paths: Any) -> dict[str, Any]:
    """The FieldsV1 JSON object for an iterable of paths."""
    root: dict[str, Any] = {}
    owned: set[int] = set()  # ids of nodes that are themselves members
    for path in paths:
        node = root
        for element in path:
            node = node.setdefault(element, {})
        owned.add(id(node))
    return _finish(root, owned)


def _finish(node: dict[str, Any], owned: set[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if node and id(node) in owned:
        out["."] = {}
    for key in sorted(node):
        out[key] = _finish(node[key], owned)
    return out


def from_fields_v1(fields: Any) -> set[Path]:
    """The paths a FieldsV1 JSON object lists (anything malformed in it is ignored)."""
    out: set[Path] = set()
    if isinstance(fields, dict):
        _collect(fields, (), out)
    return out


def _collect(node: dict[str, Any], prefix: Path, out: set[Path]) -> None:
    for key, child in node.items():
        if key == ".":
            if prefix:
                out.add(prefix)
        elif isinstance(child, dict):
            if child:
                _collect(child, (*prefix, key), out)
            else:
                out.add((*prefix, key))


def describe_path(path: Path) -> str:
    """A path as structured-merge-diff prints it: ``.spec.containers[name="app"].image``."""
    parts: list[str] = []
    for element in path:
        tag, text = element[:2], element[2:]
        if tag == "f:":
            parts.append("." + text)
        elif tag == "k:":
            try:
                key = json.loads(text)
                parts.append("[" + ",".join(f"{k}={_dumps(v)}" for k, v in key.items()) + "]")
            except (ValueError, AttributeError):
                parts.append("[" + text + "]")
        elif tag == "v:":
            parts.append("[=" + text + "]")
        else:
            parts.append("[" + text + "]")
    return "".join(parts)


# --- comparing two objects and editing FieldsV1 trees in place of sets (the write hot path) ---


def diff_paths(
    old: dict[str, Any], new: dict[str, Any], kind: str
) -> tuple[list[Path], list[Path]]:
    """``(changed, removed)``: the owned paths of ``new`` that are new or hold another value
    than in ``old``, and the owned paths of ``old`` that ``new`` lacks.

    Equal subtrees are skipped with one C-level comparison, so a small change to a big object
    costs little.
    """
    changed: list[Path] = []
    removed: list[Path] = []
    old_top = {k: v for k, v in old.items() if k not in ("apiVersion", "kind", "metadata")}
    new_top = {k: v for k, v in new.items() if k not in ("apiVersion", "kind", "metadata")}
    _diff_maps(old_top, new_top, (), (), kind, changed, removed)
    old_meta, new_meta = old.get("metadata"), new.get("metadata")
    if isinstance(old_meta, dict) and isinstance(new_meta, dict):
        old_meta = {k: v for k, v in old_meta.items() if k not in _SERVER_METADATA}
        new_meta = {k: v for k, v in new_meta.items() if k not in _SERVER_METADATA}
        _diff_maps(old_meta, new_meta, ("f:metadata",), ("metadata",), kind, changed, removed)
    else:
        _diff_any(old_meta, new_meta, ("f:metadata",), ("metadata",), kind, changed, removed)
    return changed, removed


def _diff_maps(
    old: dict[str, Any],
    new: dict[str, Any],
    path: Path,
    names: Path,
    kind: str,
    changed: list[Path],
    removed: list[Path],
) -> None:
    for name, value in new.items():
        before = old.get(name, _MISSING)
        if before is value or (type(before) is type(value) and before == value):
            continue
        _diff_any(before, value, (*path, "f:" + name), (*names, name), kind, changed, removed)
    for name, value in old.items():
        if name not in new:
            sub: dict[Path, Any] = {}
            _walk(value, (*path, "f:" + name), (*names, name), kind, sub)
            removed.extend(sub)


_MISSING: Final = object()


def _diff_any(
    old: Any, new: Any, path: Path, names: Path, kind: str, changed: list[Path], removed: list[Path]
) -> None:
    if (
        isinstance(old, dict)
        and isinstance(new, dict)
        and old
        and new
        and not is_atomic_map(kind, names)
    ):
        _diff_maps(old, new, path, names, kind, changed, removed)
        return
    before: dict[Path, Any] = {}
    if old is not _MISSING:
        _walk(old, path, names, kind, before)
    after: dict[Path, Any] = {}
    if new is not _MISSING:
        _walk(new, path, names, kind, after)
    for p, v in after.items():
        if p not in before:
            changed.append(p)
        else:
            was = before[p]
            if v is not ITEM and not (type(was) is type(v) and was == v):
                changed.append(p)
    removed.extend(p for p in before if p not in after)


def tree_remove(tree: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """A copy of FieldsV1 ``tree`` without ``path``, sharing untouched nodes; None if absent."""
    return _tree_remove(tree, path, 0)


def _tree_remove(node: dict[str, Any], path: Path, depth: int) -> dict[str, Any] | None:
    key = path[depth]
    child = node.get(key)
    if not isinstance(child, dict):
        return None
    new_child: dict[str, Any] | None
    if depth == len(path) - 1:
        if not child:
            new_child = None  # an owned leaf: the key goes
        elif "." in child:
            new_child = {k: v for k, v in child.items() if k != "."}  # its children stay owned
        else:
            return None  # only the parent of owned fields, not owned itself
    else:
        replaced = _tree_remove(child, path, depth + 1)
        if replaced is None:
            return None
        if not replaced:
            new_child = None  # nothing owned below and not owned itself
        elif list(replaced) == ["."]:
            new_child = {}  # owned, with no owned children left: a leaf
        else:
            new_child = replaced
    out = dict(node)
    if new_child is None:
        del out[key]
    else:
        out[key] = new_child
    return out


def tree_add(tree: dict[str, Any], path: Path) -> dict[str, Any]:
    """A copy of FieldsV1 ``tree`` that owns ``path``, sharing untouched nodes."""
    out = dict(tree)
    key = path[0]
    child = tree.get(key)
    if len(path) == 1:
        if child is None:
            out[key] = {}
        elif child and "." not in child:
            out[key] = {".": {}, **child}
        return out
    if child is None:
        child = {}
    elif not child:
        child = {".": {}}  # a leaf gaining owned children keeps itself owned
    out[key] = tree_add(child, path[1:])
    return out
