"""Fields and oneof members this version does not know are named and counted (sans-I/O), and
a known field with the wrong wire type is still refused: unknown is not malformed."""

from __future__ import annotations

import betterproto
import pytest

import wire
from wire import messages as m
from wire._envelope import decode_agent_message, decode_server_message
from wire._flat import varint

from .protobuf_bytes import bytes_field, varint_field


def test_an_unknown_oneof_member_is_named_and_the_envelope_is_empty() -> None:
    raw = bytes_field(30, bytes_field(1, b"a message kind from the future"))
    message = decode_agent_message(raw)
    assert betterproto.which_one_of(message, "message") == ("", None)
    assert wire.unknown_fields(message) == [("AgentMessage", 30)]


def test_unknown_fields_inside_known_messages_are_named_at_every_depth() -> None:
    account = bytes(m.AccountInfo(name="k1")) + varint_field(15, 7)
    hello = bytes(m.Hello(agent_id="a")) + bytes_field(5, account) + bytes_field(40, b"x")
    message = decode_agent_message(bytes_field(1, hello))
    assert message.hello.agent_id == "a"
    assert message.hello.accounts[0].name == "k1"
    assert wire.unknown_fields(message) == [("Hello", 40), ("AccountInfo", 15)]


def test_the_fast_paths_fall_back_and_still_see_unknown_fields() -> None:
    # EventBatch and OperationResult (up), Ack and Operation (down) have hand-written
    # decoders; an unknown field sends them to betterproto, which keeps it.
    batch = bytes(m.EventBatch(seq=3, records=b"r", count=1)) + varint_field(9, 1)
    decoded = decode_agent_message(bytes_field(2, batch))
    assert (decoded.event_batch.seq, decoded.event_batch.records) == (3, b"r")
    assert wire.unknown_fields(decoded) == [("EventBatch", 9)]
    result = bytes(m.OperationResult(id="op", ok=True)) + bytes_field(12, b"?")
    assert wire.unknown_fields(decode_agent_message(bytes_field(3, result))) == [
        ("OperationResult", 12)
    ]
    ack = bytes(m.Ack(seq=5)) + varint_field(2, 1)
    decoded_down = decode_server_message(bytes_field(2, ack))
    assert decoded_down.ack.seq == 5
    assert wire.unknown_fields(decoded_down) == [("Ack", 2)]
    operation = bytes(m.Operation(id="op", type="deploy")) + bytes_field(6, b"{}")
    assert wire.unknown_fields(decode_server_message(bytes_field(3, operation))) == [
        ("Operation", 6)
    ]


def test_known_messages_have_no_unknown_fields() -> None:
    welcome = m.Welcome(
        session_token="t", accounts=[m.AccountAssignment(name="k1", role=m.Role.PRIMARY)]
    )
    assert wire.unknown_fields(decode_server_message(bytes(m.ServerMessage(welcome=welcome)))) == []
    assert (
        wire.unknown_fields(decode_server_message(bytes(m.ServerMessage(ack=m.Ack(seq=1))))) == []
    )


def test_every_wire_type_of_an_unknown_field_is_skipped() -> None:
    fixed64 = varint(41 << 3 | 1) + bytes(8)
    fixed32 = varint(42 << 3 | 5) + bytes(4)
    raw = varint_field(40, 2**63) + fixed64 + fixed32 + bytes_field(43, b"abc")
    assert wire.unknown_fields(decode_agent_message(raw)) == [
        ("AgentMessage", 40),
        ("AgentMessage", 41),
        ("AgentMessage", 42),
        ("AgentMessage", 43),
    ]


def test_a_known_field_with_the_wrong_wire_type_is_still_refused() -> None:
    # Field 1 is Hello (a message); as a varint it is malformed, not unknown (e3a1f4c).
    with pytest.raises(wire.ProtocolViolation, match="where a message belongs"):
        decode_agent_message(varint_field(1, 5))
    # Inside a known message too: Hello.agent_id (2) is a string.
    with pytest.raises(wire.ProtocolViolation):
        decode_agent_message(bytes_field(1, varint_field(2, 5)))


def test_the_counter_says_what_is_new_and_is_bounded() -> None:
    counter = wire.UnknownFieldCounter(max_distinct=2)
    assert counter.note([("AgentMessage", 30)]) == [("AgentMessage", 30)]
    assert counter.note([("AgentMessage", 30), ("Hello", 9)]) == [("Hello", 9)]
    assert counter.note([("Hello", 9)]) == []
    # Past max_distinct the peer's choices are counted together: no label per invented number.
    assert counter.note([("Hello", 10), ("Hello", 11)]) == [wire.OTHER_UNKNOWN]
    assert counter.counts == {("AgentMessage", 30): 2, ("Hello", 9): 2, wire.OTHER_UNKNOWN: 2}
    assert counter.describe(("Hello", 9)) == "field 9 of Hello"
    assert "beyond 2 different" in counter.describe(wire.OTHER_UNKNOWN)
    # The rows both sides' Prometheus counters are built from: key order, "other" spelled out.
    assert counter.metric_rows() == [
        ("AgentMessage", "30", 2),
        ("Hello", "9", 2),
        (wire.OTHER_UNKNOWN[0], "other", 2),
    ]
