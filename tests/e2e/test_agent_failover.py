"""An agent given several server addresses (``clouddriver.grpcAddresses``) whose first is dead
(nothing listens) or resets every connection reaches the server at the next one at once, and
streams: the server's cache ends equal to kubesim's (issue #13)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

import kubesim

from ..agent.fault_listeners import FaultListener, reset_at_once
from .cache_check import wait_cache_equal
from .harness import SERVER_ADDRESS, open_stack


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("first", ["closed", "resets"])
async def test_the_agent_streams_through_the_second_address(tmp_path: Path, first: str) -> None:
    sim = kubesim.Cluster()
    for index in range(30):
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{index}", "namespace": "default"},
                "data": {"value": str(index)},
            }
        )
    listener = FaultListener(reset_at_once)
    with trio.fail_after(30):
        async with trio.open_nursery() as outer:
            if first == "closed":
                dead = _closed_port()
            else:
                await outer.start(listener.serve)
                dead = listener.port
            clouddriver = {
                # A 60 s backoff: the session on the second address comes without it.
                "backoff": {"baseDelay": "60s", "maxDelay": "60s"},
                "grpcAddresses": [f"127.0.0.1:{dead}", SERVER_ADDRESS],
            }
            async with open_stack(tmp_path, sim=sim, clouddriver=clouddriver) as stack:
                await wait_cache_equal(stack, "k1", patience=15)
                status = stack.agent.link.status
                assert status.server_address == f"127.0.0.1:{stack.server.grpc_port}"
                assert status.sessions == 1
            outer.cancel_scope.cancel()
    if first == "resets":
        assert listener.connections == 1
