"""Protobuf envelopes with a fast path for the one hot message, ``AgentMessage{event_batch}``.

betterproto is the envelope and the control plane, but on this machine class it costs ~7 ms to
encode and ~5 ms to parse an AgentMessage holding a 0.9 MB EventBatch (it copies the records
field several times), more than the rest of the batch's trip. EventBatch is three fields, so
it is encoded and parsed here by hand, with one copy of the records each way. The bytes are
exactly protobuf's (tests/wire/test_envelope.py checks them against betterproto in both
directions), and anything unusual (other fields, unknown tags) goes through betterproto.
Sans-I/O: pure functions on bytes.
"""

from __future__ import annotations

from typing import TypeVar

import betterproto

from .messages import Ack, AgentMessage, EventBatch, ServerMessage

_EVENT_BATCH_TAG = 0x12  # AgentMessage field 2 (event_batch), wire type 2 (length-delimited)
_SEQ_TAG = 0x08  # EventBatch field 1 (seq), varint
_RECORDS_TAG = 0x12  # EventBatch field 2 (records), length-delimited
_COUNT_TAG = 0x18  # EventBatch field 3 (count), varint
_ACK_TAG = 0x12  # ServerMessage field 2 (ack), length-delimited
_ACK_SEQ_TAG = 0x08  # Ack field 1 (seq), varint


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
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


def encode_agent_message(message: AgentMessage) -> bytes:
    """Serialize ``message`` as protobuf (what ``bytes(message)`` gives, faster for batches)."""
    name, batch = betterproto.which_one_of(message, "message")
    if name != "event_batch" or not isinstance(batch, EventBatch):
        return bytes(message)
    seq, records, count = batch.seq, batch.records, batch.count
    if not (0 <= seq < 2**64 and 0 <= count < 2**32) or not isinstance(records, bytes):
        return bytes(message)  # let betterproto report what is wrong
    head = bytearray()
    if seq:
        head += b"\x08" + _varint(seq)
    if records:
        head += b"\x12" + _varint(len(records))
    tail = b"\x18" + _varint(count) if count else b""
    inner_length = len(head) + len(records) + len(tail)
    return b"".join((b"\x12", _varint(inner_length), head, records, tail))


def decode_agent_message(data: bytes) -> AgentMessage:
    """Parse protobuf bytes as an AgentMessage (betterproto's ``parse``, faster for batches).

    Raises whatever betterproto raises for input it cannot parse.
    """
    batch = _parse_event_batch(data)
    if batch is None:
        return checked(AgentMessage().parse(data))
    return AgentMessage(event_batch=batch)


def encode_server_message(message: ServerMessage) -> bytes:
    """Serialize ``message`` as protobuf (what ``bytes(message)`` gives, faster for Acks:
    one per batch, where betterproto spends ~100 us)."""
    name, ack = betterproto.which_one_of(message, "message")
    if name != "ack" or not isinstance(ack, Ack) or not 0 <= ack.seq < 2**64:
        return bytes(message)
    inner = b"\x08" + _varint(ack.seq) if ack.seq else b""
    return b"\x12" + _varint(len(inner)) + inner


def decode_server_message(data: bytes) -> ServerMessage:
    """Parse protobuf bytes as a ServerMessage (betterproto's ``parse``, checked; faster for
    Acks). Raises whatever betterproto raises for input it cannot parse."""
    seq = _parse_ack(data)
    if seq is None:
        return checked(ServerMessage().parse(data))
    return ServerMessage(ack=Ack(seq=seq))


def _parse_ack(data: bytes) -> int | None:
    """The seq if ``data`` is exactly ``ServerMessage{ack{seq}}``, else None."""
    if len(data) < 2 or data[0] != _ACK_TAG:
        return None
    try:
        length, pos = _read_varint(data, 1)
        if pos + length != len(data):
            return None
        if pos == len(data):
            return 0
        if data[pos] != _ACK_SEQ_TAG:
            return None
        seq, pos = _read_varint(data, pos + 1)
    except ValueError:
        return None
    return seq if pos == len(data) and seq < 2**64 else None


_Message = TypeVar("_Message", bound=betterproto.Message)


def checked(message: _Message) -> _Message:
    """``message`` once it is known to be whole.

    betterproto's ``parse`` accepts some malformed nested messages (a truncated entry of a
    repeated field becomes ``None``) that only fail later, wherever the message is used.
    Serializing it again walks every field, so such input fails here, at the edge, instead.
    Control messages are small; event batches never come this way.
    """
    bytes(message)
    return message


def _parse_event_batch(data: bytes) -> EventBatch | None:
    """The EventBatch if ``data`` is exactly ``AgentMessage{event_batch}``, else None."""
    if not data or data[0] != _EVENT_BATCH_TAG:
        return None
    try:
        length, pos = _read_varint(data, 1)
        if pos + length != len(data):
            return None
        seq = count = 0
        records = b""
        while pos < len(data):
            tag = data[pos]
            if tag == _SEQ_TAG:
                seq, pos = _read_varint(data, pos + 1)
            elif tag == _COUNT_TAG:
                count, pos = _read_varint(data, pos + 1)
            elif tag == _RECORDS_TAG:
                size, start = _read_varint(data, pos + 1)
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
    return EventBatch(seq=seq, records=records, count=count)
