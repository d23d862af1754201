"""How a kind's lists and maps merge, read from a cluster's OpenAPI documents (sans-I/O).

A strategic merge patch needs, for every field it walks, the field's
``x-kubernetes-patch-strategy`` ("merge", "retainKeys", "merge,retainKeys", "replace") and,
for a list merged by key, its ``x-kubernetes-patch-merge-key``. kubectl reads them from the
schema of the kind being applied, field by field from the kind's root, following each
field's ``$ref`` (wrapped in ``allOf`` in OpenAPI v3) to the definition of its value, or of
its items for a list. :class:`PatchSchema` is that walk, over the definitions of one document
(a group-version's ``/openapi/v3/...`` document, or the whole ``/openapi/v2``), reduced when
parsed to the fields that can carry a strategy or lead to one.

Which kinds take a strategic merge patch is the document's too: the kind's PATCH operation
accepts ``application/strategic-merge-patch+json`` (built-in kinds) or not (custom
resources, aggregated APIs), and then kubectl sends a JSON merge patch.

``x-kubernetes-list-type`` / ``-list-map-keys`` are server-side apply's and are not read:
kubectl's strategic merge patch ignores them, so a list marked ``map`` without a patch
strategy is still replaced whole (following them would differ from kubectl).

A field the schema does not describe is treated as having no strategy (maps merge, lists are
replaced, as in a JSON merge patch); kubectl stops with "unable to find api field" there and
retries with older schemas, but the API server would reject such a field anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "NO_PATCH_META",
    "FieldPatch",
    "KindPatch",
    "PatchSchema",
    "parse_v2",
    "parse_v3",
    "v3_document_paths",
]

STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_GVK = "x-kubernetes-group-version-kind"


@dataclass(frozen=True, slots=True)
class FieldPatch:
    """One field's ``x-kubernetes-patch-strategy``, split as kubectl splits it: ``strategy``
    ("merge", "replace" or "" for none) and ``retain_keys``; its ``merge_key``; and
    ``node``, the definition describing its value (a list's items), or None when the schema
    says nothing more."""

    strategy: str = ""
    retain_keys: bool = False
    merge_key: str = ""
    node: str | None = None

    @classmethod
    def parse(cls, strategies: str, merge_key: str, node: str | None) -> FieldPatch:
        names = [s for s in strategies.split(",") if s]
        rest = [s for s in names if s != "retainKeys"]
        return cls(rest[0] if rest else "", len(rest) < len(names), merge_key, node)


NO_PATCH_META: Final = FieldPatch()


@dataclass(frozen=True, slots=True)
class KindPatch:
    """A kind as the document describes it: ``root`` is its definition, ``strategic``
    whether its PATCH operation accepts a strategic merge patch."""

    root: str
    strategic: bool


@dataclass(frozen=True, slots=True)
class _Node:
    fields: Mapping[str, FieldPatch]
    values: FieldPatch | None = None  # a map's (additionalProperties) value


class PatchSchema:
    """The patch strategies of one OpenAPI document's definitions."""

    def __init__(
        self, nodes: Mapping[str, _Node], kinds: Mapping[tuple[str, str, str], KindPatch]
    ) -> None:
        self._nodes = nodes
        self._kinds = kinds

    def kind(self, group: str, version: str, kind: str) -> KindPatch | None:
        """The kind's definition and patch type; None when the document does not have it."""
        return self._kinds.get((group, version, kind))

    def field(self, node: str | None, key: str) -> FieldPatch:
        """The strategy of field ``key`` of the value ``node`` describes (NO_PATCH_META when
        the schema does not know the field)."""
        found = self._nodes.get(node) if node is not None else None
        if found is None:
            return NO_PATCH_META
        meta = found.fields.get(key)
        if meta is None:
            return found.values or NO_PATCH_META
        return meta

    def fields_of(self, node: str | None) -> list[str]:
        """The fields of ``node`` the schema keeps (those that can carry a strategy)."""
        found = self._nodes.get(node) if node is not None else None
        return list(found.fields) if found is not None else []


class _Compiler:
    """Reduces one document's definitions to nodes; ``prefix`` is how its $refs begin."""

    def __init__(self, definitions: Mapping[str, Any], prefix: str) -> None:
        self.definitions = definitions
        self.prefix = prefix
        self.nodes: dict[str, _Node] = {}

    def compile_all(self) -> None:
        for name, schema in self.definitions.items():
            if isinstance(schema, Mapping):
                self.nodes[name] = self._node(name, schema)

    def _node(self, name: str, schema: Mapping[str, Any]) -> _Node:
        fields: dict[str, FieldPatch] = {}
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            for key, prop in properties.items():
                if isinstance(prop, Mapping):
                    meta = self._field(f"{name}.{key}", prop)
                    if meta != NO_PATCH_META:
                        fields[key] = meta
        values = schema.get("additionalProperties")
        value_meta = None
        if isinstance(values, Mapping):
            value_meta = FieldPatch(node=self._target(f"{name}.*", values))
        return _Node(fields, value_meta)

    def _field(self, where: str, prop: Mapping[str, Any]) -> FieldPatch:
        # The strategy sits on the property itself, beside the $ref (as kubectl reads it).
        strategy = prop.get("x-kubernetes-patch-strategy")
        merge_key = prop.get("x-kubernetes-patch-merge-key")
        items = prop.get("items")
        target = self._target(where, items if isinstance(items, Mapping) else prop)
        return FieldPatch.parse(
            strategy if isinstance(strategy, str) else "",
            merge_key if isinstance(merge_key, str) else "",
            target,
        )

    def _target(self, where: str, schema: Mapping[str, Any]) -> str | None:
        """The node describing ``schema``'s value: its $ref's definition, or an inline one."""
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of and isinstance(all_of[0], Mapping):
            schema = all_of[0]  # kubectl takes the first
        ref = schema.get("$ref")
        if isinstance(ref, str):
            name = ref[len(self.prefix) :] if ref.startswith(self.prefix) else None
            return name if name in self.definitions else None
        if isinstance(schema.get("properties"), Mapping) or isinstance(
            schema.get("additionalProperties"), Mapping
        ):
            node = self._node(where, schema)
            if node.fields or node.values is not None:
                self.nodes[where] = node
                return where
        return None


def _gvks(value: Any) -> list[tuple[str, str, str]]:
    entries = value if isinstance(value, list) else [value]
    return [
        (str(e.get("group", "")), str(e.get("version", "")), str(e.get("kind", "")))
        for e in entries
        if isinstance(e, Mapping)
    ]


def _parse(definitions: Any, prefix: str, paths: Any, accepts_strategic: Any) -> PatchSchema:
    compiler = _Compiler(definitions if isinstance(definitions, Mapping) else {}, prefix)
    compiler.compile_all()
    roots: dict[tuple[str, str, str], str] = {}
    for name, schema in compiler.definitions.items():
        if isinstance(schema, Mapping):
            for gvk in _gvks(schema.get(_GVK)):
                roots.setdefault(gvk, name)
    kinds: dict[tuple[str, str, str], KindPatch] = {}
    for item in (paths if isinstance(paths, Mapping) else {}).values():
        operation = item.get("patch") if isinstance(item, Mapping) else None
        if not isinstance(operation, Mapping):
            continue
        for gvk in _gvks(operation.get(_GVK)):
            # kubectl decides on the first PATCH operation of the kind it meets.
            if gvk in roots and gvk not in kinds:
                kinds[gvk] = KindPatch(roots[gvk], accepts_strategic(operation))
    return PatchSchema(compiler.nodes, kinds)


def _v3_accepts_strategic(operation: Mapping[str, Any]) -> bool:
    body = operation.get("requestBody")
    content = body.get("content") if isinstance(body, Mapping) else None
    return isinstance(content, Mapping) and STRATEGIC_PATCH in content


def _v2_accepts_strategic(operation: Mapping[str, Any]) -> bool:
    consumes = operation.get("consumes")
    return isinstance(consumes, list) and STRATEGIC_PATCH in consumes


def parse_v3(document: Mapping[str, Any]) -> PatchSchema:
    """The patch strategies of an OpenAPI v3 group-version document."""
    components = document.get("components")
    schemas = components.get("schemas") if isinstance(components, Mapping) else None
    return _parse(schemas, "#/components/schemas/", document.get("paths"), _v3_accepts_strategic)


def parse_v2(document: Mapping[str, Any]) -> PatchSchema:
    """The patch strategies of an OpenAPI v2 (swagger) document."""
    return _parse(
        document.get("definitions"), "#/definitions/", document.get("paths"), _v2_accepts_strategic
    )


def v3_document_paths(index: Mapping[str, Any]) -> dict[str, str]:
    """``/openapi/v3``'s index: group-version path (``api/v1``, ``apis/apps/v1``) -> the URL
    of its document (with its content hash, so a new URL means a new document)."""
    paths = index.get("paths")
    out: dict[str, str] = {}
    for path, entry in (paths if isinstance(paths, Mapping) else {}).items():
        url = entry.get("serverRelativeURL") if isinstance(entry, Mapping) else None
        if isinstance(path, str) and isinstance(url, str) and url.startswith("/"):
            out[path] = url
    return out
