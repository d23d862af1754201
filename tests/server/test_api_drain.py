"""The REST API's drain (serve_api's ``drain`` event) over real sockets: the listener closes,
an idle keep-alive connection is closed, a request whose body is still arriving is answered
in full (``connection: close``), then serve_api returns. With ``httpServer: hypercorn`` the
drain is Hypercorn's graceful shutdown: the listener closes and serve_api returns (a request
whose body has not arrived whole is cut there, as docs/configuration.md says)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry

from server.api import serve_api

from .test_api_support import open_state

HEALTH = b"GET /health HTTP/1.1\r\nhost: t\r\n"


async def _response(stream: trio.SocketStream) -> tuple[bytes, bytes]:
    """One response with a Content-Length body: (head, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.lower().split(b"\r\n")
        if b"content-length" in line
    )
    while len(body) < length:
        chunk = await stream.receive_some(65536)
        assert chunk, "closed inside the body"
        body += chunk
    return head, body


async def _closed(stream: trio.SocketStream) -> bool:
    try:
        return await stream.receive_some(1) == b""
    except trio.BrokenResourceError:
        return True


async def test_a_drain_answers_the_request_in_flight_and_returns(tmp_path: Path) -> None:
    drain = trio.Event()
    returned = trio.Event()
    with trio.fail_after(20):
        async with (
            open_state(tmp_path, standalone=False, feed=None) as state,
            trio.open_nursery() as nursery,
        ):

            async def serve(*, task_status: trio.TaskStatus[int]) -> None:
                run = functools.partial(serve_api, registry=CollectorRegistry(), drain=drain)
                await run(state, "127.0.0.1", 0, task_status=task_status)
                returned.set()

            port: int = await nursery.start(serve)
            idle = await trio.open_tcp_stream("127.0.0.1", port)
            busy = await trio.open_tcp_stream("127.0.0.1", port)
            async with idle, busy:
                await idle.send_all(HEALTH + b"\r\n")
                head, _ = await _response(idle)
                assert head.startswith(b"HTTP/1.1 200")
                await busy.send_all(HEALTH + b"content-length: 4\r\n\r\nab")
                await trio.testing.wait_all_tasks_blocked()

                drain.set()
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(OSError):
                    await trio.open_tcp_stream("127.0.0.1", port)
                assert await _closed(idle)
                assert not returned.is_set()  # the request in flight holds it

                await busy.send_all(b"cd")
                head, body = await _response(busy)
                assert head.startswith(b"HTTP/1.1 200"), head
                assert b'"status"' in body
                assert b"connection: close" in head.lower()
                assert await _closed(busy)
            await returned.wait()


async def test_hypercorn_drains_too(tmp_path: Path) -> None:
    drain = trio.Event()
    with trio.fail_after(20):
        async with (
            open_state(tmp_path, standalone=False, feed=None) as state,
            trio.open_nursery() as nursery,
        ):
            run = functools.partial(
                serve_api, registry=CollectorRegistry(), http_server="hypercorn", drain=drain
            )
            port: int = await nursery.start(run, state, "127.0.0.1", 0)
            idle = await trio.open_tcp_stream("127.0.0.1", port)
            async with idle:
                await idle.send_all(HEALTH + b"\r\n")
                head, _ = await _response(idle)
                assert head.startswith(b"HTTP/1.1 200")
                drain.set()
                assert await _closed(idle)
        # The nursery closed by itself: serve_api returned once drained.
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", port)
