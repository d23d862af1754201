"""The hand-written Operation / OperationResult envelopes are byte-for-byte protobuf."""

from __future__ import annotations

import dataclasses

import betterproto
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire import messages as m
from wire._envelope import (
    construct,
    decode_agent_message,
    decode_server_message,
    encode_agent_message,
    encode_operation_result,
    encode_server_message,
)

texts = st.text(max_size=40)
operations = st.builds(
    m.Operation,
    id=texts,
    account=texts,
    type=texts,
    payload_json=texts,
    deadline_ms=st.integers(-(2**63), 2**63 - 1),
)
results = st.builds(
    m.OperationResult,
    id=texts,
    account=texts,
    ok=st.booleans(),
    result_json=texts,
    error_message=texts,
    error_code=texts,
)


@given(operations)
def test_operations_match_betterproto_both_ways(operation: m.Operation) -> None:
    message = m.ServerMessage(operation=operation)
    data = encode_server_message(message)
    assert data == bytes(message)
    name, decoded = betterproto.which_one_of(decode_server_message(data), "message")
    assert name == "operation"
    assert decoded == operation


@given(results)
def test_results_match_betterproto_both_ways(result: m.OperationResult) -> None:
    message = m.AgentMessage(operation_result=result)
    data = encode_agent_message(message)
    assert data == bytes(message)
    name, decoded = betterproto.which_one_of(decode_agent_message(data), "message")
    assert name == "operation_result"
    assert decoded == result


def test_unusual_encodings_are_left_to_betterproto() -> None:
    # Fields out of order and repeated (protobuf: the last one wins) parse as betterproto
    # parses them; so does an unknown field (number 9), which betterproto keeps aside.
    out_of_order = b"\x1a\x0a" + b"\x12\x02k1" + b"\x0a\x01a" + b"\x0a\x01b"
    assert decode_server_message(out_of_order).operation == m.Operation(id="b", account="k1")
    unknown = b"\x1a\x05" + b"\x0a\x01a" + b"\x48\x01"
    assert decode_agent_message(unknown).operation_result.id == "a"


@pytest.mark.parametrize(
    "data",
    [
        b"\x1a\x02\x28\x80",  # Operation{deadline_ms: a truncated varint}
        b"\x1a\x03\x0a\x01\xff",  # Operation{id: invalid UTF-8}
    ],
)
def test_malformed_operations_are_refused(data: bytes) -> None:
    with pytest.raises(Exception):  # noqa: B017 - betterproto raises assorted errors
        decode_server_message(data)


@given(operations, results)
def test_decoded_messages_are_the_constructors_objects(
    operation: m.Operation, result: m.OperationResult
) -> None:
    # The decoders build these objects without betterproto's constructor (construct()):
    # attribute for attribute, they must be what the constructor makes.
    down = decode_server_message(bytes(m.ServerMessage(operation=operation)))
    assert down.__dict__ == m.ServerMessage(operation=m.Operation(**_fields(operation))).__dict__
    assert down.operation.__dict__ == m.Operation(**_fields(operation)).__dict__
    up = decode_agent_message(bytes(m.AgentMessage(operation_result=result)))
    assert (
        up.__dict__
        == m.AgentMessage(operation_result=m.OperationResult(**_fields(result))).__dict__
    )
    assert up.operation_result.__dict__ == m.OperationResult(**_fields(result)).__dict__
    assert encode_operation_result(result) == bytes(m.AgentMessage(operation_result=result))


def test_fields_left_unset_encode_as_betterproto_does() -> None:
    for result in (m.OperationResult(), m.OperationResult(id="a"), m.OperationResult(ok=True)):
        assert encode_operation_result(result) == bytes(m.AgentMessage(operation_result=result))
    operation = m.ServerMessage(operation=m.Operation(type="t", deadline_ms=-1))
    assert encode_server_message(operation) == bytes(operation)


def test_construct_is_the_constructor() -> None:
    assert construct(m.Operation, {}).__dict__ == m.Operation().__dict__
    values = {"id": "a", "ok": True}
    assert construct(m.OperationResult, values).__dict__ == m.OperationResult(**values).__dict__
    heartbeat = m.Heartbeat(sent_at_ms=5)
    assert (
        construct(m.AgentMessage, {"heartbeat": heartbeat}).__dict__
        == m.AgentMessage(heartbeat=heartbeat).__dict__
    )


def _fields(message: m.Operation | m.OperationResult) -> dict[str, object]:
    return {field.name: getattr(message, field.name) for field in dataclasses.fields(message)}
