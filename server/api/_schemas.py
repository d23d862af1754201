"""JSON Schemas of the request bodies, for the OpenAPI document (/openapi.json).

They describe what the routes accept, so that clients (and the API fuzz test, which generates
bodies from them) know the shape; the routes still check every body themselves and answer 400
naming the field. Unknown keys are allowed where the routes ignore them (Orca's stage contexts
carry many).
"""

from __future__ import annotations

from typing import Any

from ..ops import OPERATIONS
from ..store import AccountState

__all__ = [
    "ACCOUNT_CHANGES",
    "ACCOUNT_DEFINITION",
    "ACCOUNT_LIST",
    "ACCOUNT_NAMES",
    "ARMORY_OPERATION",
    "DESCRIPTION",
    "OPERATIONS_REQUEST",
]

_NAME: dict[str, Any] = {"type": "string", "minLength": 1}
_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}

ACCOUNT_LIST: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": _NAME,
            "zoneId": {"type": "string"},
            "kubeconfigFile": {"type": "string"},
        },
    },
}

ACCOUNT_CHANGES: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "required": ["name", "state"],
        "properties": {
            "name": _NAME,
            "state": {"type": "string", "enum": [s.value for s in AccountState]},
            "zoneId": {"type": "string"},
            "kubeconfigFile": {"type": "string"},
        },
    },
}

ACCOUNT_NAMES: dict[str, Any] = {"type": "array", "minItems": 1, "items": _NAME}

ACCOUNT_DEFINITION: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": _NAME,
        "kubeconfigContents": {"type": "string"},
        "kubeconfigFile": {"type": "string"},
        "serviceAccount": {"type": "boolean"},
        "context": {"type": "string"},
        "kinds": _STRINGS,
        "omitKinds": _STRINGS,
        "namespaces": _STRINGS,
        "omitNamespaces": _STRINGS,
        "oAuthScopes": _STRINGS,
        "permissions": {"type": "object", "additionalProperties": _STRINGS},
    },
}

DESCRIPTION: dict[str, Any] = {
    "type": "object",
    "description": "the operation's description (Clouddriver's), e.g. account, manifests",
    "properties": {
        "account": {"type": "string"},
        "credentials": {"type": "string"},
        "manifestName": {"type": "string", "description": '"<kind> <name>"'},
        "location": {"type": "string", "description": "the namespace"},
        "manifests": {"type": "array", "items": {"type": "object"}},
    },
}

OPERATIONS_REQUEST: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "propertyNames": {"enum": sorted(OPERATIONS)},
        "additionalProperties": DESCRIPTION,
    },
}

ARMORY_OPERATION: dict[str, Any] = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"type": "string", "enum": sorted(OPERATIONS)},
        "description": DESCRIPTION,
    },
}
