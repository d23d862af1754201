"""Reading an operation's description (``payload_json``) with clear errors.

The server already normalised it (camelCase keys, numbers and booleans typed, nulls
dropped), but the agent does not trust that blindly: a wrong type is an InvalidOperation
naming the field, and string numbers/booleans are still accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidOperation

__all__ = ["Description"]


@dataclass(frozen=True, slots=True)
class Description:
    """A typed view of an operation's description; ``operation`` names it in errors."""

    operation: str
    fields: Mapping[str, Any]

    def _where(self, key: str) -> str:
        return f"{self.operation}.{key}"

    def has(self, key: str) -> bool:
        return self.fields.get(key) is not None

    def text(self, key: str, default: str = "") -> str:
        value = self.fields.get(key)
        if value is None:
            return default
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise InvalidOperation(f"{self._where(key)}: expected a string, got {value!r}")
        return str(value)

    def required_text(self, key: str) -> str:
        value = self.text(key)
        if not value:
            raise InvalidOperation(f"{self._where(key)}: required")
        return value

    def integer(self, key: str) -> int | None:
        value = self.fields.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            raise InvalidOperation(f"{self._where(key)}: expected a number, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InvalidOperation(
                f"{self._where(key)}: expected a number, got {value!r}"
            ) from None

    def flag(self, key: str, default: bool | None = None) -> bool | None:
        value = self.fields.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise InvalidOperation(f"{self._where(key)}: expected true or false, got {value!r}")

    def mapping(self, key: str) -> Mapping[str, Any]:
        value = self.fields.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise InvalidOperation(f"{self._where(key)}: expected an object, got {value!r}")
        return value

    def items(self, key: str) -> Sequence[Any]:
        value = self.fields.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise InvalidOperation(f"{self._where(key)}: expected a list, got {value!r}")
        return value

    def texts(self, key: str) -> list[str]:
        values = self.items(key)
        if not all(isinstance(v, str) for v in values):
            raise InvalidOperation(f"{self._where(key)}: expected a list of strings")
        return [str(v) for v in values]

    def sub(self, key: str) -> Description:
        return Description(self._where(key), self.mapping(key))

    @property
    def namespace(self) -> str:
        """The location: ``namespace`` (the contract's key) or ``location``."""
        return self.text("namespace") or self.text("location")
