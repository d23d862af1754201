"""Fields a received message carries that this version of the protocol does not know.

Theory of operation. Protobuf's promise to the next version is that an old peer skips what it
does not know: a new oneof member of AgentMessage or ServerMessage (a new kind of message),
or a new field inside a known message. betterproto already keeps such fields aside, as their
raw bytes, in each message's ``_unknown_fields``; :func:`unknown_fields` walks a decoded
message and names them, ``(message type, field number)``, and :class:`UnknownFieldCounter`
counts them for the metrics and says which ones are new, so that the caller logs each once.
A known field sent with the wrong wire type is not "unknown": the decoder refuses it
(_envelope.checked). Sans-I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import betterproto

from ._errors import ProtocolViolation
from ._flat import read_varint

__all__ = [
    "MAX_MESSAGES",
    "MAX_OCCURRENCES",
    "MAX_UNKNOWN_FIELDS",
    "OTHER_UNKNOWN",
    "UnknownField",
    "UnknownFieldCounter",
    "check_shape",
    "unknown_fields",
]

#: (the message type that carried it, e.g. "AgentMessage" or "Hello"; its field number)
UnknownField = tuple[str, int]
#: Where the counter puts unknown fields once it holds ``max_distinct`` others (field 0 is
#: never a valid field number, so it cannot clash with a real one).
OTHER_UNKNOWN: UnknownField = ("other", 0)

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5

#: Bounds on one received message (docs/protocol.md §15), each far above what this version
#: sends: unknown fields in the whole message; occurrences of one field in one message (an
#: agent's accounts, default limit 1,000; an account's kinds, a few hundred in the largest
#: clusters); nested messages in all (1,000 accounts of 99 kinds each). The worst message
#: inside them costs betterproto ~6 s once; past them it cost minutes.
MAX_UNKNOWN_FIELDS = 1_000
MAX_OCCURRENCES = 10_000
MAX_MESSAGES = 100_000


def unknown_fields(message: betterproto.Message) -> list[UnknownField]:
    """The unknown fields of ``message`` and of every message inside it, in the order met.

    An unknown oneof member of an envelope shows as ``("AgentMessage", n)`` (the envelope's
    ``which_one_of`` is then empty); one inside a known message as ``("Hello", n)``. Fields
    repeated on the wire are listed once per occurrence. Costs a walk over the message's
    set fields: cheap for the control messages, and the hot messages (batches, Acks,
    operations) have a handful of fields."""
    found: list[UnknownField] = []
    _walk(message, found)
    return found


def _walk(message: betterproto.Message, found: list[UnknownField]) -> None:
    state = message.__dict__
    raw = state.get("_unknown_fields", b"")
    if raw:
        name = type(message).__name__
        found.extend((name, number) for number in _field_numbers(raw))
    # betterproto types _betterproto as a classproperty mypy cannot apply to a Message.
    fields = message._betterproto.meta_by_field_name  # type: ignore[arg-type]
    for attribute, meta in fields.items():
        if meta.proto_type != betterproto.TYPE_MESSAGE:
            continue
        value = state.get(attribute, betterproto.PLACEHOLDER)
        if value is betterproto.PLACEHOLDER:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, betterproto.Message):  # checked() refused anything else
                _walk(item, found)


def _field_numbers(raw: bytes) -> list[int]:
    """The field numbers of the protobuf fields in ``raw`` (bytes betterproto already split
    into whole fields, so a stop on something odd loses nothing it accepted)."""
    return [number for number, _, _, _ in _fields(raw, 0, len(raw))]


def _fields(raw: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """``(number, wire type, start, end)`` of each field in ``raw[pos:end]``, its value
    between start and end; stops quietly at the first one that does not fit (betterproto
    then says what is wrong, or already kept only whole fields)."""
    try:
        while pos < end:
            tag, pos = read_varint(raw, pos)
            wire_type = tag & 7
            start = pos
            if wire_type == _VARINT:
                _, pos = read_varint(raw, pos)
            elif wire_type == _FIXED64:
                pos += 8
            elif wire_type == _LENGTH_DELIMITED:
                size, start = read_varint(raw, pos)
                pos = start + size
            elif wire_type == _FIXED32:
                pos += 4
            # Groups (3, 4) and invalid types carry nothing betterproto read: the next field
            # starts after the tag, as in betterproto's own parse_fields.
            if pos > end:
                return
            yield tag >> 3, wire_type, start, pos
    except ValueError:
        return


def check_shape(cls: type[betterproto.Message], data: bytes) -> None:
    """Raise ProtocolViolation if ``data``, read as ``cls``, holds more than
    :data:`MAX_UNKNOWN_FIELDS` unknown fields, a field more than :data:`MAX_OCCURRENCES`
    times in one message, or more than :data:`MAX_MESSAGES` nested messages. One linear pass
    over the bytes, building nothing; malformed bytes are left to betterproto to refuse."""
    totals = [0, 0]  # unknown fields, nested messages
    _check(cls, data, 0, len(data), totals)


def _check(
    cls: type[betterproto.Message], raw: bytes, pos: int, end: int, totals: list[int]
) -> None:
    # betterproto types _betterproto as a classproperty mypy cannot apply here.
    info = cls._betterproto  # type: ignore[arg-type]
    by_number = info.field_name_by_number
    seen: dict[int, int] = {}
    for number, wire_type, start, stop in _fields(raw, pos, end):
        name = by_number.get(number)
        if name is None:
            totals[0] += 1
            if totals[0] > MAX_UNKNOWN_FIELDS:
                raise ProtocolViolation(
                    f"a {cls.__name__} with more than {MAX_UNKNOWN_FIELDS} unknown fields"
                )
            continue
        count = seen[number] = seen.get(number, 0) + 1
        if count > MAX_OCCURRENCES:
            raise ProtocolViolation(
                f"{cls.__name__}.{name} (field {number}) {count} times in one message, more "
                f"than the {MAX_OCCURRENCES} allowed"
            )
        meta = info.meta_by_field_name[name]
        if meta.proto_type == betterproto.TYPE_MESSAGE and wire_type == _LENGTH_DELIMITED:
            totals[1] += 1
            if totals[1] > MAX_MESSAGES:
                raise ProtocolViolation(f"more than {MAX_MESSAGES} nested messages in one message")
            # Known messages nest as deep as the schema does (no message contains itself).
            _check(info.cls_by_field[name], raw, start, stop, totals)


@dataclass(slots=True)
class UnknownFieldCounter:
    """How many times each unknown field arrived, for a metric and a log line each.

    Bounded: the peer chooses the field numbers, so past ``max_distinct`` different ones the
    rest are counted together under :data:`OTHER_UNKNOWN`."""

    max_distinct: int = 64
    counts: dict[UnknownField, int] = field(default_factory=dict)

    def describe(self, key: UnknownField) -> str:
        """``key`` in words, for the one log line each gets."""
        if key == OTHER_UNKNOWN:
            return f"unknown fields beyond {self.max_distinct} different ones (counted together)"
        return f"field {key[1]} of {key[0]}"

    def metric_rows(self) -> list[tuple[str, str, int]]:
        """``(message, field label, count)`` in key order, for a Prometheus counter: the label
        is the field number, or "other" for :data:`OTHER_UNKNOWN`."""
        return [
            (message, "other" if (message, number) == OTHER_UNKNOWN else str(number), count)
            for (message, number), count in sorted(self.counts.items())
        ]

    def note(self, found: Iterable[UnknownField]) -> list[UnknownField]:
        """Count ``found``; return the fields seen for the first time (to log once each)."""
        new: list[UnknownField] = []
        counts = self.counts
        for key in found:
            if key not in counts and len(counts) >= self.max_distinct:
                key = OTHER_UNKNOWN
            if key not in counts:
                counts[key] = 0
                new.append(key)
            counts[key] += 1
        return new
