"""The agent survives a replica's death (issue #13): given several server addresses
(``clouddriver.grpcAddresses``), the real link moves past one that is dead, resets or drains
to the next at once, and backs off only once every address has failed in a row.

Each test gives the link a 60 s backoff: a connect that still comes within seconds came
without it. The sequence itself is agent/link/_rotation.py's (tests/agent/
test_link_rotation.py).
"""

from __future__ import annotations

import functools
import logging
import socket

import pytest
import trio

import server
import wire
from agent import Backoff

from .._wait import wait_until
from ..wire._loop import in_loop
from .fault_listeners import FaultListener, reset_at_once
from .test_link_faults import _Agent, _DrainingReplica, _server_config

SLOW = Backoff(base=60.0, jitter=0, max_delay=60.0)


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connects are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _start_server(nursery: trio.Nursery) -> server.RunningServer:
    running: server.RunningServer = await nursery.start(
        functools.partial(server.run_server, _server_config(0))
    )
    return running


@in_loop
async def test_a_closed_first_address_costs_no_backoff(caplog: pytest.LogCaptureFixture) -> None:
    dead = _closed_port()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            running = await _start_server(nursery)
            agent = _Agent(dead, backoff=SLOW, also=(running.grpc_port,))
            await nursery.start(agent.link.run)
            with trio.fail_after(10):  # far under the 60 s backoff
                await agent.connected.wait()
            assert [s.agent_id for s in running.state.sessions.agents()] == ["agent-faults"]
            nursery.cancel_scope.cancel()
    status = agent.link.status
    assert status.sessions == 1
    assert status.server_address == f"127.0.0.1:{running.grpc_port}"
    moved = [r.getMessage() for r in caplog.records if "at once" in r.getMessage()]
    assert moved == [
        f"link to 127.0.0.1:{dead} lost: {status.last_error}; "
        f"trying 127.0.0.1:{running.grpc_port} at once"
    ]


@in_loop
async def test_a_first_address_that_accepts_and_resets_costs_no_backoff() -> None:
    listener = FaultListener(reset_at_once)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.serve)
            running = await _start_server(nursery)
            agent = _Agent(listener.port, backoff=SLOW, also=(running.grpc_port,))
            await nursery.start(agent.link.run)
            with trio.fail_after(10):
                await agent.connected.wait()
            nursery.cancel_scope.cancel()
    assert listener.connections == 1
    assert agent.link.status.sessions == 1


@in_loop
async def test_every_address_failing_backs_off_once_per_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = FaultListener(reset_at_once), FaultListener(reset_at_once)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(first.serve)
            await nursery.start(second.serve)
            agent = _Agent(first.port, backoff=SLOW, also=(second.port,))
            await nursery.start(agent.link.run)

            def backed_off() -> bool:
                return any("reconnecting in 60.00 s" in r.getMessage() for r in caplog.records)

            await wait_until(backed_off, timeout=10, what="the round's backoff")
            # One attempt each, then the wait: not one backoff per address.
            assert (first.connections, second.connections) == (1, 1)
            nursery.cancel_scope.cancel()
    [waited] = [r.getMessage() for r in caplog.records if "reconnecting in" in r.getMessage()]
    assert waited.startswith(f"link to 127.0.0.1:{second.port} lost: ")
    assert waited.endswith(f"reconnecting in 60.00 s (to 127.0.0.1:{first.port})")


@in_loop
async def test_a_draining_replica_moves_the_session_to_the_next_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agent.link")
    replica = _DrainingReplica()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            draining_port = await nursery.start(wire.serve, replica.handler, "127.0.0.1", 0)
            running = await _start_server(nursery)
            agent = _Agent(draining_port, backoff=SLOW, also=(running.grpc_port,))
            await nursery.start(agent.link.run)

            def on_the_next() -> bool:
                return agent.link.status.server_id == running.state.server_id

            await wait_until(on_the_next, timeout=10, what="a session on the second address")
            nursery.cancel_scope.cancel()
    assert replica.hellos == 1  # not dialled again: the drain moved the agent on
    assert agent.link.status.sessions == 2
    moved = [r.getMessage() for r in caplog.records if "the server is draining" in r.getMessage()]
    assert len(moved) == 1, moved
    assert moved[0].endswith(f"(to 127.0.0.1:{running.grpc_port})")
