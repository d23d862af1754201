"""A server that says nothing for the session's allowance (no Ack, no answer to a heartbeat)
ends the session, and the next one allows it twice as long, up to 8x; a session that ends any
other way sets it back (agent/link/_link.py). Hanging up at the same bound every time had
1,000 agents on a starved server reconnect again and again, until their resume points were too
old to resume from and every account relisted (bench_agents at load 7.5)."""

from __future__ import annotations

import trio

import wire
from agent.link._link import silence_wait

from ..wire._loop import in_loop
from ._link_env import idle_runner, k1_link, loopback_link, welcome_k1

HEARTBEAT = 0.2
QUIET = HEARTBEAT * 2  # heartbeat_seconds + heartbeat_timeout_seconds


def test_the_allowance_doubles_per_silent_session_up_to_eight_times() -> None:
    settings = loopback_link(1, "agent", heartbeat_seconds=20.0, heartbeat_timeout_seconds=10.0)
    assert [silence_wait(settings, n) for n in range(6)] == [30, 60, 120, 240, 240, 240]


class _SilentServer:
    """Welcomes every session and then answers nothing (the agent's heartbeats go unheard),
    except session ``ends_call``, whose call it ends at once. Records how long each silent
    session lasted after its Welcome."""

    def __init__(self, ends_call: int) -> None:
        self.ends_call = ends_call
        self.calls = 0
        self.lasted: list[float] = []
        self.changed = trio.Event()

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        self.calls += 1
        await welcome_k1(stream)
        if self.calls == self.ends_call:
            return  # the session ends, not by silence
        began = trio.current_time()
        try:
            while True:
                await stream.receive()  # heartbeats, never answered
        except wire.WireError:
            pass
        finally:
            self.lasted.append(trio.current_time() - began)
            self.changed.set()
            self.changed = trio.Event()


@in_loop
async def test_a_silent_server_is_allowed_longer_each_time_until_a_session_ends_otherwise() -> None:
    with trio.fail_after(60):
        server = _SilentServer(ends_call=5)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, server.handler, "127.0.0.1", 0)
            settings = loopback_link(
                port,
                "agent-silent",
                heartbeat_seconds=HEARTBEAT,
                heartbeat_timeout_seconds=QUIET - HEARTBEAT,
            )
            link = k1_link(settings, idle_runner)
            nursery.start_soon(link.run)
            while len(server.lasted) < 5:  # 4 silent sessions, one ended, then one more
                await server.changed.wait()
            nursery.cancel_scope.cancel()
    first, second, third, fourth, after_reset = server.lasted
    assert QUIET * 0.9 <= first < 2 * QUIET
    assert 2 * QUIET * 0.9 <= second < 4 * QUIET
    assert 4 * QUIET * 0.9 <= third < 8 * QUIET
    assert 8 * QUIET * 0.9 <= fourth < 12 * QUIET
    # The session the server ended set it back: the setting again, not 16x it.
    assert after_reset < 2 * QUIET
