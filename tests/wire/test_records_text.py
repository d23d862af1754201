"""Record text fields that are not UTF-8 (found by tests/test_fuzz_inputs.py): a RecordError
naming the record, not the UnicodeDecodeError msgspec lets through."""

from __future__ import annotations

import pytest

from wire import EventRecord, RecordError, decode_events, encode_events


def test_a_text_field_that_is_not_utf8_is_a_record_error_naming_the_record() -> None:
    records = [
        EventRecord(1, "prod", "v1", "Pod", "ns", "web-1", "uid-1", "42", b"{}"),
        EventRecord(1, "prod", "v1", "Pod", "ns", "web-2", "uid-2", "43", b"{}"),
    ]
    data = encode_events(records)
    broken = data.replace(b"web-2", b"web\xff2")
    with pytest.raises(RecordError, match=r"^event record 1: a text field is not valid UTF-8") as e:
        decode_events(broken)
    assert e.value.index == 1
    # The object is bytes (msgpack bin): any bytes there are the API server's business.
    assert decode_events(data.replace(b"{}", b"\xff\xfe"))[0].object == b"\xff\xfe"
