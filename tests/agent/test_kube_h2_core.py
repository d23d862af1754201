"""The sans-I/O HTTP/2 client core (agent.kube._h2_core) back to back with the h2 library's
server side, no network: requests and answers, request bodies that wait for flow-control
window, credit returned as the consumer reads, GOAWAY (streams it covers go on, the others
are unprocessed), REFUSED_STREAM, header blocks in CONTINUATIONs, padding, and the peer's
protocol errors."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import pytest

from agent.kube._h2_core import H2Core, H2ProtocolError, Stream


class Server:
    """The h2 library as the server, fed the core's bytes and feeding it back."""

    def __init__(self) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.conn = h2.connection.H2Connection(config)
        self.conn.initiate_connection()
        self.events: list[h2.events.Event] = []
        self.bodies: dict[int, bytes] = {}

    def hear(self, core: H2Core) -> None:
        for event in self.conn.receive_data(core.data_to_send()):
            self.events.append(event)
            if isinstance(event, h2.events.DataReceived) and event.stream_id:
                self.bodies[event.stream_id] = self.bodies.get(event.stream_id, b"") + (
                    event.data or b""
                )
                self.conn.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id
                )

    def tell(self, core: H2Core) -> list[Stream]:
        return core.receive_data(self.conn.data_to_send())

    def requests(self) -> list[h2.events.RequestReceived]:
        return [e for e in self.events if isinstance(e, h2.events.RequestReceived)]


def _pair() -> tuple[H2Core, Server]:
    core = H2Core("api.example:6443", stream_window=65536, connection_window=1 << 20)
    core.initiate()
    server = Server()
    server.hear(core)
    server.tell(core)
    server.hear(core)  # our SETTINGS ack
    assert core.settings_received
    return core, server


def _answer(server: Server, stream_id: int, body: bytes, **headers: str) -> None:
    fields = [(b":status", b"200")] + [(k.encode(), v.encode()) for k, v in headers.items()]
    server.conn.send_headers(stream_id, fields)
    server.conn.send_data(stream_id, body, end_stream=True)


def test_a_request_and_its_answer() -> None:
    core, server = _pair()
    stream = core.start_request(
        "GET", "/api?x=1", [("authorization", "Bearer t"), ("accept", "application/json")], None
    )
    server.hear(core)
    (request,) = server.requests()
    assert dict(request.headers or []) == {
        b":method": b"GET",
        b":scheme": b"https",
        b":authority": b"api.example:6443",
        b":path": b"/api?x=1",
        b"authorization": b"Bearer t",
        b"accept": b"application/json",
    }
    _answer(server, stream.stream_id, b'{"ok": 1}', **{"content-length": "9", "x-a": "1"})
    assert stream in server.tell(core)
    assert stream.status_code == 200
    assert stream.headers == {"content-length": "9", "x-a": "1"}
    assert list(stream.chunks) == [b'{"ok": 1}']
    assert stream.ended
    assert stream.error is None


def test_a_body_larger_than_the_windows_waits_for_window_updates() -> None:
    core, server = _pair()
    body = bytes(range(256)) * 1000  # 256 KB against the default 64 KiB windows
    stream = core.start_request("POST", "/big", [], body)
    server.hear(core)
    assert len(server.bodies[stream.stream_id]) == 65535  # what the windows allowed
    for _ in range(10):
        server.tell(core)  # the server's WINDOW_UPDATEs release the rest, a window at a time
        server.hear(core)
    assert server.bodies[stream.stream_id] == body
    assert any(isinstance(e, h2.events.StreamEnded) for e in server.events)


def test_credit_comes_back_only_as_the_consumer_reads() -> None:
    core, server = _pair()
    stream = core.start_request("GET", "/watch", [], None)
    server.hear(core)
    server.conn.send_headers(stream.stream_id, [(b":status", b"200")])
    server.conn.send_data(stream.stream_id, b"x" * 60000)
    server.tell(core)
    assert server.conn.local_flow_control_window(stream.stream_id) == 65535 - 60000 + 1
    server.hear(core)  # nothing read: no WINDOW_UPDATE
    assert server.conn.local_flow_control_window(stream.stream_id) < 5600
    core.consumed(stream, stream.buffered)
    stream.chunks.clear()
    server.hear(core)
    assert server.conn.local_flow_control_window(stream.stream_id) > 60000


def test_goaway_leaves_the_streams_it_covers_running_and_marks_the_rest_unprocessed() -> None:
    core, server = _pair()
    first = core.start_request("GET", "/watch", [], None)
    second = core.start_request("POST", "/later", [], b"{}")
    server.hear(core)
    server.conn.send_headers(first.stream_id, [(b":status", b"200")])
    server.conn.close_connection(last_stream_id=first.stream_id)  # GOAWAY, NO_ERROR
    touched = server.tell(core)
    assert second in touched
    assert second.unprocessed
    assert second.error is not None
    assert first.error is None
    assert not core.can_open()
    # The rest of the answer it promised still comes, and ends cleanly (h2 would have raised
    # ProtocolError here: DATA after GOAWAY).
    frame = b"\x00\x00\x05\x00\x01" + first.stream_id.to_bytes(4, "big") + b"hello"
    assert first in core.receive_data(frame)
    assert first.ended
    assert list(first.chunks) == [b"hello"]


def test_refused_stream_is_unprocessed_and_other_resets_are_not() -> None:
    core, server = _pair()
    refused = core.start_request("POST", "/a", [], b"{}")
    reset = core.start_request("POST", "/b", [], b"{}")
    server.hear(core)
    server.conn.reset_stream(refused.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
    server.conn.reset_stream(reset.stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
    server.tell(core)
    assert refused.unprocessed
    assert "REFUSED_STREAM" in (refused.error or "")
    assert not reset.unprocessed
    assert "INTERNAL_ERROR" in (reset.error or "")


def test_a_header_block_in_continuations_and_padded_data() -> None:
    core, server = _pair()
    stream = core.start_request("GET", "/", [], None)
    server.hear(core)
    big = "v" * 40000  # more than a 16 KiB frame: HEADERS + CONTINUATIONs
    server.conn.send_headers(stream.stream_id, [(b":status", b"200"), (b"x-big", big.encode())])
    server.conn.send_data(stream.stream_id, b"abc", pad_length=10, end_stream=True)
    server.tell(core)
    assert stream.headers == {"x-big": big}
    assert list(stream.chunks) == [b"abc"]
    assert stream.ended


def test_a_body_shorter_than_its_content_length_fails_the_stream_only() -> None:
    core, server = _pair()
    short = core.start_request("GET", "/short", [], None)
    other = core.start_request("GET", "/other", [], None)
    server.hear(core)
    server.conn.send_headers(short.stream_id, [(b":status", b"200"), (b"content-length", b"10")])
    server.conn.send_data(short.stream_id, b"12345", end_stream=True)
    _answer(server, other.stream_id, b"fine")
    server.tell(core)
    assert short.error is not None
    assert "Content-Length" in short.error
    assert other.ended
    assert other.error is None


def test_interim_answers_are_skipped() -> None:
    core, server = _pair()
    stream = core.start_request("POST", "/", [("expect", "100-continue")], b"{}")
    server.hear(core)
    server.conn.send_headers(stream.stream_id, [(b":status", b"100")])
    _answer(server, stream.stream_id, b"ok")
    server.tell(core)
    assert stream.status_code == 200
    assert stream.ended


def test_a_ping_is_answered_and_our_own_counted() -> None:
    core, server = _pair()
    server.conn.ping(b"12345678")
    server.tell(core)
    server.hear(core)
    assert any(isinstance(e, h2.events.PingAckReceived) for e in server.events)
    core.ping(b"kubesvc!")
    server.hear(core)
    server.tell(core)
    assert core.pings_answered == 1


def test_closing_an_unfinished_stream_resets_it_and_returns_its_credit() -> None:
    core, server = _pair()
    stream = core.start_request("GET", "/watch", [], None)
    server.hear(core)
    server.conn.send_headers(stream.stream_id, [(b":status", b"200")])
    server.conn.send_data(stream.stream_id, b"y" * 30000)
    server.tell(core)
    core.close_stream(stream)
    server.hear(core)
    assert any(
        isinstance(e, h2.events.StreamReset) and e.stream_id == stream.stream_id
        for e in server.events
    )
    assert stream.stream_id not in core.streams


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"\x00\x00\x01\x00\x00\x00\x00\x00\x63x", "never opened"),  # DATA on stream 99
        (b"\x00\x00\x00\x05\x04\x00\x00\x00\x01", "PUSH_PROMISE"),
        (b"\x00\x00\x03\x04\x00\x00\x00\x00\x00abc", "bad length"),  # SETTINGS of 3 bytes
        (b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00", "WINDOW_UPDATE of 0"),
        (b"\x10\x00\x00\x00\x00\x00\x00\x00\x01", "over the"),  # a 1 MiB frame
    ],
)
def test_protocol_errors_fail_the_connection_with_a_goaway(frame: bytes, message: str) -> None:
    core, _ = _pair()
    core.start_request("GET", "/", [], None)
    core.data_to_send()
    with pytest.raises(H2ProtocolError, match=message):
        core.receive_data(frame)
    assert core.error is not None
    assert not core.can_open()
    assert core.data_to_send()[3] == 0x7  # a GOAWAY frame went out
    with pytest.raises(H2ProtocolError):
        core.process()


def test_an_answer_before_the_whole_body_was_sent_resets_the_stream_on_close() -> None:
    """A server may answer (413, 400) before the request body is complete: the rest of the
    body is dropped, and closing the stream tells the server no more comes."""
    core, server = _pair()
    stream = core.start_request("POST", "/big", [], b"z" * 200_000)
    server.hear(core)
    _answer(server, stream.stream_id, b"too big")
    server.tell(core)
    assert stream.ended
    assert stream.pending is None
    core.close_stream(stream)
    server.hear(core)
    assert any(
        isinstance(e, h2.events.StreamReset) and e.stream_id == stream.stream_id
        for e in server.events
    )
