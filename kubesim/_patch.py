"""The patch formats of ``PATCH`` requests, as pure functions on decoded JSON.

- ``application/merge-patch+json``: :func:`apply_merge_patch` (RFC 7386).
- ``application/json-patch+json``: :func:`apply_json_patch` (RFC 6902, JSON pointers RFC 6901).
- ``application/strategic-merge-patch+json``: :func:`apply_strategic_merge_patch`
  (defined in ``_strategic.py``, re-exported here).

Every function returns a new object and leaves its arguments untouched; the result shares no
mutable structure with them, so the caller may change it freely (set resourceVersion, ...).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ._errors import PatchError, nested_too_deeply
from ._jsonvalue import clone, json_equal, type_name
from ._strategic import apply_strategic_merge_patch

__all__ = ["PatchError", "apply_json_patch", "apply_merge_patch", "apply_strategic_merge_patch"]


def apply_merge_patch(obj: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, the rest replaces.

    Given a dict ``obj`` and a dict ``patch`` the result is a dict. Raises :class:`PatchError`
    (400) only for documents nested too deeply to walk.
    """
    try:
        if not isinstance(patch, dict):
            return clone(patch)
        result: dict[str, Any] = clone(obj) if isinstance(obj, dict) else {}
        _merge_into(result, patch)
    except RecursionError:
        raise nested_too_deeply("the merge patch or the object") from None
    return result


def _merge_into(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            current = target.get(key)
            if isinstance(current, dict):
                _merge_into(current, value)  # current is already our own copy
            else:
                fresh: dict[str, Any] = {}
                _merge_into(fresh, value)
                target[key] = fresh
        else:
            target[key] = clone(value)


# --- RFC 6902 -----------------------------------------------------------------------------

_OPS: Final = frozenset({"add", "remove", "replace", "move", "copy", "test"})
# The apiserver's bounds: at most 10,000 operations, and "copy" may add at most 3 times its
# 3 MiB request body limit (a few copies of copies would otherwise grow a document
# exponentially).
MAX_OPERATIONS: Final = 10_000
MAX_COPIED_BYTES: Final = 3 * 3 * 1024 * 1024
_size = msgspec.json.Encoder().encode


class _OpFailed(Exception):
    """Internal: why one operation failed; turned into a PatchError naming the op."""


def apply_json_patch(obj: dict[str, Any], ops: Any) -> dict[str, Any]:
    """Apply an RFC 6902 JSON patch to ``obj`` (atomically: on error nothing is returned).

    Raises :class:`PatchError` with code 400 when ``ops`` is not a list of well-formed
    operations, 413 for more than :data:`MAX_OPERATIONS` of them, and 422 when an operation
    does not apply (missing path, failed ``test``, bad array index, copies adding more than
    :data:`MAX_COPIED_BYTES`, ...). The message names the operation's index, op and path.
    """
    if not isinstance(ops, list):
        raise PatchError(
            f"json patch must be a JSON array of operations, got {type_name(ops)}", code=400
        )
    if len(ops) > MAX_OPERATIONS:
        raise PatchError(
            f"The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {len(ops)}",
            code=413,
        )
    checked = [_check_op(index, op) for index, op in enumerate(ops)]
    try:
        return _apply_all(clone(obj), checked)
    except RecursionError:
        raise nested_too_deeply("the JSON patch or the object") from None


def _apply_all(doc: Any, checked: list[tuple[str, list[str], dict[str, Any]]]) -> dict[str, Any]:
    copied = 0
    for index, (name, path, op) in enumerate(checked):
        try:
            if name == "copy":
                copied += len(_size(_get(doc, parse_pointer(op["from"]))))
                if copied > MAX_COPIED_BYTES:
                    raise _OpFailed(
                        f"the accumulated size of copies is {copied} bytes, exceeding the "
                        f"limit of {MAX_COPIED_BYTES}"
                    )
            doc = _apply_op(doc, name, path, op)
        except _OpFailed as exc:
            raise PatchError(
                f"json patch operation {index} ({name} {op['path']!r}) failed: {exc}"
            ) from None
    if not isinstance(doc, dict):
        raise PatchError(f"json patch result must be a JSON object, got {type_name(doc)}")
    return doc


def _check_op(index: int, op: Any) -> tuple[str, list[str], dict[str, Any]]:
    where = f"json patch operation {index}"
    if not isinstance(op, dict):
        raise PatchError(f"{where}: must be a JSON object, got {type_name(op)}", code=400)
    name = op.get("op")
    if name not in _OPS:
        raise PatchError(
            f"{where}: unknown op {name!r}; expected one of add, remove, replace, move, copy, test",
            code=400,
        )
    for member in ("path", "from") if name in ("move", "copy") else ("path",):
        if not isinstance(op.get(member), str):
            raise PatchError(f"{where} ({name}): {member!r} must be a string", code=400)
    if name in ("add", "replace", "test") and "value" not in op:
        raise PatchError(f"{where} ({name} {op['path']!r}): missing 'value'", code=400)
    try:
        tokens = parse_pointer(op["path"])
        if "from" in op and name in ("move", "copy"):
            parse_pointer(op["from"])
    except ValueError as exc:
        raise PatchError(f"{where} ({name} {op['path']!r}): {exc}", code=400) from None
    return name, tokens, op


def parse_pointer(pointer: str) -> list[str]:
    """Split an RFC 6901 JSON pointer into unescaped reference tokens ("" is the whole doc).

    Raises ValueError for a pointer not starting with "/" or with a "~" not followed by 0 or 1.
    """
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {pointer!r} must be empty or start with '/'")
    tokens = pointer[1:].split("/")
    if "~" in pointer:
        for token in tokens:
            rest = token.replace("~0", "").replace("~1", "")
            if "~" in rest:
                raise ValueError(f"JSON pointer {pointer!r}: '~' must be followed by 0 or 1")
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in tokens]
    return tokens


def _apply_op(doc: Any, name: str, path: list[str], op: dict[str, Any]) -> Any:
    if name == "add":
        return _add(doc, path, clone(op["value"]))
    if name == "remove":
        _remove(doc, path)
        return doc
    if name == "replace":
        if not path:
            return clone(op["value"])
        parent, token = _parent(doc, path)
        if isinstance(parent, dict):
            if token not in parent:
                raise _OpFailed(f"the key {token!r} does not exist")
            parent[token] = clone(op["value"])
        else:
            parent[_index(parent, token, appending=False)] = clone(op["value"])
        return doc
    if name == "test":
        actual = _get(doc, path)
        if not json_equal(actual, op["value"]):
            raise _OpFailed(f"test failed: the value is {actual!r}, not {op['value']!r}")
        return doc
    source = parse_pointer(op["from"])
    if name == "move":
        if source == path:
            return doc
        if len(path) > len(source) and path[: len(source)] == source:
            raise _OpFailed(f"cannot move {op['from']!r} into its own child")
        value = _get(doc, source)
        _remove(doc, source)
        return _add(doc, path, value)
    # copy
    return _add(doc, path, clone(_get(doc, source)))


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent, token = _parent(doc, path)
    if isinstance(parent, dict):
        parent[token] = value
    else:
        parent.insert(_index(parent, token, appending=True), value)
    return doc


def _remove(doc: Any, path: list[str]) -> None:
    if not path:
        raise _OpFailed("cannot remove the whole document")
    parent, token = _parent(doc, path)
    if isinstance(parent, dict):
        if token not in parent:
            raise _OpFailed(f"the key {token!r} does not exist")
        del parent[token]
    else:
        del parent[_index(parent, token, appending=False)]


def _parent(doc: Any, path: list[str]) -> tuple[Any, str]:
    parent = _get(doc, path[:-1])
    if not isinstance(parent, dict | list):
        shown = "/" + "/".join(path[:-1])
        raise _OpFailed(f"the parent {shown!r} is a {type_name(parent)}, not an object or array")
    return parent, path[-1]


def _get(doc: Any, path: list[str]) -> Any:
    current = doc
    for depth, token in enumerate(path):
        if isinstance(current, dict):
            if token not in current:
                shown = "/" + "/".join(path[: depth + 1])
                raise _OpFailed(f"{shown!r} does not exist")
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, appending=False)]
        else:
            shown = "/" + "/".join(path[:depth])
            raise _OpFailed(f"{shown!r} is a {type_name(current)}, it has no member {token!r}")
    return current


def _index(array: list[Any], token: str, *, appending: bool) -> int:
    if token == "-" and appending:
        return len(array)
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise _OpFailed(f"{token!r} is not an array index")
    index = int(token)
    limit = len(array) if appending else len(array) - 1
    if index > limit:
        raise _OpFailed(f"array index {index} is out of range (the array has {len(array)} items)")
    return index
