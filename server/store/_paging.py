"""Continue tokens and limits of object queries, the same on both backends.

A token is the last returned object's sort key (account, group, kind key, namespace, name),
JSON in URL-safe base64: opaque to clients, checked when it comes back.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import msgspec

from .._errors import InvalidQuery
from ._okey import with_control

MAX_QUERY_LIMIT = 10_000


def check_limit(limit: int) -> None:
    """Raises InvalidQuery unless 1 <= limit <= MAX_QUERY_LIMIT."""
    if not 1 <= limit <= MAX_QUERY_LIMIT:
        raise InvalidQuery(f"limit {limit} is outside 1..{MAX_QUERY_LIMIT}")


def check_query_coordinates(**given: str | None) -> None:
    """Raises InvalidQuery when a coordinate asked for (account, group, kind, namespace)
    holds a control character: no stored object has one (``_prepared``), and on PostgreSQL
    one would reach into the key's next coordinate (``_okey``)."""
    found = with_control(given.items())
    if found is not None:
        raise InvalidQuery(f"{found[0]} {found[1]!r} holds a control character")


def make_token(key: Sequence[str]) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode(list(key))).decode()


def read_token(token: str) -> list[str]:
    """The sort key in ``token``; raises InvalidQuery for one this server did not issue."""
    try:
        key = msgspec.json.decode(base64.urlsafe_b64decode(token.encode()), type=list[str])
    except (ValueError, msgspec.DecodeError) as exc:
        raise InvalidQuery(f"continue token {token[:40]!r} is not one this server issued") from exc
    if len(key) != 5:
        raise InvalidQuery(f"continue token {token[:40]!r} is not one this server issued")
    return key
