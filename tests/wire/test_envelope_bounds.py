"""The decoders refuse, before betterproto parses it, a message whose shape would freeze the
event loop: betterproto builds an object per nested message (~60 us each here) and appends
unknown fields with ``+=`` (quadratic). A 200 KB Hello of 100k empty AccountInfo entries took
6.1 s and 29 MB to parse, 200k unknown fields in 600 KB 8.6 s (found in review)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from wire import ProtocolViolation
from wire import messages as m
from wire._envelope import decode_agent_message, decode_server_message
from wire._unknown import MAX_MESSAGES, MAX_OCCURRENCES, MAX_UNKNOWN_FIELDS

from .protobuf_bytes import bytes_field, varint_field


def hello(body: bytes) -> bytes:
    return bytes_field(1, body)


def refused_quickly(decode: Callable[[bytes], object], data: bytes, match: str) -> None:
    started = time.process_time()
    with pytest.raises(ProtocolViolation, match=match):
        decode(data)
    assert time.process_time() - started < 0.5


def test_a_hello_with_100k_accounts_is_refused_before_it_is_parsed() -> None:
    data = hello(bytes_field(5, b"") * 100_000)  # 200 KB
    refused_quickly(decode_agent_message, data, r"Hello\.accounts \(field 5\) 10001 times")


def test_200k_unknown_fields_are_refused_before_they_are_parsed() -> None:
    data = hello(varint_field(99, 1) * 200_000)  # 600 KB
    refused_quickly(decode_agent_message, data, r"more than 1000 unknown fields")
    refused_quickly(decode_server_message, varint_field(99, 1) * 200_000, "unknown fields")


def test_many_small_accounts_each_under_the_bound_are_refused_in_total() -> None:
    kinds = bytes_field(6, b"") * 1_000
    data = hello(bytes_field(5, kinds) * 200)  # 200 accounts of 1,000 kinds each
    refused_quickly(decode_agent_message, data, r"more than 100000 nested messages")


def test_messages_at_the_bounds_are_read() -> None:
    assert MAX_UNKNOWN_FIELDS == 1_000
    assert MAX_OCCURRENCES == 10_000
    assert MAX_MESSAGES == 100_000
    account = bytes_field(1, b"prod") + bytes_field(6, bytes_field(2, b"Pod")) * 3
    message = decode_agent_message(hello(bytes_field(5, account) * 1_000 + varint_field(99, 1)))
    assert len(message.hello.accounts) == 1_000
    assert len(message.hello.accounts[0].kinds) == 3
    assert decode_server_message(varint_field(99, 1) * 1_000 + bytes_field(2, b"")).ack == m.Ack()
