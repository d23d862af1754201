"""PostgreSQL's key of an object row: one column, ``okey``, the five coordinates (account,
group, kind lower-cased, namespace, name) joined by ``\\x01`` (migration 7 says why).

The join keeps the coordinates' order. No coordinate holds a character below ``\\x20``
(``with_control``: records and queries holding one are refused), so comparing two keys
byte by byte (the column is ``COLLATE "C"``) compares the coordinates in turn, a shorter
one first, as the five-column key did. So one key is one b-tree seek, a continue token is
``okey > token``, and the objects under leading coordinates (an account; an account's
group; its kind; a namespace of that kind) are one range of keys: from the coordinates
joined and followed by ``\\x01``, up to the same followed by ``\\x02``.

Every statement here takes its coordinates as SQL expressions (placeholders or columns), so
the key is computed by PostgreSQL, the same way as the generated column.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

# Coordinates in the key's order; the kind's is lower-cased where the key is made.
KIND_INDEX = 2
# No Kubernetes name holds one, and the key joins the coordinates with one (\x01; a NUL
# PostgreSQL cannot store at all): refused in a stored object's and in a query's.
CONTROL = re.compile("[\x00-\x1f]")


def with_control(coordinates: Iterable[tuple[str, str | None]]) -> tuple[str, str] | None:
    """The first (what, value) of ``coordinates`` whose value holds a control character."""
    for what, value in coordinates:
        if value is not None and CONTROL.search(value):
            return what, value
    return None


def okey_of(account: str, grp: str, kind: str, namespace: str, name: str) -> str:
    """SQL for the key of five coordinates, each an SQL expression."""
    return _joined([account, grp, kind, namespace, name], last="")


def okey_equals(mark: str) -> str:
    """The condition "the row's key is that of the next five parameters (account, grp,
    kind, namespace, name)"."""
    return f"okey={okey_of(mark, mark, mark, mark, mark)}"


def okey_range(parts: Sequence[str], row: str = "") -> str:
    """The condition "the row's first coordinates are ``parts``" (one to four SQL
    expressions: account, then grp, kind, namespace): a range of keys. Placeholders among
    ``parts`` take their values twice (``okey_range_params``)."""
    if not 1 <= len(parts) <= 4:
        raise ValueError(f"a key's prefix has 1 to 4 coordinates, not {len(parts)}")
    low, high = _joined(parts, last="chr(1)"), _joined(parts, last="chr(2)")
    return f"{row}okey >= {low} AND {row}okey < {high}"


def okey_range_params(values: Sequence[Any]) -> list[Any]:
    """The parameters of ``okey_range`` of placeholders, for the coordinates ``values``."""
    return [*values, *values]


def _joined(parts: Sequence[str], *, last: str) -> str:
    sql = [
        f'lower(({part}) COLLATE "C")' if index == KIND_INDEX else part
        for index, part in enumerate(parts)
    ]
    joined = "||chr(1)||".join(sql)
    return f"({joined}||{last})" if last else f"({joined})"


# The generated column's expression (migration 7).
OKEY_OF_COLUMNS = okey_of("account", "grp", "kind", "namespace", "name")


# An object's group, kind (lower-cased) and namespace, read from its key alone (a scan of the
# key's index needs no row).
GROUP_KIND_NAMESPACE = (
    "split_part(okey, chr(1), 2), split_part(okey, chr(1), 3), split_part(okey, chr(1), 4)"
)

# The status page's objects per (account, group, kind), counted on the key's index alone (no
# row is read but one per kind, for the kind as an agent spelled it); see
# ``_queries.kind_overview_sql``.
OBJECTS_PER_KIND = (
    "SELECT k.account, k.grp, (SELECT o.kind FROM objects o WHERE "
    + okey_range(["k.account", "k.grp", "k.kind_key"], "o.")
    + " LIMIT 1), k.n FROM (SELECT split_part(okey, chr(1), 1) AS account,"
    " split_part(okey, chr(1), 2) AS grp, split_part(okey, chr(1), 3) AS kind_key,"
    " count(*) AS n FROM objects GROUP BY 1, 2, 3) k"
)
