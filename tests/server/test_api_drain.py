"""The REST API's drain (serve_api's ``drain`` event) over real sockets: the listener closes,
an idle keep-alive connection is closed, a request whose body is still arriving is answered
in full (``connection: close``), then serve_api returns. With ``httpServer: hypercorn`` the
drain is Hypercorn's graceful shutdown: the listener closes and serve_api returns (a request
whose body has not arrived whole is cut there, as docs/configuration.md says)."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import betterproto
import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry
from trio_websocket import ConnectionClosed, open_websocket_url

import wire
from server import RunningServer, run_server
from server.api import serve_api
from server.store import open_sqlite_store, sqlite_url
from wire import messages as m

from ..wire._loop import in_loop
from ..wire.protobuf_bytes import as_sent, bytes_field
from .test_api_e2e import bearer, config, deployment, hello, next_of
from .test_api_feed import drain as drain_feed
from .test_api_feed import release_client_socket
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


@in_loop
async def test_the_server_drain_acks_then_tells_the_agent_and_closes_the_feed(
    tmp_path: Path,
) -> None:
    """run_server's drain, in process, with a hand-driven agent: a batch sent just before the
    drain is either stored and acknowledged before the status, or neither (the agent sends it
    again elsewhere); the status is UNAVAILABLE 'server draining'; the feed closes with 1001;
    run_server returns and the store file is clean."""
    store = tmp_path / "drain.db"
    stop, returned = trio.Event(), trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:

            async def serve(*, task_status: trio.TaskStatus[RunningServer]) -> None:
                await run_server(
                    config(sqlite_url(str(store))),
                    serve_api=serve_api,
                    stop=stop,
                    task_status=task_status,
                )
                returned.set()

            server: RunningServer = await nursery.start(serve)
            base = f"127.0.0.1:{server.api_port}"
            async with (
                open_websocket_url(f"ws://{base}/v1/events") as feed,
                wire.open_connection("127.0.0.1", server.grpc_port, metadata=bearer()) as agent,
            ):
                assert json.loads(await feed.get_message())["type"] == "subscribed"
                await agent.send(hello())
                await next_of(agent, "welcome")
                batch = m.EventBatch(seq=1, records=wire.encode_events([deployment()]), count=1)
                await agent.send(m.AgentMessage(event_batch=batch))
                stop.set()
                acked = False
                while True:
                    try:
                        message = await agent.receive()
                    except wire.RemoteRefused as exc:
                        ended = exc
                        break
                    _, value = betterproto.which_one_of(message, "message")
                    acked = acked or (isinstance(value, m.Ack) and value.seq == 1)
                assert wire.is_draining(ended), ended
                assert "e2e-server is shutting down" in ended.message
                with pytest.raises(ConnectionClosed) as closed:
                    await drain_feed(feed)
                await release_client_socket(feed)
                assert closed.value.reason is not None
                assert closed.value.reason.code == 1001
            await returned.wait()
    wal = store.with_name(store.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    async with open_sqlite_store(str(store)) as reopened:
        stored = await reopened.count_objects(account="prod")
    assert stored == (1 if acked else 0)


@in_loop
async def test_a_drain_refuses_a_call_still_waiting_for_its_hello(tmp_path: Path) -> None:
    """A connection opened just before SIGTERM that never says Hello held the drain for
    helloTimeoutSeconds (here 60 s): the wait for the Hello is cancelled by the drain too,
    and the call ends with the draining status (found in review)."""
    base = config(sqlite_url(str(tmp_path / "hello.db")))
    slow = dataclasses.replace(
        base, sessions=dataclasses.replace(base.sessions, hello_timeout_seconds=60.0)
    )
    stop, returned = trio.Event(), trio.Event()
    with trio.fail_after(20):  # well inside the Hello's 60 s
        async with trio.open_nursery() as nursery:

            async def serve(*, task_status: trio.TaskStatus[RunningServer]) -> None:
                await run_server(slow, serve_api=serve_api, stop=stop, task_status=task_status)
                returned.set()

            server: RunningServer = await nursery.start(serve)
            async with wire.open_connection(
                "127.0.0.1", server.grpc_port, metadata=bearer()
            ) as silent:
                # The call opens with a message kind a newer agent may send before its Hello
                # (the server reads past it), then nothing.
                await silent.send(as_sent(m.AgentMessage, bytes_field(15, b"\x08\x07")))
                stop.set()
                with pytest.raises(wire.RemoteRefused) as refused, trio.fail_after(5):
                    await silent.receive()
                assert wire.is_draining(refused.value), refused.value
            await returned.wait()
