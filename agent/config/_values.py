"""Typed reading of one YAML mapping, with the file and path of every value (sans-I/O).

A :class:`Section` wraps one mapping of a loaded YAML document. Its readers (``string``,
``boolean``, ``integer``, ``duration``, ``size``, ...) return typed values with defaults, and
raise :class:`ConfigError` naming the file, the dotted path (``kubernetes.accounts[2].kinds``)
and what was expected. The keys a section did not read are its unknown keys: ``unknown()``
lists them with their paths so the loader can warn (or refuse, where a typo is dangerous).

Sizes follow Kubernetes quantities (``64Mi``, ``1Gi``, ``500k``, plain ints). Durations follow
Armory's files: an integer is nanoseconds (Go's ``time.Duration``), a string is a Go duration
(``"1s"``, ``"500ms"``, ``"1m30s"``). Durations are returned in seconds (float), trio's unit.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from .._errors import ConfigError

__all__ = ["Section", "describe", "parse_duration", "parse_size"]

_T = TypeVar("_T")
_MISSING: Any = object()

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|k|K|M|G|T)?\s*$")
_SIZE_FACTORS = {
    None: 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def describe(value: object) -> str:
    """A short rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_size(value: object) -> int:
    """Bytes from ``64Mi``, ``1Gi``, ``500k``, ``1.5Gi`` or a plain non-negative integer.

    Raises ValueError with what was expected.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a size like '64Mi' or a number of bytes, got {describe(value)}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative size, got {value}")
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            return int(float(match.group(1)) * _SIZE_FACTORS[match.group(2)])
    raise ValueError(
        f"expected a size like '64Mi', '1Gi', '500k' or a number of bytes, got {describe(value)}"
    )


def parse_duration(value: object) -> float:
    """Seconds from a Go duration string (``"1s"``, ``"500ms"``, ``"1m30s"``) or nanoseconds.

    Integers (and numeric strings) are nanoseconds, as Armory's files write them; a positive
    value below one microsecond is refused because it is surely seconds written without a unit.
    Raises ValueError with what was expected.
    """
    nanoseconds: float | None = None
    if isinstance(value, bool):
        nanoseconds = None
    elif isinstance(value, int | float):
        nanoseconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+", text):
            nanoseconds = float(text)
        else:
            parts = _DURATION_PART.findall(text)
            if parts and "".join(number + unit for number, unit in parts) == text:
                return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
    if nanoseconds is None or nanoseconds < 0 or not math.isfinite(nanoseconds):
        raise ValueError(
            f"expected a duration like '1s', '500ms' or nanoseconds, got {describe(value)}"
        )
    if 0 < nanoseconds < 1000:
        raise ValueError(
            f"expected a duration like '1s', '500ms' or nanoseconds (Armory style), got "
            f"{describe(value)}, which would be {value} ns; write '{value}s' for seconds"
        )
    return nanoseconds / 1e9


class Section:
    """One mapping of the config document, read key by key with defaults and clear errors."""

    def __init__(self, data: object, *, file: str, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"expected a mapping of options, got {describe(data)}", file=file, path=path
            )
        for key in data:
            if not isinstance(key, str):
                raise ConfigError(
                    f"option names must be strings, got {describe(key)}", file=file, path=path
                )
        self._data: Mapping[str, Any] = data
        self.file = file
        self.path = path
        self._read: set[str] = set()

    # -- plumbing ----------------------------------------------------------------------------

    def child_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, problem: str) -> ConfigError:
        """A ConfigError for ``key`` of this section."""
        return ConfigError(problem, file=self.file, path=self.child_path(key))

    def has(self, key: str) -> bool:
        return key in self._data and self._data[key] is not None

    def raw(self, key: str, default: object = None) -> Any:
        """The raw value (marked as read), or ``default`` when absent or null."""
        self._read.add(key)
        value = self._data.get(key)
        return default if value is None else value

    def section(self, key: str) -> Section:
        """The nested mapping ``key`` (an empty one when absent)."""
        return Section(self.raw(key), file=self.file, path=self.child_path(key))

    def sections(self, key: str, *, what: str) -> Iterator[Section]:
        """Each mapping of the list ``key``, with ``key[i]`` paths."""
        items = self.raw(key, [])
        if not isinstance(items, list):
            raise self.error(key, f"expected a list of {what}, got {describe(items)}")
        for index, item in enumerate(items):
            yield Section(item, file=self.file, path=f"{self.child_path(key)}[{index}]")

    def unknown(self) -> list[str]:
        """Paths of the keys present in the mapping that no reader asked for."""
        return [self.child_path(key) for key in self._data if key not in self._read]

    def suggest(self, key: str, known: list[str]) -> str:
        """``"; did you mean 'x'?"`` for a probable typo of a known option, else ``""``."""
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        return f"; did you mean {close[0]!r}?" if close else ""

    # -- typed readers -----------------------------------------------------------------------

    def string(self, key: str, default: _T) -> str | _T:
        value = self.raw(key, default)
        if value is default:
            return default
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(key, f"expected a string, got {describe(value)}")
        return str(value)

    def required_string(self, key: str) -> str:
        value = self.string(key, None)
        if not value:
            raise self.error(key, "is required (a non-empty string)")
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.raw(key, default)
        if isinstance(value, str):
            for choice in choices:
                if value.lower() == choice.lower():
                    return choice
        raise self.error(key, f"expected one of {', '.join(choices)}, got {describe(value)}")

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise self.error(key, f"expected true or false, got {describe(value)}")

    def integer(self, key: str, default: int, *, minimum: int | None = 0) -> int:
        value = self.raw(key, default)
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {describe(value)}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"expected an integer >= {minimum}, got {value}")
        return value

    def number(self, key: str, default: float, *, minimum: float | None = 0.0) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {describe(value)}")
        if not math.isfinite(value):  # YAML's .nan and .inf: nan passes every comparison
            raise self.error(key, f"expected a finite number, got {value}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"expected a number >= {minimum}, got {value}")
        return float(value)

    def port(self, key: str, default: int) -> int:
        value = self.integer(key, default)
        if value > 65535:
            raise self.error(key, f"expected a TCP port (0-65535), got {value}")
        return value

    def duration(self, key: str, default: float) -> float:
        """Seconds; see :func:`parse_duration`."""
        value = self.raw(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.error(key, str(exc)) from exc

    def size(self, key: str, default: int) -> int:
        """Bytes; see :func:`parse_size`."""
        value = self.raw(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        try:
            return parse_size(value)
        except ValueError as exc:
            raise self.error(key, str(exc)) from exc

    def strings(self, key: str, *, what: str) -> tuple[str, ...]:
        """A list of non-empty strings; ``what`` names them in errors ("kind names")."""
        value = self.raw(key, [])
        if not isinstance(value, list):
            raise self.error(key, f"expected a list of {what}, got {describe(value)}")
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise ConfigError(
                    f"expected one of the {what} (a non-empty string), got {describe(item)}",
                    file=self.file,
                    path=f"{self.child_path(key)}[{index}]",
                )
        return tuple(item.strip() for item in value)

    def string_map(self, key: str) -> tuple[tuple[str, str], ...]:
        """A mapping of strings to scalars, as sorted ``(key, value)`` pairs (hashable)."""
        value = self.raw(key, {})
        if not isinstance(value, Mapping):
            raise self.error(key, f"expected a mapping of names to values, got {describe(value)}")
        pairs = []
        for name, item in value.items():
            if isinstance(item, Mapping | list):
                raise ConfigError(
                    f"expected a plain value, got {describe(item)}",
                    file=self.file,
                    path=f"{self.child_path(key)}.{name}",
                )
            pairs.append((str(name), "" if item is None else str(item)))
        return tuple(sorted(pairs))
