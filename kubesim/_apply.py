"""Server-side apply and the managedFields bookkeeping of every write, as pure functions.

Theory of operation (a small structured-merge-diff). Each ``metadata.managedFields`` entry
says which field paths one manager owns, per operation (``Apply`` for server-side apply,
``Update`` for create/update/patch). :func:`server_side_apply`:

1. takes the applied configuration's field set (``_fieldpath.field_values``);
2. finds conflicts: fields another manager owns that the applied configuration sets to a
   value different from the live one; without ``force`` they raise :class:`ApplyConflict`,
   with ``force`` the other manager loses them;
3. merges the configuration into the live object (maps by key, associative lists by their
   keys, sets by value, everything else replaced);
4. removes the fields the manager applied last time but no longer does, unless another
   manager owns them;
5. records the manager's new ``Apply`` entry.

:func:`update_managed_fields` does the bookkeeping of other writes: the writer takes the
fields it added or changed (from whoever owned them; no conflicts), and fields the write
removed leave every manager. A live object with no managedFields at all is treated, as the
API server does, as owned by the manager ``before-first-apply``.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from ._errors import ApplyConflict, InvalidObject, nested_too_deeply
from ._fieldpath import (
    Path,
    describe_path,
    diff_paths,
    field_values,
    from_fields_v1,
    item_key,
    set_element,
    to_fields_v1,
    tree_add,
    tree_remove,
)
from ._jsonvalue import clone, json_equal
from ._schema import is_atomic_map, ssa_list_type

__all__ = ["ApplyConflict", "server_side_apply", "update_managed_fields"]

Operation = Literal["Update", "Apply"]

# Set by the API server: an applied configuration never merges them into the live object.
_SERVER_SET: Final = frozenset(
    {
        "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
        "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
    }
)  # fmt: skip


class _Entry:
    """One managedFields entry, decoded: who, how, and the set of paths it owns."""

    __slots__ = ("api_version", "manager", "operation", "paths", "raw", "touched")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.manager: str = str(raw.get("manager", ""))
        self.operation: str = str(raw.get("operation", ""))
        self.api_version: str = str(raw.get("apiVersion", ""))
        self.paths: set[Path] = from_fields_v1(raw.get("fieldsV1"))
        self.touched = False

    def encode(self) -> dict[str, Any]:
        if not self.touched:
            return self.raw
        entry = {k: v for k, v in self.raw.items() if k != "fieldsV1"}
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = to_fields_v1(self.paths)
        return entry

    def describe(self) -> str:
        # How the apiserver names a manager in conflict messages (fieldmanager printManager).
        text = f'"{self.manager}"'
        if self.raw.get("subresource"):
            text += f' with subresource "{self.raw["subresource"]}"'
        text += f" using {self.api_version}"
        if self.operation == "Update" and self.raw.get("time"):
            text += f" at {self.raw['time']}"
        return text


def _new_entry(manager: str, operation: str, api_version: str, now: str) -> _Entry:
    entry = _Entry(
        {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now}
    )
    entry.touched = True
    return entry


def _entries(obj: dict[str, Any] | None) -> list[_Entry]:
    if obj is None:
        return []
    raw = (obj.get("metadata") or {}).get("managedFields")
    if not isinstance(raw, list):
        return []
    return [_Entry(e) for e in raw if isinstance(e, dict)]


def _encode(entries: list[_Entry]) -> list[dict[str, Any]]:
    return [e.encode() for e in entries if e.paths]


def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    *,
    manager: str,
    force: bool,
    now: str,
    reset_fields: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Apply ``applied`` (an applied configuration) for ``manager``; return the new object.

    ``reset_fields`` names top-level fields this endpoint does not write (``("status",)`` for
    the main resource of a kind with a status subresource): they are neither merged nor owned,
    as the API server's reset-fields strategy does.

    ``live`` is the stored object, or None when the apply creates it. ``now`` is the RFC 3339
    time written in the manager's entry. The result is a new object with
    ``metadata.managedFields`` updated; the caller still sets resourceVersion, uid, ... as for
    any write, and checks an applied ``metadata.resourceVersion`` itself.

    Raises :class:`ApplyConflict` (409) listing ``(manager, path)`` for every field owned by
    another manager that the configuration changes, unless ``force``; and
    :class:`InvalidObject` (400) when ``manager`` is empty or ``applied`` is not an object;
    :class:`PatchError` (400) for documents nested too deeply to walk.
    """
    if not manager:
        raise InvalidObject(
            "PATCH, application/apply-patch+yaml: fieldManager is required", status_code=400
        )
    if not isinstance(applied, dict):
        raise InvalidObject("the applied configuration must be an object", status_code=400)
    if reset_fields:
        applied = {k: v for k, v in applied.items() if k not in reset_fields}
    try:
        return _apply(live, applied, manager, force, now)
    except RecursionError:
        raise nested_too_deeply("the applied configuration or the object") from None


def _apply(
    live: dict[str, Any] | None, applied: dict[str, Any], manager: str, force: bool, now: str
) -> dict[str, Any]:
    kind = str(applied.get("kind") or (live or {}).get("kind") or "")
    api_version = str(applied.get("apiVersion") or (live or {}).get("apiVersion") or "")
    applied_values = field_values(applied, kind)

    entries = _entries(live)
    if live is not None and not entries:
        before = _new_entry("before-first-apply", "Update", api_version, now)
        before.paths = set(field_values(live, kind))
        entries = [before] if before.paths else []

    mine: _Entry | None = None
    conflicts: list[tuple[_Entry, Path]] = []
    live_values: dict[Path, Any] | None = None  # computed only if someone else shares a path
    for entry in entries:
        if entry.manager == manager:
            if entry.operation == "Apply":
                mine = entry
            continue
        shared = entry.paths & applied_values.keys()
        if shared and live_values is None:
            live_values = field_values(live, kind) if live is not None else {}
        for path in shared:
            assert live_values is not None
            if path in live_values and not json_equal(live_values[path], applied_values[path]):
                conflicts.append((entry, path))
    if conflicts and not force:
        conflicts.sort(key=lambda c: (c[0].manager, describe_path(c[1])))
        raise ApplyConflict(
            [(e.manager, describe_path(p)) for e, p in conflicts],
            describe={e.manager: e.describe() for e, _ in conflicts},
        )
    for entry, path in conflicts:
        entry.paths.discard(path)
        entry.touched = True

    result = _merge_root(live, applied, kind)
    if mine is not None:
        others: set[Path] = set()
        for entry in entries:
            if entry is not mine:
                others |= entry.paths
        kept = others | applied_values.keys()
        stale = mine.paths - kept
        if stale:
            # A path that is still an ancestor of something kept stays (an empty map applied
            # once, now with keys in it): only what is owned by nobody at all goes.
            ancestors = {path[:i] for path in kept for i in range(1, len(path))}
            # Parents first: removing a field of an item first could remove the key that finds it.
            for path in sorted(stale - ancestors, key=len):
                _remove_path(result, path, kind)
    else:
        mine = _new_entry(manager, "Apply", api_version, now)
        entries.append(mine)
    new_paths = set(applied_values)
    fields = mine.raw.get("fieldsV1")
    if new_paths != mine.paths or not isinstance(fields, dict):
        fields = to_fields_v1(new_paths)
    # else: the same fields as last time, and the stored FieldsV1 tree still says so
    mine.paths = new_paths
    mine.raw = {**mine.raw, "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1",
                "fieldsV1": fields}  # fmt: skip
    mine.touched = False  # raw is up to date: encode() returns it as it is
    result.setdefault("metadata", {})["managedFields"] = _encode(entries)
    return result


def _merge_root(live: dict[str, Any] | None, applied: dict[str, Any], kind: str) -> dict[str, Any]:
    result: dict[str, Any] = clone(live) if live is not None else {}
    for name, value in applied.items():
        if value is None:
            continue
        if name == "metadata" and isinstance(value, dict):
            meta = result.setdefault("metadata", {})
            for key, meta_value in value.items():
                if key in _SERVER_SET or meta_value is None:
                    continue
                meta[key] = _merge(meta.get(key), meta_value, ("metadata", key), kind)
            continue
        result[name] = _merge(result.get(name), value, (name,), kind)
    return result


def _merge(live: Any, applied: Any, names: Path, kind: str) -> Any:
    if isinstance(applied, dict):
        if not isinstance(live, dict) or is_atomic_map(kind, names):
            return _drop_nulls(applied)
        merged = dict(live)  # live is already our own copy
        for key, value in applied.items():
            if value is not None:
                merged[key] = _merge(live.get(key), value, (*names, key), kind)
        return merged
    if isinstance(applied, list) and isinstance(live, list):
        list_type = ssa_list_type(kind, names)
        if not applied and list_type.kind != "atomic":
            return live  # merging no items into a keyed list or a set leaves it as it is
        if list_type.kind == "map":
            keys = [item_key(item, list_type) for item in live]
            position = {k: i for i, k in enumerate(keys) if k is not None}
            merged_list = list(live)
            for item in applied:
                key = item_key(item, list_type)
                at = position.get(key) if key is not None else None
                if at is None:
                    merged_list.append(_drop_nulls(item))
                else:
                    merged_list[at] = _merge(merged_list[at], item, names, kind)
            return merged_list
        if list_type.kind == "set":
            return list(live) + [v for v in applied if v not in live]
    return _drop_nulls(applied)


def _drop_nulls(value: Any) -> Any:
    # Plain loops, not comprehensions: one stack frame per level of nesting, not two.
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if v is not None:
                out[k] = _drop_nulls(v)
        return out
    if isinstance(value, list):
        items: list[Any] = []
        for v in value:
            items.append(_drop_nulls(v))
        return items
    return value


def _remove_path(obj: dict[str, Any], path: Path, kind: str) -> None:
    """Remove the field or item at ``path`` from ``obj`` if it is there."""
    parent: Any = obj
    names: Path = ()
    for depth, element in enumerate(path):
        last = depth == len(path) - 1
        tag, text = element[:2], element[2:]
        if tag == "f:":
            if not isinstance(parent, dict) or text not in parent:
                return
            if last:
                del parent[text]
                return
            parent = parent[text]
            names = (*names, text)
        elif tag in ("k:", "v:"):
            if not isinstance(parent, list):
                return
            list_type = ssa_list_type(kind, names)
            if tag == "k:":
                matches = [
                    i for i, item in enumerate(parent) if item_key(item, list_type) == element
                ]
            else:
                matches = [i for i, item in enumerate(parent) if set_element(item) == element]
            if not matches:
                return
            if last:
                del parent[matches[0]]
                return
            parent = parent[matches[0]]
        else:
            return


def update_managed_fields(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    operation: Operation = "Update",
    now: str,
    subresource: str = "",
) -> list[dict[str, Any]]:
    """The managedFields for ``new`` after ``manager`` wrote it over ``old`` (None: a create).

    ``subresource`` names the subresource written (``"status"``, ``"scale"``): the manager's
    entry for it is a separate one that says so, as in the API server.

    The manager's entry (by manager and operation) gains every field the write added or
    changed and those fields leave the other managers; fields the write removed leave every
    manager; entries left with no fields are dropped. An empty ``manager`` changes nothing
    but the removals. Entries the write does not touch are returned as they were in ``old``
    (the same dicts). Raises :class:`PatchError` (400) only for an object nested too deeply
    to walk.
    """
    try:
        return _update(old, new, manager, operation, now, subresource)
    except RecursionError:
        raise nested_too_deeply("the object") from None


def _update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    operation: str,
    now: str,
    subresource: str,
) -> list[dict[str, Any]]:
    kind = str(new.get("kind") or (old or {}).get("kind") or "")
    api_version = str(new.get("apiVersion") or (old or {}).get("apiVersion") or "")
    if old is None:
        changed: list[Path] = list(field_values(new, kind))
        removed: list[Path] = []
        raw_entries: list[Any] = []
    else:
        changed, removed = diff_paths(old, new, kind)
        raw_entries = (old.get("metadata") or {}).get("managedFields") or []
        if not isinstance(raw_entries, list):
            raw_entries = []
    lost = changed + removed
    out: list[dict[str, Any]] = []
    mine: dict[str, Any] | None = None
    for raw in raw_entries:
        if not isinstance(raw, dict):
            continue
        if (
            manager
            and raw.get("manager") == manager
            and raw.get("operation") == operation
            and raw.get("subresource", "") == subresource
        ):
            mine = raw
            continue
        tree = raw.get("fieldsV1")
        if not isinstance(tree, dict):
            continue
        edited = tree
        for path in lost:
            smaller = tree_remove(edited, path)
            if smaller is not None:
                edited = smaller
        if edited is tree:
            out.append(raw)
        elif edited:
            out.append({**raw, "fieldsV1": edited})
    if mine is not None or (manager and changed):
        tree = mine.get("fieldsV1") if mine is not None else None
        edited = tree if isinstance(tree, dict) else {}
        for path in removed:
            smaller = tree_remove(edited, path)
            if smaller is not None:
                edited = smaller
        for path in changed:
            edited = tree_add(edited, path)
        if mine is not None and edited is tree:
            out.append(mine)  # nothing of ours changed: keep the entry (and its time) as it was
        elif edited:
            if mine is None:
                if old is None:
                    edited = to_fields_v1(changed)  # sorted, like the apiserver writes it
                entry: dict[str, Any] = {"manager": manager, "operation": operation}
                if subresource:
                    entry["subresource"] = subresource
            else:
                entry = {k: v for k, v in mine.items() if k != "fieldsV1"}
            entry.update(apiVersion=api_version, time=now, fieldsType="FieldsV1", fieldsV1=edited)
            out.append(entry)
    return out
