"""Field errors worded like the API server's (``field: Invalid value: "x": detail``)."""

from __future__ import annotations

import json
from typing import Any

from ._errors import InvalidObject

__all__ = ["FieldErrors", "bad_request", "go_value", "json_type"]


class FieldErrors:
    """Collects field errors as the API server words them."""

    __slots__ = ("causes", "lines")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.causes: list[dict[str, str]] = []

    def add(self, reason: str, field: str, message: str) -> None:
        self.lines.append(f"{field}: {message}")
        self.causes.append({"reason": reason, "message": message, "field": field})

    def invalid(self, field: str, value: Any, detail: str) -> None:
        self.add("FieldValueInvalid", field, f"Invalid value: {go_value(value)}: {detail}")

    def required(self, field: str, detail: str = "") -> None:
        self.add("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))

    def unsupported(self, field: str, value: Any, supported: tuple[str, ...]) -> None:
        choices = ", ".join(f'"{s}"' for s in supported)
        self.add(
            "FieldValueNotSupported",
            field,
            f"Unsupported value: {go_value(value)}: supported values: {choices}",
        )

    def duplicate(self, field: str, value: Any) -> None:
        self.add("FieldValueDuplicate", field, f"Duplicate value: {go_value(value)}")


def go_value(value: Any) -> str:
    """A value printed the way the API server's messages print Go values."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        inner = ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in value.items())
        return "map[string]string{" + inner + "}"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def bad_request(message: str) -> InvalidObject:
    return InvalidObject(message, status_code=400)


def json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "an object"
