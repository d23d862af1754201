"""Hand-written protobuf for the operation messages, which are flat: strings, a bool, an int64.

Every operation crosses the stream twice (Operation down, OperationResult up), and
betterproto spends ~0.4-1.3 ms per message on this machine class (parse, then the re-encode
``checked()`` does; measured in the bench_ops profile: ~3 ms of CPU per operation over both
processes). These messages have no nesting, so they are encoded and parsed here directly.
The bytes are exactly protobuf's as betterproto writes them (fields in number order, proto3
defaults omitted; tests/wire/test_envelope_ops.py checks both directions); anything unusual
(unknown or repeated fields, wrong wire types, invalid UTF-8, out-of-range varints) answers
None so the caller falls back to betterproto, which decides what it means. Sans-I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = ["FlatField", "decode_flat", "encode_flat", "read_varint", "varint"]

Kind = Literal["string", "bool", "int64"]
#: (field number, attribute name, kind); field numbers 1..15 (one-byte tags).
FlatField = tuple[int, str, Kind]

_LENGTH_DELIMITED = 2
_VARINT = 0
_U64 = 2**64
_MISSING = object()  # never a field's value: isinstance refuses it below


def varint(value: int) -> bytes:
    """``value`` (0 <= value < 2**64) as a protobuf varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; ValueError if it runs off the end."""
    result = 0
    shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def encode_flat(
    fields: Sequence[FlatField], values: Mapping[str, Any], unset: object = None
) -> bytes | None:
    """The protobuf body of a message whose attributes are ``values`` (per ``fields``; a
    value that is ``unset`` is the field's default), or None when a value is missing or not
    what the field's kind takes (betterproto then reports it). The envelopes pass a
    betterproto message's ``__dict__``: its ``__getattribute__`` costs ~1-2 us per read."""
    out = bytearray()
    for number, name, kind in fields:
        value = values.get(name, _MISSING)
        if value is unset:
            continue  # proto3 leaves a default out
        if kind == "string":
            if not isinstance(value, str):
                return None
            if value:
                try:
                    raw = value.encode("utf-8")
                except UnicodeEncodeError:
                    return None
                out.append(number << 3 | _LENGTH_DELIMITED)
                out += varint(len(raw))
                out += raw
        elif kind == "bool":
            if not isinstance(value, bool):
                return None
            if value:
                out.append(number << 3 | _VARINT)
                out.append(1)
        else:
            if not isinstance(value, int) or not -(2**63) <= value < 2**63:
                return None
            if value:
                out.append(number << 3 | _VARINT)
                out += varint(value % _U64)  # negative: two's complement, ten bytes
    return bytes(out)


def decode_flat(fields: Sequence[FlatField], data: bytes, start: int) -> dict[str, Any] | None:
    """The attributes read from ``data[start:]`` (absent ones at their proto3 default), or
    None when the bytes are anything but the plain encoding of these fields."""
    by_tag: dict[int, tuple[str, Kind]] = {}
    for number, name, kind in fields:
        wire_type = _LENGTH_DELIMITED if kind == "string" else _VARINT
        by_tag[number << 3 | wire_type] = (name, kind)
    values: dict[str, Any] = {
        name: "" if kind == "string" else False if kind == "bool" else 0 for _, name, kind in fields
    }
    seen: set[int] = set()
    pos, end = start, len(data)
    try:
        while pos < end:
            tag = data[pos]
            entry = by_tag.get(tag)
            if entry is None or tag in seen:
                return None
            seen.add(tag)
            name, kind = entry
            if kind == "string":
                size, pos = read_varint(data, pos + 1)
                if pos + size > end:
                    return None
                values[name] = data[pos : pos + size].decode("utf-8")
                pos += size
                continue
            number, pos = read_varint(data, pos + 1)
            if kind == "bool":
                if number > 1:
                    return None
                values[name] = bool(number)
            else:
                if number >= _U64:
                    return None
                values[name] = number - _U64 if number >= 2**63 else number
    except (ValueError, UnicodeDecodeError):
        return None
    return values
