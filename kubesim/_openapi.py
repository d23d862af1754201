"""The OpenAPI documents kubesim publishes: ``/openapi/v3`` (an index and one document per
group-version) and ``/openapi/v2`` (one document), as a real API server does.

What clients read from them is how to patch: a PATCH operation per kind whose request body
lists the patch types the kind accepts (strategic merge patch for the built-in kinds, not
for custom resources), and per field ``x-kubernetes-patch-strategy`` /
``x-kubernetes-patch-merge-key`` (strategic merge patch) and ``x-kubernetes-list-type`` /
``x-kubernetes-list-map-keys`` / ``x-kubernetes-map-type`` (server-side apply). kubectl's
client-side apply computes its patch from these, and looks for the ``fieldValidation``
parameter to leave validation to the server. Every extension comes from ``_schema`` (the
table kubesim's own patching follows), walked along ``_openapi_model``'s outline of the
kinds; a custom resource's document carries its CRD's schema.

Documents are built on first request and kept until the set of served kinds changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from kubesim._jsonvalue import clone
from kubesim._openapi_model import GROUP_PREFIXES, KIND_TYPES, TYPES
from kubesim._resources import ResourceType
from kubesim._schema import is_atomic_map, smp_list_strategy, smp_patch_strategy, ssa_list_type

__all__ = ["OpenApiDocs"]

_encode = msgspec.json.Encoder().encode
_SCALARS = {"string", "integer", "boolean", "number"}
_PATCH_TYPES: tuple[str, ...] = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_PATCH_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")
_OBJECT_META = "meta.ObjectMeta"

Ref = Callable[[str], dict[str, Any]]


def _v3_ref(name: str) -> dict[str, Any]:
    # As the API server writes them: a reference wrapped in allOf (so siblings may follow).
    return {"allOf": [{"$ref": f"#/components/schemas/{name}"}], "default": {}}


def _v2_ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/definitions/{name}"}


def definition_name(type_name: str) -> str:
    group, _, name = type_name.partition(".")
    return f"{GROUP_PREFIXES[group]}.{name}"


def _gvk(rtype: ResourceType) -> dict[str, str]:
    return {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}


class _Definitions:
    """The definitions reachable from some kinds, each field's extensions asked of
    ``_schema`` for the field's path from the kind's root.

    One outline type is reached by several paths (a PodSpec from a Pod and from every
    workload's template); each path must give it the same extensions, or kubesim's table
    says something the published types cannot, which is a bug here (RuntimeError)."""

    def __init__(self, ref: Ref) -> None:
        self.ref = ref
        self.schemas: dict[str, dict[str, Any]] = {}

    def add_kind(self, rtype: ResourceType, type_name: str) -> None:
        self._add(rtype.kind, type_name, ())
        gvks = self.schemas[definition_name(type_name)].setdefault(
            "x-kubernetes-group-version-kind", []
        )
        if _gvk(rtype) not in gvks:
            gvks.append(_gvk(rtype))

    def add_object_meta(self) -> None:
        self._add("", _OBJECT_META, ("metadata",))

    def _add(self, kind: str, type_name: str, names: tuple[str, ...]) -> None:
        properties = {
            field: self._field(kind, field_type, (*names, field))
            for field, field_type in TYPES[type_name].items()
        }
        name = definition_name(type_name)
        known = self.schemas.get(name)
        if known is None:
            self.schemas[name] = {"type": "object", "properties": properties}
        elif known["properties"] != properties:
            raise RuntimeError(f"{name} merges differently at {'.'.join(names)} in a {kind}")

    def _field(self, kind: str, field_type: str, names: tuple[str, ...]) -> dict[str, Any]:
        if field_type.startswith("[]"):
            schema: dict[str, Any] = {
                "type": "array",
                "items": self._value(kind, field_type[2:], names),
            }
            strategy = smp_patch_strategy(kind, names, is_list=True)
            merge_key = smp_list_strategy(kind, names)
            if strategy:
                schema["x-kubernetes-patch-strategy"] = strategy
            if strategy and merge_key:
                schema["x-kubernetes-patch-merge-key"] = merge_key
            list_type = ssa_list_type(kind, names)
            schema["x-kubernetes-list-type"] = list_type.kind
            if list_type.keys:
                schema["x-kubernetes-list-map-keys"] = list(list_type.keys)
            return schema
        if field_type.startswith("{}"):
            schema = {
                "type": "object",
                "additionalProperties": self._value(kind, field_type[2:], names),
            }
        else:
            schema = self._value(kind, field_type, names)
        if field_type not in _SCALARS:
            strategy = smp_patch_strategy(kind, names, is_list=False)
            if strategy:
                schema["x-kubernetes-patch-strategy"] = strategy
            if is_atomic_map(kind, names):
                schema["x-kubernetes-map-type"] = "atomic"
        return schema

    def _value(self, kind: str, field_type: str, names: tuple[str, ...]) -> dict[str, Any]:
        if field_type in _SCALARS:
            return {"type": field_type}
        if field_type == "object":
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        self._add(kind, field_type, names)
        return self.ref(definition_name(field_type))


def _custom_schema(rtype: ResourceType, crd: dict[str, Any], ref: Ref) -> dict[str, Any]:
    """A custom resource's definition: its CRD version's schema (or any object), with the
    fields every object has, as the API server publishes it."""
    schema: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    for version in (crd.get("spec") or {}).get("versions") or ():
        if isinstance(version, dict) and version.get("name") == rtype.version:
            found = (version.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(found, dict):
                schema = clone(found)
    properties = schema.setdefault("properties", {})
    properties.update(
        apiVersion={"type": "string"},
        kind={"type": "string"},
        metadata=ref(definition_name(_OBJECT_META)),
    )
    schema["x-kubernetes-group-version-kind"] = [_gvk(rtype)]
    return schema


def _custom_name(rtype: ResourceType) -> str:
    return ".".join([*reversed(rtype.group.split(".")), rtype.version, rtype.kind])


def _object_path(rtype: ResourceType) -> str:
    root = f"/apis/{rtype.group}/{rtype.version}" if rtype.group else f"/api/{rtype.version}"
    where = "/namespaces/{namespace}" if rtype.namespaced else ""
    return f"{root}{where}/{rtype.plural}/{{name}}"


def _operations(
    rtype: ResourceType, definition: str, ref: Ref, v3: bool, patch_types: tuple[str, ...]
) -> dict[str, Any]:
    """GET and PATCH of one object: what clients look up per kind."""
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "query", "uniqueItems": True}
        | ({"schema": {"type": "string"}} if v3 else {"type": "string"})
        for name in _PATCH_PARAMETERS
    ]
    answer: dict[str, Any] = {"description": "OK"}
    if v3:
        answer["content"] = {"application/json": {"schema": ref(definition)}}
    else:
        answer["schema"] = ref(definition)
    common = {"x-kubernetes-group-version-kind": _gvk(rtype), "responses": {"200": answer}}
    patch: dict[str, Any] = {
        **common,
        "operationId": f"patch{rtype.kind}",
        "x-kubernetes-action": "patch",
        "parameters": parameters,
    }
    if v3:
        patch["requestBody"] = {
            "content": {t: {"schema": {"type": "object"}} for t in patch_types},
            "required": True,
        }
    else:
        patch["consumes"] = list(patch_types)
        patch["parameters"] = [
            {"name": "body", "in": "body", "required": True, "schema": {"type": "object"}},
            *parameters,
        ]
    get = {**common, "operationId": f"read{rtype.kind}", "x-kubernetes-action": "get"}
    return {"get": get, "patch": patch}


class OpenApiDocs:
    """The OpenAPI documents of one cluster's served kinds.

    ``types()`` gives the served resource types and ``crd(rtype)`` the CRD object behind a
    custom kind (None for a built-in one); ``generation()`` changes whenever either does,
    which drops the documents built so far. ``git_version`` fills ``info.version``."""

    def __init__(
        self,
        types: Callable[[], list[ResourceType]],
        crd: Callable[[ResourceType], dict[str, Any] | None],
        generation: Callable[[], int],
        git_version: str,
    ) -> None:
        self._types = types
        self._crd = crd
        self._generation = generation
        self._info = {"title": "Kubernetes", "version": git_version}
        self._built_at = -1
        self._v3: dict[str, bytes] = {}
        self._v3_index = b""
        self._v2 = b""

    def _fresh(self) -> None:
        if self._built_at == self._generation():
            return
        self._built_at = self._generation()
        by_path: dict[str, list[ResourceType]] = {}
        for rtype in self._types():
            where = f"apis/{rtype.group}/{rtype.version}" if rtype.group else "api/v1"
            by_path.setdefault(where, []).append(rtype)
        self._v3 = {path: _encode(self._document(types, True)) for path, types in by_path.items()}
        index = {
            path: {
                "serverRelativeURL": f"/openapi/v3/{path}?hash="
                + hashlib.sha512(body).hexdigest().upper()
            }
            for path, body in sorted(self._v3.items())
        }
        self._v3_index = _encode({"paths": index})
        self._v2 = _encode(self._document(self._types(), False))

    def _document(self, types: list[ResourceType], v3: bool) -> dict[str, Any]:
        ref = _v3_ref if v3 else _v2_ref
        definitions = _Definitions(ref)
        paths: dict[str, Any] = {}
        for rtype in types:
            crd = self._crd(rtype)
            type_name = KIND_TYPES.get((rtype.group, rtype.kind)) if crd is None else None
            if type_name is not None:
                definitions.add_kind(rtype, type_name)
                definition, patch_types = definition_name(type_name), _PATCH_TYPES
            elif crd is not None:
                definitions.add_object_meta()
                definition = _custom_name(rtype)
                definitions.schemas[definition] = _custom_schema(rtype, crd, ref)
                patch_types = tuple(t for t in _PATCH_TYPES if "strategic" not in t)
            else:
                continue  # a built-in kind the outline does not describe: nothing to say
            paths[_object_path(rtype)] = _operations(rtype, definition, ref, v3, patch_types)
        schemas = dict(sorted(definitions.schemas.items()))
        if v3:
            return {
                "openapi": "3.0.0",
                "info": self._info,
                "paths": paths,
                "components": {"schemas": schemas},
            }
        return {"swagger": "2.0", "info": self._info, "paths": paths, "definitions": schemas}

    def v3_index(self) -> bytes:
        """``/openapi/v3``: each group-version's document path, with a hash of its content."""
        self._fresh()
        return self._v3_index

    def v3(self, path: str) -> bytes | None:
        """``/openapi/v3/<path>`` (``api/v1``, ``apis/apps/v1``, ...); None when not served."""
        self._fresh()
        return self._v3.get(path)

    def v2(self) -> bytes:
        """``/openapi/v2``: every served kind in one document."""
        self._fresh()
        return self._v2
