"""Event records: round trips, caps and malformed input (sans-I/O, no event loop)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import wire
from wire import EventRecord, EventType, RecordError, RecordLimits, decode_events, encode_events


def pod(i: int, body: bytes = b'{"kind":"Pod"}') -> EventRecord:
    return EventRecord(
        type=EventType.MODIFIED,
        account="prod",
        api_version="v1",
        kind="Pod",
        namespace="default",
        name=f"pod-{i}",
        uid=f"uid-{i}",
        resource_version=str(1000 + i),
        object=body,
    )


texts = st.text(max_size=20)
records = st.builds(
    EventRecord,
    type=st.sampled_from(list(EventType)).map(int),
    account=texts,
    api_version=texts,
    kind=texts,
    namespace=texts,
    name=texts,
    uid=texts,
    resource_version=texts,
    object=st.binary(max_size=200),
    scope=texts,
)


@given(st.lists(records, max_size=50))
def test_round_trip(batch: list[EventRecord]) -> None:
    assert decode_events(encode_events(batch)) == batch


def test_round_trip_keeps_raw_object_bytes_and_scope() -> None:
    marker = EventRecord(
        EventType.SYNC_BEGIN, "prod", "apps/v1", "Deployment", "", "", "", "", b"", scope="team-a"
    )
    batch = [pod(1, b'{"a": "\xc3\xa9"}'), marker]
    decoded = decode_events(encode_events(batch))
    assert decoded == batch
    assert decoded[0].object == b'{"a": "\xc3\xa9"}'
    assert decoded[1].scope == "team-a"


def test_empty_batch() -> None:
    assert decode_events(encode_events([])) == []


def test_object_travels_as_msgpack_bin() -> None:
    data = encode_events([pod(0, b"x" * 300)])
    # bin 16 header (0xc5) followed by the 2-byte length: no base64, no str
    assert b"\xc5\x01\x2c" + b"x" * 300 in data


def test_encode_refuses_too_many_events() -> None:
    with pytest.raises(RecordError, match="3 event records: more than max_events=2"):
        encode_events([pod(i) for i in range(3)], RecordLimits(max_events=2))


def test_encode_names_the_oversize_object() -> None:
    batch = [pod(0), pod(1, b"x" * 101)]
    with pytest.raises(
        RecordError, match=r"event record 1 \(Pod default/pod-1\).*101 bytes"
    ) as info:
        encode_events(batch, RecordLimits(max_object_bytes=100))
    assert info.value.index == 1


def test_encode_refuses_oversize_batch() -> None:
    with pytest.raises(RecordError, match="max_bytes=1000"):
        encode_events([pod(i, b"x" * 100) for i in range(20)], RecordLimits(max_bytes=1000))


def test_decode_refuses_oversize_input_before_decoding() -> None:
    data = encode_events([pod(i, b"x" * 100) for i in range(20)])
    with pytest.raises(RecordError, match=f"{len(data)} bytes exceeds max_bytes=1000"):
        decode_events(data, RecordLimits(max_bytes=1000))


def test_decode_refuses_too_many_events_from_the_header() -> None:
    # An array header claiming 70,000 records, with nothing behind it: refused on the count.
    data = b"\xdd" + (70_000).to_bytes(4, "big")
    with pytest.raises(RecordError, match="70000 records exceeds max_events=10000"):
        decode_events(data)


def test_decode_names_the_oversize_object() -> None:
    data = encode_events([pod(0, b"{}"), pod(1, b"{}"), pod(2, b"y" * 50)])
    with pytest.raises(RecordError, match=r"event record 2 .*50 bytes exceeds max_object_bytes=10"):
        decode_events(data, RecordLimits(max_object_bytes=10))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "empty input"),
        (b"\x81\xa1a\x01", "does not start with a msgpack array"),
        (b"\x91\x99\x01", "not valid msgpack"),
        (msgspec.msgpack.encode([[1, "a"]]), r"malformed record: .*\$\[0\]"),
        (
            msgspec.msgpack.encode([[1, "a", "v1", "Pod", "", "n", "u", "1", "not-bin"]]),
            r"malformed record: Expected `bytes`, got `str` - at `\$\[0\]\[8\]`",
        ),
        (msgspec.msgpack.encode([[]]), r"malformed record: .*\$\[0\]"),
    ],
)
def test_decode_malformed_input_says_what_and_where(data: bytes, expected: str) -> None:
    with pytest.raises(RecordError, match=expected):
        decode_events(data)


def test_decode_refuses_unknown_event_type_naming_the_record() -> None:
    good = msgspec.msgpack.encode(pod(0))
    bad = msgspec.msgpack.encode(EventRecord(9, "a", "v1", "Pod", "", "n", "u", "1", b""))
    data = b"\x92" + good + bad
    with pytest.raises(RecordError, match=r"Expected `int` <= 6 - at `\$\[1\]\[0\]`"):
        decode_events(data)


@given(st.binary(max_size=300))
def test_decode_of_arbitrary_bytes_raises_only_record_error(data: bytes) -> None:
    try:
        decode_events(data)
    except RecordError:
        pass


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_events must be positive"):
        RecordLimits(max_events=0)


def test_contract_defaults() -> None:
    assert RecordLimits(10_000, 8 * 2**20, 4 * 2**20) == wire.DEFAULT_LIMITS
