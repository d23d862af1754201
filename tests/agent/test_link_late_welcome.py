"""A server too busy to answer Hello in time gets longer each time (agent/link/_link.py): the
wait for the Welcome doubles per late Welcome in a row, up to 8x the setting, and a Welcome
sets it back. Giving up at the same bound every time kept a starved server from ever
catching up with 1,000 reconnecting agents (bench_agents at load 9-14)."""

from __future__ import annotations

import trio

import wire
from agent.link._link import welcome_wait

from ..wire._loop import in_loop
from ._link_env import idle_runner, k1_link, loopback_link, welcome_k1

WAIT = 0.4


def test_the_wait_doubles_per_late_welcome_up_to_eight_times() -> None:
    settings = loopback_link(1, "agent", welcome_timeout_seconds=30.0)
    waits = [welcome_wait(settings, late) for late in range(6)]
    assert waits == [30.0, 60.0, 120.0, 240.0, 240.0, 240.0]


class _SlowServer:
    """Says nothing to the first ``silent`` Hellos (the agent gives up on each), then welcomes
    one and ends its call at once, then says nothing again. Records how long the agent waited
    on each silent call."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.calls = 0
        self.waited: list[float] = []
        self.changed = trio.Event()

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        self.calls += 1
        if self.calls == self.silent + 1:
            await welcome_k1(stream)
            return  # the session ends: the agent connects again
        await stream.receive()  # the Hello
        began = trio.current_time()
        try:
            await stream.receive()  # nothing more comes: the agent hangs up
        except wire.WireError:
            pass
        finally:
            self.waited.append(trio.current_time() - began)
            self.changed.set()
            self.changed = trio.Event()


@in_loop
async def test_a_late_welcome_is_waited_for_longer_each_time_until_one_comes() -> None:
    with trio.fail_after(60):
        server = _SlowServer(silent=4)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, server.handler, "127.0.0.1", 0)
            settings = loopback_link(port, "agent-late", welcome_timeout_seconds=WAIT)
            link = k1_link(settings, idle_runner)
            nursery.start_soon(link.run)
            while len(server.waited) < 5:  # 4 silent calls, a Welcome, then one more
                await server.changed.wait()
            nursery.cancel_scope.cancel()
    first, second, third, fourth, after_welcome = server.waited
    assert first >= WAIT * 0.9
    assert second >= 2 * WAIT * 0.9
    assert third >= 4 * WAIT * 0.9
    assert fourth >= 8 * WAIT * 0.9
    # The Welcome set it back: the next silent call is given the setting again, not 16x it.
    assert after_welcome < 4 * WAIT
