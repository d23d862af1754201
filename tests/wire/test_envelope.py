"""The hand-written EventBatch envelope is byte-for-byte protobuf, both ways."""

from __future__ import annotations

from collections.abc import Callable

import betterproto
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire import ProtocolViolation
from wire import messages as m
from wire._envelope import (
    decode_agent_message,
    decode_server_message,
    encode_agent_message,
    encode_event_batch,
    grpc_framed,
)
from wire._flat import varint

batches = st.builds(
    m.EventBatch,
    seq=st.integers(0, 2**64 - 1),
    records=st.binary(max_size=300),
    count=st.integers(0, 2**32 - 1),
)


@given(batches)
def test_encoding_matches_betterproto(batch: m.EventBatch) -> None:
    message = m.AgentMessage(event_batch=batch)
    assert encode_agent_message(message) == bytes(message)


@given(batches)
def test_the_objectless_encoding_matches_betterproto(batch: m.EventBatch) -> None:
    encoded = encode_event_batch(batch.seq, batch.records, batch.count)
    assert encoded == bytes(m.AgentMessage(event_batch=batch))


@given(batches)
def test_grpc_framing_puts_the_length_prefix_in_front(batch: m.EventBatch) -> None:
    plain = encode_event_batch(batch.seq, batch.records, batch.count)
    assert plain is not None
    assert grpc_framed(plain) == b"\x00" + len(plain).to_bytes(4, "big") + plain


def test_the_objectless_encoding_refuses_values_out_of_range() -> None:
    assert encode_event_batch(-1, b"", 0) is None
    assert encode_event_batch(0, b"", 2**32) is None


@given(batches)
def test_decoding_matches_betterproto(batch: m.EventBatch) -> None:
    data = bytes(m.AgentMessage(event_batch=batch))
    name, decoded = betterproto.which_one_of(decode_agent_message(data), "message")
    assert name == "event_batch"
    assert decoded == m.AgentMessage().parse(data).event_batch


@given(batches)
def test_a_decoded_batch_is_the_constructors_object(batch: m.EventBatch) -> None:
    """The fast path builds its objects with construct(): the same attributes as the
    betterproto constructor gives (what it returned before), envelope and batch."""
    data = bytes(m.AgentMessage(event_batch=batch))
    decoded = decode_agent_message(data)
    expected = m.AgentMessage(
        event_batch=m.EventBatch(seq=batch.seq, records=batch.records, count=batch.count)
    )
    assert decoded.__dict__.keys() == expected.__dict__.keys()
    for name, value in expected.__dict__.items():
        if name != "event_batch":
            assert decoded.__dict__[name] == value, name
    assert decoded.event_batch.__dict__ == expected.event_batch.__dict__


def test_other_messages_go_through_betterproto() -> None:
    hello = m.AgentMessage(hello=m.Hello(protocol_version=1, agent_id="a"))
    assert encode_agent_message(hello) == bytes(hello)
    assert decode_agent_message(bytes(hello)).hello.agent_id == "a"


def test_unknown_fields_fall_back_to_betterproto() -> None:
    # EventBatch with an extra field 9 (varint): not the fast path, still parsed.
    inner = b"\x08\x05" + b"\x48\x01"
    data = b"\x12" + bytes([len(inner)]) + inner
    assert decode_agent_message(data).event_batch.seq == 5


@given(st.binary(max_size=64))
def test_arbitrary_bytes_parse_like_betterproto_or_are_refused(data: bytes) -> None:
    # betterproto alone is no oracle for arbitrary bytes: it keeps a value sent with the
    # wrong wire type (an integer in a message field), and serializing that calls
    # bytes(integer), up to 2**64 bytes (this test once took the gate down with 24 GB). So:
    # what we accept, betterproto reads (and writes back) the same; anything else is refused.
    try:
        ours = decode_agent_message(data)
    except ProtocolViolation:
        return  # refused (its message is tested below)
    assert bytes(ours) == bytes(m.AgentMessage().parse(data))


def test_a_field_of_the_wrong_wire_type_is_refused_without_serializing_it() -> None:
    # Field 1 (hello, a message) as a varint of 2**60: serialized, that is bytes(2**60).
    data = b"\x08" + varint(2**60)
    with pytest.raises(ProtocolViolation, match=r"AgentMessage\.hello: int where a message"):
        decode_agent_message(data)
    with pytest.raises(ProtocolViolation, match=r"ServerMessage\.welcome: int where a message"):
        decode_server_message(data)


def test_a_malformed_nested_message_is_refused_at_the_edge() -> None:
    with pytest.raises(ProtocolViolation) as info:
        decode_agent_message(b'"\x01\x0b')  # AccountsChanged with a broken accounts entry
    assert isinstance(info.value.__cause__, TypeError)  # betterproto's own error, kept


def ld(number: int, body: bytes) -> bytes:
    """Field ``number`` length-delimited (a message, string, bytes or a packed list)."""
    return varint(number << 3 | 2) + varint(len(body)) + body


@pytest.mark.parametrize(
    ("decode", "data", "where"),
    [
        # Welcome{limits{max_batch_events: packed [5]}}: the agent's min(int, list) raised
        (
            decode_server_message,
            ld(1, ld(3, ld(2, b"\x05"))),
            r"ServerMessage\.welcome\.limits\.max_batch_events",
        ),
        # Welcome{accounts[{role: packed [1]}]}: known_role raised on the list
        (
            decode_server_message,
            ld(1, ld(4, ld(2, b"\x01"))),
            r"ServerMessage\.welcome\.accounts\.role",
        ),
        # OperationResult{ok: packed [1]}: a list leaked into the server's ops code
        (decode_agent_message, ld(3, ld(3, b"\x01")), r"AgentMessage\.operation_result\.ok"),
        # Hello{accounts[{kinds[{namespaced: packed [1, 0]}]}]}: into the registry
        (
            decode_agent_message,
            ld(1, ld(5, ld(6, ld(3, b"\x01\x00")))),
            r"hello\.accounts\.kinds\.namespaced",
        ),
    ],
)
def test_a_singular_scalar_sent_as_a_packed_list_is_refused(
    decode: Callable[[bytes], object], data: bytes, where: str
) -> None:
    """betterproto reads a length-delimited scalar as a packed list whatever the field's
    label, and each item has the field's type, so the item-by-item check let it through."""
    with pytest.raises(ProtocolViolation, match=where + r": a list where one \w+ belongs"):
        decode(data)
