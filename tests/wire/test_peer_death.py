"""A peer that dies, loudly (process killed) or silently (network black hole), is noticed."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Awaitable, Callable

import pytest
import trio

import wire
from wire import messages as m

from .._procs import open_process
from ._loop import in_loop


@in_loop
async def test_killed_client_process_is_connection_lost_for_the_handler() -> None:
    hello_seen = trio.Event()
    ended = trio.Event()
    outcome: list[BaseException] = []

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await stream.receive()
        hello_seen.set()
        try:
            await stream.receive()
        except wire.WireError as exc:
            outcome.append(exc)
        ended.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with open_process(
                [sys.executable, "-m", "tests.wire._peer_client", str(port)]
            ) as process:
                await hello_seen.wait()
                process.send_signal(signal.SIGKILL)
                await ended.wait()
            nursery.cancel_scope.cancel()
    assert isinstance(outcome[0], wire.ConnectionLost)


class BlackHoleProxy:
    """Forwards TCP between a client and the server until frozen; then it stops reading and
    writing but keeps both sockets open, like a peer whose machine vanished."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = trio.Event()

    async def serve(self, task_status: trio.TaskStatus[int]) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, client: trio.SocketStream) -> None:
        server = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, server)
            nursery.start_soon(self._pump, server, client)

    async def _pump(self, source: trio.SocketStream, sink: trio.SocketStream) -> None:
        async def forward() -> None:
            while data := await source.receive_some(65536):
                await sink.send_all(data)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until(self.frozen.wait, nursery.cancel_scope))
            await forward()
            nursery.cancel_scope.cancel()
        if self.frozen.is_set():
            await trio.sleep_forever()


def _until(
    wait: Callable[[], Awaitable[object]], scope: trio.CancelScope
) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        await wait()
        scope.cancel()

    return run


@in_loop
async def test_silent_dead_server_is_noticed_by_keepalive() -> None:
    welcomed = trio.Event()

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await stream.receive()
        await stream.send(m.ServerMessage(welcome=m.Welcome(server_id="s")))
        await trio.sleep_forever()

    keepalive = wire.Keepalive(interval=0.2, timeout=0.4)
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            proxy = BlackHoleProxy(port)
            proxy_port = await nursery.start(proxy.serve)
            async with wire.open_connection("127.0.0.1", proxy_port, keepalive=keepalive) as stream:
                await stream.send(m.AgentMessage(hello=m.Hello(agent_id="a")))
                await stream.receive()
                welcomed.set()
                proxy.frozen.set()
                started = trio.current_time()
                with pytest.raises(wire.ConnectionLost):
                    await stream.receive()
                # interval + timeout, plus scheduling slack on a busy machine
                assert trio.current_time() - started < 3.0
            nursery.cancel_scope.cancel()


@in_loop
async def test_silent_dead_client_is_noticed_by_the_server_keepalive() -> None:
    outcome: list[BaseException] = []
    hello_seen = trio.Event()
    ended = trio.Event()

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await stream.receive()
        hello_seen.set()
        try:
            await stream.receive()
        except wire.WireError as exc:
            outcome.append(exc)
        ended.set()

    keepalive = wire.Keepalive(interval=0.2, timeout=0.4)
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(wire.serve, handler, "127.0.0.1", 0, keepalive=keepalive)
            )
            proxy = BlackHoleProxy(port)
            proxy_port = await nursery.start(proxy.serve)
            # The client itself does not ping: only the server's keepalive can notice.
            async with wire.open_connection("127.0.0.1", proxy_port, keepalive=None) as stream:
                await stream.send(m.AgentMessage(hello=m.Hello(agent_id="a")))
                await hello_seen.wait()
                proxy.frozen.set()
                started = trio.current_time()
                await ended.wait()
                assert trio.current_time() - started < 3.0
            nursery.cancel_scope.cancel()
    assert isinstance(outcome[0], wire.ConnectionLost)
