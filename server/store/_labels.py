"""Kubernetes label selectors translated to SQL over the objects' ``labels`` JSON column
(SQLite: JSON text read with json_extract; PostgreSQL: jsonb read with ->>).

Supported: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``,
joined by commas (AND). As in Kubernetes, ``!=`` and ``notin`` also match objects without
the label.
"""

from __future__ import annotations

import re
from typing import Literal

from .._errors import InvalidQuery

Dialect = Literal["sqlite", "postgresql"]

_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EQ = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s+\(([^()]*)\)\s*")
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")
_VALUE_RE = re.compile(_VALUE)
_MAX_REQUIREMENTS = 32


def _split(selector: str) -> list[str]:
    """Split on the commas that are not inside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return parts


def _label(dialect: Dialect, key: str) -> tuple[str, list[str]]:
    """The SQL that reads label ``key`` (NULL when absent), and its parameters."""
    if dialect == "sqlite":
        # key matched _KEY (no quotes): safe inside the JSON path.
        return f"json_extract(labels, '$.\"{key}\"')", []
    return "(labels->>%s)", [key]


def selector_sql(selector: str, dialect: Dialect) -> tuple[str, list[str]]:
    """A SQL condition and its parameters for ``selector`` (placeholders ``?`` for SQLite,
    ``%s`` for PostgreSQL); raises InvalidQuery saying where."""
    mark = "?" if dialect == "sqlite" else "%s"
    clauses: list[str] = []
    params: list[str] = []
    parts = [p for p in _split(selector) if p.strip()]
    if len(parts) > _MAX_REQUIREMENTS:
        raise InvalidQuery(f"label selector has more than {_MAX_REQUIREMENTS} requirements")
    for part in parts:
        if m := _SET.fullmatch(part):
            key, op, raw = m.group(1), m.group(2), m.group(3)
            values = [v.strip() for v in raw.split(",")]
            if not values or any(not _VALUE_RE.fullmatch(v) for v in values):
                raise InvalidQuery(f"label selector {part.strip()!r}: bad value list")
            column, keys = _label(dialect, key)
            marks = ",".join([mark] * len(values))
            if op == "in":
                clauses.append(f"{column} IN ({marks})")
                params.extend([*keys, *values])
            else:
                clauses.append(f"({column} IS NULL OR {column} NOT IN ({marks}))")
                params.extend([*keys, *keys, *values])
        elif m := _EQ.fullmatch(part):
            key, op, value = m.group(1), m.group(2), m.group(3)
            column, keys = _label(dialect, key)
            if op == "!=":
                clauses.append(f"({column} IS NULL OR {column} != {mark})")
                params.extend([*keys, *keys, value])
            else:
                clauses.append(f"{column} = {mark}")
                params.extend([*keys, value])
        elif m := _EXISTS.fullmatch(part):
            negate, key = m.group(1), m.group(2)
            column, keys = _label(dialect, key)
            clauses.append(f"{column} IS NULL" if negate else f"{column} IS NOT NULL")
            params.extend(keys)
        else:
            raise InvalidQuery(
                f"label selector {part.strip()!r}: expected k=v, k!=v, k, !k, "
                "k in (a,b) or k notin (a,b)"
            )
    return " AND ".join(clauses) or "TRUE", params
