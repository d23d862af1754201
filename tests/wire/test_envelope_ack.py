"""The hand-written Ack envelope (one per batch) is byte-for-byte protobuf, both ways."""

from __future__ import annotations

import betterproto
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire import ProtocolViolation
from wire import messages as m
from wire._envelope import decode_ack, decode_server_message, encode_server_message

seqs = st.integers(0, 2**64 - 1)


@given(seqs)
def test_ack_encoding_matches_betterproto(seq: int) -> None:
    message = m.ServerMessage(ack=m.Ack(seq=seq))
    assert encode_server_message(message) == bytes(message)


@given(seqs)
def test_ack_decoding_matches_betterproto(seq: int) -> None:
    data = bytes(m.ServerMessage(ack=m.Ack(seq=seq)))
    name, decoded = betterproto.which_one_of(decode_server_message(data), "message")
    assert name == "ack"
    assert decoded == m.ServerMessage().parse(data).ack


@given(seqs)
def test_an_ack_decodes_to_its_seq_without_objects(seq: int) -> None:
    assert decode_ack(bytes(m.ServerMessage(ack=m.Ack(seq=seq)))) == seq


def test_anything_but_a_plain_ack_is_not_taken_for_one() -> None:
    assert decode_ack(bytes(m.ServerMessage(heartbeat=m.Heartbeat(sent_at_ms=5)))) is None
    assert decode_ack(b"\x12\x04\x08\x07\x10\x01") is None  # an unknown field
    assert decode_ack(b"") is None


def test_other_server_messages_go_through_betterproto() -> None:
    welcome = m.ServerMessage(welcome=m.Welcome(session_token="t", server_id="s"))
    assert encode_server_message(welcome) == bytes(welcome)
    assert decode_server_message(bytes(welcome)).welcome.server_id == "s"
    beat = m.ServerMessage(heartbeat=m.Heartbeat(sent_at_ms=5))
    assert betterproto.which_one_of(decode_server_message(bytes(beat)), "message")[0] == "heartbeat"


@pytest.mark.parametrize(
    "data",
    [
        b"\x12\x03\x08\xb9",  # the varint runs off the end of the Ack
        b"\x12\x02\x08\x80",  # truncated varint inside a well-framed Ack
    ],
)
def test_malformed_acks_are_refused(data: bytes) -> None:
    with pytest.raises(ProtocolViolation, match="not a valid ServerMessage"):
        decode_server_message(data)


def test_an_ack_with_an_unknown_field_is_parsed_by_betterproto() -> None:
    data = b"\x12\x04\x08\x07\x10\x01"  # Ack{seq=7, field 2=1}
    assert decode_server_message(data).ack.seq == 7
