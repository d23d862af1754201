"""The agent's option table for the README, generated from agent/config/_schema.py.

``option_rows()`` walks the frozen config dataclasses (their defaults are the defaults) and
names each field as the config file spells it. ``markdown_table()`` renders the README's
table; tests/kubesvc/test_readme.py checks that the README holds exactly this table, so an
option added to the schema without documentation fails the tests.

    .venv/bin/python -m kubesvc._config_doc     # print the table
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

import agent

__all__ = ["OptionRow", "markdown_table", "option_rows"]

# Fields whose file name is not the camelCase of the field name.
_RENAMED = {
    ("LoggingConfig", "max_size_mb"): "maxSize",
    ("LoggingConfig", "max_age_days"): "maxAge",
    ("Permissions", "read"): "READ",
    ("Permissions", "write"): "WRITE",
    ("Permissions", "execute"): "EXECUTE",
}
# Not options: bookkeeping of the loaded Config.
_SKIPPED = {("Config", "source"), ("Config", "ignored_options")}
# Go durations in the file, seconds in the dataclass.
_DURATIONS = {("BackoffConfig", "base_delay"), ("BackoffConfig", "max_delay")}
_REQUIRED = "(required)"


@dataclass(frozen=True, slots=True)
class OptionRow:
    path: str  # "kubernetes.accounts[].omitKinds"
    default: str  # as the file would spell it; "" = unset
    section: str  # the dataclass's first docstring line


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _size(n: int) -> str:
    for unit, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def _render(owner: str, name: str, value: Any) -> str:
    if value is None:
        return ""
    if (owner, name) in _DURATIONS:
        return f"{value:g}s"
    if (owner, name) == ("LoggingConfig", "fields"):
        return "{}"  # a map in the file
    if owner == "BudgetConfig" and name == "bytes":
        return _size(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _first_line(cls: type) -> str:
    return (cls.__doc__ or "").strip().splitlines()[0]


def _element_type(hint: Any) -> Any:
    """The dataclass inside ``tuple[X, ...]`` or ``X | None``, else None."""
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def _walk(cls: type, prefix: str, rows: list[OptionRow]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if (cls.__name__, f.name) in _SKIPPED:
            continue
        key = _RENAMED.get((cls.__name__, f.name), _camel(f.name))
        path = f"{prefix}{key}"
        hint = hints[f.name]
        nested = hint if dataclasses.is_dataclass(hint) else _element_type(hint)
        if isinstance(nested, type):
            listed = typing.get_origin(hint) is tuple
            _walk(nested, f"{path}[]." if listed else f"{path}.", rows)
            continue
        if f.default is not dataclasses.MISSING:
            default = _render(cls.__name__, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = _render(cls.__name__, f.name, f.default_factory())
        else:
            default = _REQUIRED
        rows.append(OptionRow(path, default, _first_line(cls)))


def option_rows() -> list[OptionRow]:
    """Every option of the agent's config file, in schema order."""
    rows: list[OptionRow] = []
    _walk(agent.Config, "", rows)
    return rows


def markdown_table() -> str:
    """The table, with a row naming each section where it starts."""
    lines = ["| option | default |", "|---|---|"]
    section = None
    for row in option_rows():
        if row.section != section:
            section = row.section
            lines.append(f"| *{section.replace('``', '`')}* | |")
        default = f"`{row.default}`" if row.default else "unset"
        lines.append(f"| `{row.path}` | {default} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
