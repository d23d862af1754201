"""kubesim's sans-I/O HTTP/2 server core (kubesim/_h2_core.py), driven back to back by the h2
library's client connection: an independent implementation on the other end, no network."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from kubesim._h2_core import (
    FLOW_CONTROL_ERROR,
    MAX_STREAMS,
    NO_ERROR,
    STREAM_WINDOW,
    H2Error,
    H2ServerCore,
    Stream,
    encode_headers,
)

REQUEST = [(":method", "GET"), (":scheme", "https"), (":authority", "k"), (":path", "/api")]


def _client(initial_window: int | None = None) -> h2.connection.H2Connection:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    if initial_window is not None:
        code = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
        client.local_settings = h2.settings.Settings(
            client=True, initial_values={code: initial_window}
        )
    client.initiate_connection()
    return client


def _exchange(core: H2ServerCore, client: h2.connection.H2Connection) -> tuple[list[Stream], bool]:
    """Client -> core, then core -> client; returns what the core reported."""
    opened, woke = core.receive_data(client.data_to_send())
    _events(client, core)
    return opened, woke


def _events(client: h2.connection.H2Connection, core: H2ServerCore) -> list[Any]:
    return list(client.receive_data(core.data_to_send()))


def _open(core: H2ServerCore, client: h2.connection.H2Connection, **kw: Any) -> Stream:
    stream_id = client.get_next_available_stream_id()
    client.send_headers(stream_id, REQUEST, **kw)
    opened, _ = _exchange(core, client)
    assert [s.id for s in opened] == [stream_id]
    return opened[0]


def test_a_request_head_opens_a_stream_and_the_answer_reaches_the_client() -> None:
    core, client = H2ServerCore(), _client()
    stream = _open(core, client, end_stream=True)
    assert (b":path", b"/api") in stream.headers
    assert stream.ended
    core.send_headers(stream, 200, [(b"content-type", b"application/json")], end=False)
    assert core.send_data(stream, memoryview(b'{"a":1}'), True) == 7
    events = _events(client, core)
    response = next(e for e in events if isinstance(e, h2.events.ResponseReceived))
    assert dict(response.headers)[b":status"] == b"200"
    assert dict(response.headers)[b"content-type"] == b"application/json"
    assert b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived)) == b'{"a":1}'
    assert any(isinstance(e, h2.events.StreamEnded) for e in events)
    assert stream.id not in core.streams  # both sides done: forgotten


def test_a_body_is_held_until_taken_and_credit_goes_back_only_then() -> None:
    core, client = H2ServerCore(), _client()
    stream = _open(core, client)
    chunk = b"x" * 60_000
    for _ in range(10):  # 600,000 bytes: more than half a stream window
        client.send_data(stream.id, chunk)
    client.end_stream(stream.id)
    core.receive_data(client.data_to_send())
    assert len(stream.body) == 600_000
    assert stream.ended
    assert not core.has_output  # no credit before the handler takes the bytes
    assert core.take_body(stream) == chunk * 10
    # The stream ended, so only the connection's credit is owed (a quarter window: not yet).
    assert stream.body == bytearray()


def test_a_stream_still_sending_gets_credit_once_half_its_window_is_taken() -> None:
    core, client = H2ServerCore(), _client()
    stream = _open(core, client)
    before = client.local_flow_control_window(stream.id)
    client.send_data(stream.id, b"y" * (STREAM_WINDOW // 2))
    core.receive_data(client.data_to_send())
    assert client.local_flow_control_window(stream.id) == before - STREAM_WINDOW // 2
    core.take_body(stream)
    events = _events(client, core)
    assert any(isinstance(e, h2.events.WindowUpdated) and e.stream_id == stream.id for e in events)
    assert client.local_flow_control_window(stream.id) == before


def test_a_client_that_overruns_a_stream_window_is_a_connection_error() -> None:
    core, client = H2ServerCore(), _client()
    stream = _open(core, client)
    # h2 refuses to overrun a window, so the frames are written by hand.
    frame = (1024).to_bytes(3, "big") + b"\x00\x00" + stream.id.to_bytes(4, "big") + b"z" * 1024
    with pytest.raises(H2Error) as caught:
        core.receive_data(frame * (STREAM_WINDOW // 1024 + 1))
    assert caught.value.code == FLOW_CONTROL_ERROR
    events = _events(client, core)
    assert any(isinstance(e, h2.events.ConnectionTerminated) for e in events)


def test_an_answer_waits_for_the_clients_window_and_goes_on_when_it_opens() -> None:
    core, client = H2ServerCore(), _client(initial_window=10)
    _exchange(core, client)
    stream = _open(core, client, end_stream=True)
    core.send_headers(stream, 200, [], end=False)
    body = memoryview(b"0123456789abcdefghij")
    assert core.send_data(stream, body, True) == 10
    events = _events(client, core)
    received = [e for e in events if isinstance(e, h2.events.DataReceived)]
    assert b"".join(e.data for e in received) == b"0123456789"
    client.acknowledge_received_data(10, stream.id)
    client.increment_flow_control_window(100, stream.id)
    opened, woke = core.receive_data(client.data_to_send())
    assert woke
    assert not opened
    assert core.send_data(stream, body[10:], True) == 10
    events = _events(client, core)
    assert b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived)) == (
        b"abcdefghij"
    )
    assert any(isinstance(e, h2.events.StreamEnded) for e in events)


def test_a_reset_stream_is_reported_and_takes_what_is_sent_without_sending_it() -> None:
    core, client = H2ServerCore(), _client()
    stream = _open(core, client, end_stream=True)
    client.reset_stream(stream.id)
    _opened, woke = core.receive_data(client.data_to_send())
    assert woke
    assert stream.reset
    assert stream.id not in core.streams
    assert core.send_data(stream, memoryview(b"late"), False) == 4
    assert not core.has_output


def test_a_header_block_in_continuation_frames_is_put_together() -> None:
    core, client = H2ServerCore(), _client()
    _exchange(core, client)
    client.max_outbound_frame_size = 16_384
    big = [*REQUEST, ("x-big", "v" * 40_000)]  # more than one frame: HEADERS + CONTINUATION
    client.send_headers(1, big, end_stream=True)
    opened, _ = core.receive_data(client.data_to_send())
    assert dict(opened[0].headers)[b"x-big"] == b"v" * 40_000


def test_pings_are_answered_and_settings_acknowledged() -> None:
    core, client = H2ServerCore(), _client()
    _exchange(core, client)
    client.ping(b"12345678")
    client.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: 32_768})
    events = list(client.receive_data(core.data_to_send()))  # (the handshake's SETTINGS first)
    core.receive_data(client.data_to_send())
    events = _events(client, core)
    assert any(
        isinstance(e, h2.events.PingAckReceived) and e.ping_data == b"12345678" for e in events
    )
    assert any(isinstance(e, h2.events.SettingsAcknowledged) for e in events)


def test_streams_past_the_limit_are_refused() -> None:
    core, client = H2ServerCore(), _client()
    _exchange(core, client)
    code = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS  # let h2 send one stream too many
    client.remote_settings = h2.settings.Settings(client=False, initial_values={code: 2000})
    for _ in range(MAX_STREAMS + 1):
        client.send_headers(client.get_next_available_stream_id(), REQUEST)
    opened, _ = core.receive_data(client.data_to_send())
    assert len(opened) == MAX_STREAMS
    events = _events(client, core)
    refused = [e for e in events if isinstance(e, h2.events.StreamReset)]
    assert [e.stream_id for e in refused] == [2 * MAX_STREAMS + 1]
    assert refused[0].error_code == h2.errors.ErrorCodes.REFUSED_STREAM


def test_a_connection_that_does_not_start_with_the_preface_is_refused() -> None:
    core = H2ServerCore()
    with pytest.raises(H2Error, match="preface"):
        core.receive_data(b"GET / HTTP/1.1\r\n\r\n")


def test_answer_heads_decode_as_sent() -> None:
    decoder = h2.connection.H2Connection().decoder
    for status in (200, 201, 404, 409, 500, 503):
        headers = [(b"content-type", b"application/json"), (b"x-odd", b"a" * 300)]
        block = encode_headers(status, headers)
        assert decoder.decode(block, raw=True) == [(b":status", str(status).encode()), *headers]


def test_frames_in_flight_for_a_stream_we_reset_are_ignored() -> None:
    core, client = H2ServerCore(), _client()
    stream = _open(core, client)
    watch = _open(core, client, end_stream=True)
    core.reset_stream(stream, NO_ERROR)  # answered early: the client may still be sending
    client.send_data(stream.id, b"rest of the body")
    client.send_headers(stream.id, [("x-trailer", "t")], end_stream=True)  # trailers
    opened, _ = core.receive_data(client.data_to_send())
    assert not opened
    assert watch.id in core.streams  # the connection and its other streams go on


def test_padding_is_credited_to_its_stream_too() -> None:
    core, client = H2ServerCore(), _client()
    stream = _open(core, client)
    sent = 0
    while sent < 4 * STREAM_WINDOW:  # far more than a window, in padded frames
        client.send_data(stream.id, b"p" * 1000, pad_length=255)
        core.receive_data(client.data_to_send())
        core.take_body(stream)
        _events(client, core)
        sent += 1000
    assert client.local_flow_control_window(stream.id) > STREAM_WINDOW // 2
