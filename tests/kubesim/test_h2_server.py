"""kubesim's HTTP/2 connections (kubesim/_h2_server.py): the trio loop and its ASGI side, over an
in-memory stream with the h2 library as the client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import trio
import trio.testing

from kubesim._h2_core import MAX_STREAMS
from kubesim._h2_server import serve_h2

PEER = ("127.0.0.1", 50000)
LOCAL = ("127.0.0.1", 6443)


def _request(method: str = "GET", path: str = "/") -> list[tuple[str, str]]:
    return [(":method", method), (":scheme", "https"), (":authority", "k"), (":path", path)]


class _Client:
    """An h2 client connection on one end of an in-memory stream."""

    def __init__(self, stream: trio.abc.Stream, initial_window: int | None) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        if initial_window is not None:
            code = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
            self.h2.local_settings = h2.settings.Settings(
                client=True, initial_values={code: initial_window}
            )
        self.h2.initiate_connection()
        self.events: list[Any] = []

    async def flush(self) -> None:
        pending = self.h2.data_to_send()
        if pending:
            await self.stream.send_all(pending)

    async def read_until(self, done: Any) -> list[Any]:
        """Read and collect events until ``done(events)`` holds."""
        while not done(self.events):
            data = await self.stream.receive_some(65536)
            assert data, "the server closed the connection"
            self.events.extend(self.h2.receive_data(data))
            await self.flush()  # (acknowledgements, window updates)
        return self.events

    def body(self, stream_id: int) -> bytes:
        return b"".join(
            e.data
            for e in self.events
            if isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id
        )

    def ended(self, stream_id: int) -> bool:
        return any(
            isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset))
            and e.stream_id == stream_id
            for e in self.events
        )


@asynccontextmanager
async def _serving(app: Any, initial_window: int | None = None) -> AsyncIterator[_Client]:
    client_end, server_end = trio.testing.memory_stream_pair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_h2, server_end, app, PEER, LOCAL)
            client = _Client(client_end, initial_window)
            await client.flush()
            yield client
            nursery.cancel_scope.cancel()


async def _answer(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def test_the_app_sees_an_asgi_scope_and_body_and_its_answer_arrives() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)
        message = await receive()
        await _answer(send, 201, b"got " + message["body"])

    async with _serving(app) as client:
        client.h2.send_headers(1, [*_request("POST", "/api/v1/x%20y?watch=1"), ("a", "b")])
        client.h2.send_data(1, b"hello", end_stream=True)
        await client.flush()
        events = await client.read_until(lambda _: client.ended(1))
    head = next(e for e in events if isinstance(e, h2.events.ResponseReceived))
    assert dict(head.headers)[b":status"] == b"201"
    assert client.body(1) == b"got hello"
    assert seen["method"] == "POST"
    assert seen["path"] == "/api/v1/x y"
    assert seen["query_string"] == b"watch=1"
    assert seen["http_version"] == "2"
    assert seen["headers"][0] == (b"host", b"k")
    assert (b"a", b"b") in seen["headers"]
    assert seen["client"] == PEER
    assert seen["server"] == LOCAL


async def test_a_head_request_gets_the_head_only() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await _answer(send, 200, b"a body")

    async with _serving(app) as client:
        client.h2.send_headers(1, _request("HEAD"), end_stream=True)
        await client.flush()
        events = await client.read_until(lambda _: client.ended(1))
    head = next(e for e in events if isinstance(e, h2.events.ResponseReceived))
    assert dict(head.headers)[b"content-length"] == b"6"
    assert client.body(1) == b""


async def test_a_failing_handler_answers_500_or_resets_a_begun_answer() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/late":
            await send({"type": "http.response.start", "status": 200, "headers": []})
        raise ValueError("a kubesim bug")

    async with _serving(app) as client:
        client.h2.send_headers(1, _request(path="/early"), end_stream=True)
        client.h2.send_headers(3, _request(path="/late"), end_stream=True)
        await client.flush()
        events = await client.read_until(lambda _: client.ended(1) and client.ended(3))
    heads = {
        e.stream_id: dict(e.headers) for e in events if isinstance(e, h2.events.ResponseReceived)
    }
    assert heads[1][b":status"] == b"500"
    reset = next(e for e in events if isinstance(e, h2.events.StreamReset))
    assert reset.stream_id == 3
    assert reset.error_code == h2.errors.ErrorCodes.INTERNAL_ERROR


async def test_an_answer_larger_than_the_window_waits_for_the_client() -> None:
    sent = trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await _answer(send, 200, b"w" * 5000)
        sent.set()

    async with _serving(app, initial_window=1000) as client:
        client.h2.send_headers(1, _request(), end_stream=True)
        await client.flush()
        await client.read_until(lambda _: len(client.body(1)) == 1000)
        await trio.testing.wait_all_tasks_blocked()
        assert not sent.is_set()  # the handler's send waits for window
        client.h2.increment_flow_control_window(10_000, 1)
        await client.flush()
        await client.read_until(lambda _: client.ended(1))
        await sent.wait()
    assert client.body(1) == b"w" * 5000


async def test_a_reset_stream_is_a_disconnect_for_its_handler() -> None:
    gone = trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        assert (await receive())["type"] == "http.request"
        assert (await receive())["type"] == "http.disconnect"  # (a watch's wait)
        await send({"type": "http.response.body", "body": b"dropped", "more_body": True})
        gone.set()

    async with _serving(app) as client:
        client.h2.send_headers(1, _request(), end_stream=True)
        await client.flush()
        await client.read_until(lambda _: client.body(1) == b"first")
        client.h2.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
        await client.flush()
        await gone.wait()


async def test_the_handlers_of_a_closed_connection_are_cancelled() -> None:
    cancelled = trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    client_end, server_end = trio.testing.memory_stream_pair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_h2, server_end, app, PEER, LOCAL)
            client = _Client(client_end, None)
            client.h2.send_headers(1, _request(), end_stream=True)
            await client.flush()
            await trio.testing.wait_all_tasks_blocked()
            await client_end.aclose()
            await cancelled.wait()  # and serve_h2 returns, so the nursery ends


async def test_a_write_cut_short_by_cancellation_resets_the_stream() -> None:
    # A watch's timeoutSeconds cancels its write while the client's window holds part of an
    # event: a clean end after half an event would read as a whole, shorter answer.
    timeout = trio.CancelScope()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        with timeout:
            await send({"type": "http.response.body", "body": b"e" * 3000, "more_body": True})
        with trio.CancelScope(shield=True):
            await send({"type": "http.response.body", "body": b""})

    async with _serving(app, initial_window=1000) as client:
        client.h2.send_headers(1, _request(), end_stream=True)
        await client.flush()
        await client.read_until(lambda _: len(client.body(1)) == 1000)  # the window's worth
        timeout.cancel()
        events = await client.read_until(lambda _: client.ended(1))
    assert any(isinstance(e, h2.events.StreamReset) for e in events)
    assert not any(isinstance(e, h2.events.StreamEnded) for e in events)


async def test_receive_after_a_finished_answer_is_a_disconnect() -> None:
    said: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await _answer(send, 200, b"done")
        said.append((await receive())["type"])

    async with _serving(app) as client:
        client.h2.send_headers(1, _request(), end_stream=True)
        await client.flush()
        await client.read_until(lambda _: client.ended(1))
        await trio.testing.wait_all_tasks_blocked()
    assert said == ["http.disconnect"]


async def test_streams_reset_at_once_still_count_against_the_limit() -> None:
    started = 0
    release = trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal started
        started += 1
        await release.wait()  # (running on after its stream was reset)

    async with _serving(app) as client:
        for _ in range(MAX_STREAMS + 5):
            stream_id = client.h2.get_next_available_stream_id()
            client.h2.send_headers(stream_id, _request(), end_stream=True)
            client.h2.reset_stream(stream_id)
        await client.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert started == MAX_STREAMS
        release.set()


async def test_a_client_that_writes_before_it_reads_is_not_deadlocked_by_a_long_answer() -> None:
    # No socket buffering (lockstep): while a long answer waits for the client to read, the
    # client writes an upload first. Reading must go on, or all three wait on each other.
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/big":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(8):
                await send({"type": "http.response.body", "body": b"x" * 2**19, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await _answer(send, 200, str(size).encode())

    client_end, server_end = trio.testing.lockstep_stream_pair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_h2, server_end, app, PEER, LOCAL)
            client = _Client(client_end, 16 * 2**20)  # windows that never hold the answer
            client.h2.increment_flow_control_window(2**30)
            await client.flush()
            await client.read_until(
                lambda events: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events)
            )
            client.h2.send_headers(1, _request(path="/big"), end_stream=True)
            await client.flush()
            await trio.testing.wait_all_tasks_blocked()  # the answer is queued, unread
            client.h2.send_headers(3, _request("POST", "/upload"))
            client.h2.send_data(3, b"y" * 16384 * 40, end_stream=True)
            await client.flush()  # (this write hung when reading waited for the writer)

            await client.read_until(lambda _: client.ended(1) and client.ended(3))
            nursery.cancel_scope.cancel()
    assert client.body(3) == str(16384 * 40).encode()
    assert len(client.body(1)) == 8 * 2**19


async def test_a_stream_the_server_resets_wakes_its_handler() -> None:
    said: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        said.append((await receive())["type"])  # a watch waiting for its client to go

    async with _serving(app) as client:
        client.h2.send_headers(1, _request(), end_stream=True)
        await client.flush()
        await trio.testing.wait_all_tasks_blocked()
        # HEADERS after the request's end: the server resets the stream (STREAM_CLOSED).
        frame = b"\x00\x00\x01\x01\x05\x00\x00\x00\x01\x82"  # END_STREAM|END_HEADERS, ":method GET"
        await client.stream.send_all(frame)
        await client.read_until(lambda _: client.ended(1))
        await trio.testing.wait_all_tasks_blocked()
    assert said == ["http.disconnect"]


async def test_a_handler_failing_after_its_answer_stops_an_unfinished_upload() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await _answer(send, 200, b"early")
        raise ValueError("a kubesim bug, after the answer")

    async with _serving(app) as client:
        client.h2.send_headers(1, _request("POST"))
        client.h2.send_data(1, b"part of the body")
        await client.flush()
        events = await client.read_until(
            lambda events: any(isinstance(e, h2.events.StreamReset) for e in events)
        )
    reset = next(e for e in events if isinstance(e, h2.events.StreamReset))
    assert reset.error_code == h2.errors.ErrorCodes.NO_ERROR
    assert client.body(1) == b"early"
