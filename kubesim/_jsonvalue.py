"""Helpers for decoded JSON values (dict, list, str, int, float, bool, None)."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["clone", "json_equal", "type_name"]


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def clone(value: Any) -> Any:
    """A deep copy of a JSON value, several times faster than ``copy.deepcopy``.

    NaN and infinities (not JSON, though Python's ``json`` reads them) become null.
    """
    if isinstance(value, dict | list):
        try:
            # A round trip through msgspec's C codec is the fastest copy of a JSON tree.
            return _decode(_encode(value))
        except (TypeError, ValueError, OverflowError):
            return _clone(value)  # not plain JSON (a tuple key, a huge int): copy by hand
    return value


def _clone(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clone(v) if isinstance(v, dict | list) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) if isinstance(v, dict | list) else v for v in value]
    return value


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality (RFC 6902 section 4.6): numbers compare by value, but ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return False
        return all(json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        return all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def type_name(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
