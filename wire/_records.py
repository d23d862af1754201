"""Event records: the compact framing that carries Kubernetes events inside an EventBatch.

Theory of operation. Protobuf (betterproto) costs tens of microseconds per message, far above
the per-event budget, so events never travel one protobuf message each. A batch of events is
one msgpack array of records; each record is itself an array (no field names on the wire):
``[type, account, api_version, kind, namespace, name, uid, resource_version, object, scope]``
where ``object`` is the API server's raw JSON bytes as a msgpack ``bin``. msgspec encodes and
decodes this in C, at millions of small records per second. The framing as a contract for other
implementations, with byte examples: docs/protocol.md §6.

Sans-I/O: these are pure functions on bytes. Both directions enforce :class:`RecordLimits`
(events per batch, bytes per batch, bytes per object) and raise :class:`RecordError` naming the
record and the limit. The record count is read from the msgpack array header before anything
is decoded, so an oversize batch is refused without allocating its records.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import msgspec

from ._errors import RecordError

__all__ = [
    "DEFAULT_LIMITS",
    "EventRecord",
    "EventType",
    "RecordLimits",
    "decode_events",
    "encode_events",
]


class EventType(enum.IntEnum):
    """What a record says happened. Sync markers bracket a full listing (DESIGN section 5)."""

    ADDED = 1
    MODIFIED = 2
    DELETED = 3
    BOOKMARK = 4
    SYNC_BEGIN = 5
    SYNC_END = 6


# Checked by msgspec in C while decoding, so an unknown type costs no Python per record.
_EventTypeCode = Annotated[int, msgspec.Meta(ge=int(min(EventType)), le=int(max(EventType)))]


class EventRecord(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One Kubernetes event. ``object`` is the raw JSON bytes (``b""`` for bookmarks and sync
    markers); ``scope`` is, for sync markers and bookmarks, ``""`` for cluster-wide or the
    namespace."""

    type: _EventTypeCode
    account: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    object: bytes
    scope: str = ""


@dataclass(frozen=True, slots=True)
class RecordLimits:
    """Hard caps applied by :func:`encode_events` and :func:`decode_events`."""

    max_events: int = 10_000
    max_bytes: int = 8 * 2**20
    max_object_bytes: int = 4 * 2**20

    def __post_init__(self) -> None:
        for name in ("max_events", "max_bytes", "max_object_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RecordLimits.{name} must be positive, got {getattr(self, name)}")


DEFAULT_LIMITS = RecordLimits()

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[EventRecord])
_record = msgspec.msgpack.Decoder(EventRecord)


def encode_events(records: Sequence[EventRecord], limits: RecordLimits = DEFAULT_LIMITS) -> bytes:
    """Encode ``records`` as one msgpack array.

    Raises RecordError when there are more than ``limits.max_events`` records, when one
    object is over ``limits.max_object_bytes``, or when the result is over ``limits.max_bytes``.
    """
    if len(records) > limits.max_events:
        raise RecordError(
            f"cannot encode {len(records)} event records: more than max_events={limits.max_events}"
        )
    max_object = limits.max_object_bytes
    for index, record in enumerate(records):
        if len(record.object) > max_object:
            raise RecordError(
                f"event record {index} ({record.kind} {record.namespace}/{record.name}): object of "
                f"{len(record.object)} bytes exceeds max_object_bytes={max_object}",
                index=index,
            )
    data = _encoder.encode(records)
    if len(data) > limits.max_bytes:
        raise RecordError(
            f"{len(records)} event records encode to {len(data)} bytes: "
            f"more than max_bytes={limits.max_bytes}"
        )
    return data


def _array_length(data: bytes) -> int:
    """The element count of the msgpack array that ``data`` starts with."""
    if not data:
        raise RecordError("event records: empty input (expected a msgpack array)")
    head = data[0]
    if 0x90 <= head <= 0x9F:
        return head & 0x0F
    if head == 0xDC and len(data) >= 3:
        return int.from_bytes(data[1:3], "big")
    if head == 0xDD and len(data) >= 5:
        return int.from_bytes(data[1:5], "big")
    raise RecordError(
        f"event records: input does not start with a msgpack array (first byte 0x{head:02x})"
    )


def decode_events(data: bytes, limits: RecordLimits = DEFAULT_LIMITS) -> list[EventRecord]:
    """Decode what :func:`encode_events` produced.

    Raises RecordError when ``data`` is over ``limits.max_bytes``, holds more than
    ``limits.max_events`` records (checked before decoding), is not a msgpack array of
    well-formed records (the message names the record and field, e.g. ``$[3][0]``; an unknown
    event type is one such), or has an object over ``limits.max_object_bytes``.
    """
    if len(data) > limits.max_bytes:
        raise RecordError(f"event records: {len(data)} bytes exceeds max_bytes={limits.max_bytes}")
    count = _array_length(data)
    if count > limits.max_events:
        raise RecordError(f"event records: {count} records exceeds max_events={limits.max_events}")
    try:
        records = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise RecordError(f"event records: malformed record: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise RecordError(f"event records: not valid msgpack: {exc}") from exc
    except UnicodeDecodeError as exc:  # msgspec decodes str as UTF-8 and lets this through
        index = _bad_text_index(data)
        raise RecordError(
            f"event record {index}: a text field is not valid UTF-8 ({exc.reason})", index=index
        ) from exc
    max_object = limits.max_object_bytes
    if max_object >= len(data):
        return records  # no object can be larger than the whole input
    for index, record in enumerate(records):
        if len(record.object) > max_object:
            raise RecordError(
                f"event record {index} ({record.kind} {record.namespace}/{record.name}): object of "
                f"{len(record.object)} bytes exceeds max_object_bytes={max_object}",
                index=index,
            )
    return records


_raw_records = msgspec.msgpack.Decoder(list[msgspec.Raw])


def _bad_text_index(data: bytes) -> int | None:
    """The index of the first record whose text is not UTF-8 (error path only)."""
    try:
        raws = _raw_records.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    for index, raw in enumerate(raws):
        try:
            _record.decode(raw)
        except UnicodeDecodeError:
            return index
        except msgspec.DecodeError:
            continue
    return None
