"""Protobuf envelopes with fast paths for the hot messages: ``AgentMessage{event_batch}``,
Acks, and the operation messages (``Operation`` down, ``OperationResult`` up; ``_flat.py``).

betterproto is the envelope and the control plane, but on this machine class it costs ~7 ms to
encode and ~5 ms to parse an AgentMessage holding a 0.9 MB EventBatch (it copies the records
field several times), more than the rest of the batch's trip. EventBatch is three fields, so
it is encoded and parsed here by hand, with one copy of the records each way. The bytes are
exactly protobuf's (tests/wire/test_envelope.py checks them against betterproto in both
directions), and anything unusual (other fields, unknown tags) goes through betterproto.
Sans-I/O: pure functions on bytes. The decoders raise ProtocolViolation for bad input, whatever
betterproto raised (it raises assorted errors) kept as its cause.
"""

from __future__ import annotations

from typing import Any, TypeVar

import betterproto

from ._errors import ProtocolViolation
from ._flat import FlatField, decode_flat, encode_flat, read_varint, varint
from ._unknown import check_shape
from .messages import Ack, AgentMessage, EventBatch, Operation, OperationResult, ServerMessage

_EVENT_BATCH_TAG = 0x12  # AgentMessage field 2 (event_batch), wire type 2 (length-delimited)
_SEQ_TAG = 0x08  # EventBatch field 1 (seq), varint
_RECORDS_TAG = 0x12  # EventBatch field 2 (records), length-delimited
_COUNT_TAG = 0x18  # EventBatch field 3 (count), varint
_ACK_TAG = 0x12  # ServerMessage field 2 (ack), length-delimited
_ACK_SEQ_TAG = 0x08  # Ack field 1 (seq), varint
_OPERATION_TAG = 0x1A  # ServerMessage field 3 (operation), length-delimited
_RESULT_TAG = 0x1A  # AgentMessage field 3 (operation_result), length-delimited
_OPERATION_FIELDS: tuple[FlatField, ...] = (
    (1, "id", "string"),
    (2, "account", "string"),
    (3, "type", "string"),
    (4, "payload_json", "string"),
    (5, "deadline_ms", "int64"),
)
_RESULT_FIELDS: tuple[FlatField, ...] = (
    (1, "id", "string"),
    (2, "account", "string"),
    (3, "ok", "bool"),
    (4, "result_json", "string"),
    (5, "error_message", "string"),
    (6, "error_code", "string"),
)


def encode_agent_message(message: AgentMessage) -> bytes:
    """Serialize ``message`` as protobuf (what ``bytes(message)`` gives, faster for batches)."""
    name, batch = betterproto.which_one_of(message, "message")
    if name == "operation_result" and isinstance(batch, OperationResult):
        return encode_operation_result(batch)
    if name != "event_batch" or not isinstance(batch, EventBatch):
        return bytes(message)
    encoded = encode_event_batch(batch.seq, batch.records, batch.count)
    return bytes(message) if encoded is None else encoded  # betterproto reports what is wrong


def encode_operation_result(result: OperationResult) -> bytes:
    """``AgentMessage{operation_result}`` as protobuf, with no envelope object built."""
    encoded = _framed(
        _RESULT_TAG, encode_flat(_RESULT_FIELDS, result.__dict__, betterproto.PLACEHOLDER)
    )
    return encoded if encoded is not None else bytes(AgentMessage(operation_result=result))


def encode_event_batch(seq: int, records: bytes, count: int) -> bytes | None:
    """``AgentMessage{event_batch{seq, records, count}}`` as protobuf, with no betterproto
    object built (they cost ~0.1 ms each here, a batch's envelope and its Ack two each); None
    when a value is out of its field's range."""
    if not (0 <= seq < 2**64 and 0 <= count < 2**32) or not isinstance(records, bytes):
        return None
    head = bytearray()
    if seq:
        head += b"\x08" + varint(seq)
    if records:
        head += b"\x12" + varint(len(records))
    tail = b"\x18" + varint(count) if count else b""
    inner_length = len(head) + len(records) + len(tail)
    tag_length = b"\x12" + varint(inner_length)
    return b"".join((tag_length, head, records, tail))


def grpc_framed(message: bytes) -> bytes:
    """``message`` as one gRPC message on the stream: uncompressed, its length in front."""
    return b"".join((_grpc_prefix(len(message)), message))


def _grpc_prefix(size: int) -> bytes:
    return b"\x00" + size.to_bytes(4, "big")


def decode_agent_message(data: bytes) -> AgentMessage:
    """Parse protobuf bytes as an AgentMessage (betterproto's ``parse``, faster for batches).

    Raises ProtocolViolation for input that is not one (whatever betterproto raised is its
    cause).
    """
    try:
        return _decode_agent_message(data)
    except ProtocolViolation:  # refused by shape, before betterproto saw it
        raise
    except Exception as exc:  # betterproto raises assorted errors on bad input
        raise _violation("AgentMessage", exc) from exc


def _decode_agent_message(data: bytes) -> AgentMessage:
    batch = _parse_event_batch(data)
    if batch is not None:  # one per batch: betterproto's constructor costs ~80 us here
        return construct(AgentMessage, {"event_batch": batch})
    fields = _unframed(_RESULT_TAG, _RESULT_FIELDS, data)
    if fields is not None:
        return construct(AgentMessage, {"operation_result": construct(OperationResult, fields)})
    check_shape(AgentMessage, data)
    return checked(AgentMessage().parse(data))


def encode_server_message(message: ServerMessage) -> bytes:
    """Serialize ``message`` as protobuf (what ``bytes(message)`` gives, faster for Acks:
    one per batch, where betterproto spends ~100 us)."""
    name, ack = betterproto.which_one_of(message, "message")
    if name == "operation" and isinstance(ack, Operation):
        return _framed(
            _OPERATION_TAG, encode_flat(_OPERATION_FIELDS, ack.__dict__, betterproto.PLACEHOLDER)
        ) or bytes(message)
    if name != "ack" or not isinstance(ack, Ack) or not 0 <= ack.seq < 2**64:
        return bytes(message)
    inner = b"\x08" + varint(ack.seq) if ack.seq else b""
    return b"\x12" + varint(len(inner)) + inner


def decode_server_message(data: bytes) -> ServerMessage:
    """Parse protobuf bytes as a ServerMessage (betterproto's ``parse``, checked; faster for
    Acks). Raises ProtocolViolation for input that is not one (betterproto's error is its
    cause)."""
    try:
        return _decode_server_message(data)
    except ProtocolViolation:  # refused by shape, before betterproto saw it
        raise
    except Exception as exc:  # betterproto raises assorted errors on bad input
        raise _violation("ServerMessage", exc) from exc


def decode_ack(data: bytes) -> int | None:
    """The seq if ``data`` is exactly ``ServerMessage{ack{seq}}`` (no object built), else None."""
    return _parse_ack(data)


def _decode_server_message(data: bytes) -> ServerMessage:
    seq = _parse_ack(data)
    if seq is not None:
        return ServerMessage(ack=Ack(seq=seq))
    fields = _unframed(_OPERATION_TAG, _OPERATION_FIELDS, data)
    if fields is not None:
        return construct(ServerMessage, {"operation": construct(Operation, fields)})
    check_shape(ServerMessage, data)
    return checked(ServerMessage().parse(data))


def _violation(name: str, exc: Exception) -> ProtocolViolation:
    return ProtocolViolation(f"received bytes that are not a valid {name}: {exc!r}")


def _framed(tag: int, body: bytes | None) -> bytes | None:
    """``body`` as the oneof field ``tag`` of an envelope (None stays None)."""
    if body is None:
        return None
    return bytes((tag,)) + varint(len(body)) + body


def _unframed(tag: int, fields: tuple[FlatField, ...], data: bytes) -> dict[str, object] | None:
    """The flat message's attributes if ``data`` is exactly that envelope field, else None."""
    if len(data) < 2 or data[0] != tag:
        return None
    try:
        length, pos = read_varint(data, 1)
    except ValueError:
        return None
    if pos + length != len(data):
        return None
    return decode_flat(fields, data, pos)


def _parse_ack(data: bytes) -> int | None:
    """The seq if ``data`` is exactly ``ServerMessage{ack{seq}}``, else None."""
    if len(data) < 2 or data[0] != _ACK_TAG:
        return None
    try:
        length, pos = read_varint(data, 1)
        if pos + length != len(data):
            return None
        if pos == len(data):
            return 0
        if data[pos] != _ACK_SEQ_TAG:
            return None
        seq, pos = read_varint(data, pos + 1)
    except ValueError:
        return None
    return seq if pos == len(data) and seq < 2**64 else None


_Message = TypeVar("_Message", bound=betterproto.Message)
#: Per message class: its fields unset, and its oneof group by field name.
_SHAPES: dict[type[betterproto.Message], tuple[dict[str, Any], dict[str, str]]] = {}


def construct(cls: type[_Message], values: dict[str, Any]) -> _Message:
    """``cls(**values)`` for values already of their fields' types (decoded here, or made by
    our own code), without betterproto's constructor: it sets every field through its
    ``__setattr__`` and walks them all again in ``__post_init__``, ~70-85 us per message on
    this machine class, four messages per operation (Operation, ServerMessage down;
    OperationResult, AgentMessage up). The object is the constructor's, attribute for
    attribute (tests/wire/test_envelope_ops.py compares their ``__dict__``); values are not
    checked, so only for values that ``cls(**values)`` would take. At most one field of a
    oneof group in ``values``."""
    shape = _SHAPES.get(cls)
    if shape is None:
        meta = cls._betterproto.meta_by_field_name  # type: ignore[arg-type]  # a classproperty
        unset = {name: betterproto.PLACEHOLDER for name in meta}
        groups = {name: field.group for name, field in meta.items() if field.group}
        shape = _SHAPES[cls] = (unset, groups)
    unset, groups = shape
    current: dict[str, str | None] = dict.fromkeys(groups.values())
    for name in values:
        group = groups.get(name)
        if group is not None:
            current[group] = name
    message = cls.__new__(cls)
    state = message.__dict__
    state["_serialized_on_wire"] = bool(values)  # what __post_init__ finds: any field set
    state.update(unset)
    state.update(values)
    state["_unknown_fields"] = b""
    state["_group_current"] = current
    return message


def checked(message: _Message) -> _Message:
    """``message`` once every field holds what its type says; raises TypeError naming the
    first that does not.

    betterproto's ``parse`` accepts malformed input that only fails later, wherever the
    message is used: a truncated entry of a repeated field becomes ``None``, and a field sent
    with another wire type keeps the other type's value (an integer in a message field).
    Serializing it again to find out, as this once did, is not safe: betterproto turns such
    an integer into ``bytes(value)``, so 50 bytes naming 2**60 made the server allocate that
    much. This walks the fields and checks types instead. Control messages are small; event
    batches never come this way.
    """
    _check_fields(message, type(message).__name__)
    return message


# Python types the non-message proto types parse to (every integer kind is an int).
_SCALAR_TYPES: dict[str, type | tuple[type, ...]] = {
    betterproto.TYPE_STRING: str,
    betterproto.TYPE_BYTES: bytes,
    betterproto.TYPE_BOOL: bool,
    betterproto.TYPE_DOUBLE: float,
    betterproto.TYPE_FLOAT: float,
}


def _check_fields(message: betterproto.Message, where: str) -> None:
    # betterproto types _betterproto as a classproperty mypy cannot apply to a Message.
    info = message._betterproto  # type: ignore[arg-type]
    for name, meta in info.meta_by_field_name.items():
        # The stored value: reading the attribute builds defaults, and raises for a oneof
        # member that is not the one set. Unset fields hold betterproto's placeholder.
        value = message.__dict__.get(name, betterproto.PLACEHOLDER)
        if value is betterproto.PLACEHOLDER:
            continue
        path = f"{where}.{name}"
        if not isinstance(value, list):
            values = [value]
        elif info.default_gen[name] is list:  # a repeated field (its default is a new list)
            values = value
        else:
            # betterproto reads any length-delimited scalar as a packed list, whatever the
            # field's label, and each item has the right type: Limits{max_batch_events: [5]}
            # made the agent's min(int, list) raise.
            raise TypeError(f"{path}: a list where one {meta.proto_type} belongs")
        for item in values:
            if meta.proto_type == betterproto.TYPE_MESSAGE:
                if not isinstance(item, betterproto.Message):
                    raise TypeError(f"{path}: {type(item).__name__} where a message belongs")
                _check_fields(item, path)
            elif meta.proto_type == betterproto.TYPE_MAP:
                if not isinstance(item, dict):
                    raise TypeError(f"{path}: {type(item).__name__} where a map belongs")
            elif not isinstance(item, _SCALAR_TYPES.get(meta.proto_type, int)):
                raise TypeError(f"{path}: {type(item).__name__} where {meta.proto_type} belongs")


def _parse_event_batch(data: bytes) -> EventBatch | None:
    """The EventBatch if ``data`` is exactly ``AgentMessage{event_batch}``, else None."""
    if not data or data[0] != _EVENT_BATCH_TAG:
        return None
    try:
        length, pos = read_varint(data, 1)
        if pos + length != len(data):
            return None
        seq = count = 0
        records = b""
        while pos < len(data):
            tag = data[pos]
            if tag == _SEQ_TAG:
                seq, pos = read_varint(data, pos + 1)
            elif tag == _COUNT_TAG:
                count, pos = read_varint(data, pos + 1)
            elif tag == _RECORDS_TAG:
                size, start = read_varint(data, pos + 1)
                pos = start + size
                if pos > len(data):
                    return None
                records = data[start:pos]
            else:
                return None
    except ValueError:
        return None
    if count >= 2**32:
        return None
    return construct(EventBatch, {"seq": seq, "records": records, "count": count})
