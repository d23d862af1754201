"""Protobuf bytes written by hand, for messages this version's code would never produce: a
field number it does not know (what the next version may send)."""

from __future__ import annotations

from typing import TypeVar

import betterproto

from wire._flat import varint

VARINT, LENGTH_DELIMITED = 0, 2
_M = TypeVar("_M", bound=betterproto.Message)


def varint_field(number: int, value: int) -> bytes:
    """Field ``number`` as a varint."""
    return varint(number << 3 | VARINT) + varint(value)


def bytes_field(number: int, body: bytes) -> bytes:
    """Field ``number`` as length-delimited bytes (a string, bytes or a message)."""
    return varint(number << 3 | LENGTH_DELIMITED) + varint(len(body)) + body


def as_sent(cls: type[_M], raw: bytes) -> _M:
    """A message of ``cls`` that the bridge sends as exactly ``raw``, whatever ``raw`` holds
    (known fields, unknown ones, or a known field with the wrong wire type). betterproto
    writes a message's ``_unknown_fields`` verbatim, and with no known field set the bridge's
    encoders take betterproto's path rather than a hand-written one."""
    message = cls()
    message._unknown_fields = raw
    assert bytes(message) == raw
    return message
