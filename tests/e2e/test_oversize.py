"""The server's limits bind the agent, and an object too large for any message still leaves
its metadata in the cache (marked) instead of vanishing at the next relist."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import trio

import agent
import kubesim
import server

from .harness import open_stack, stored_objects, wait_until

SMALL_MESSAGES = 256 * 1024


async def test_an_object_larger_than_a_message_arrives_as_marked_metadata(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    sim.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "huge", "namespace": "default", "labels": {"app": "big"}},
            "data": {"blob": "x" * (SMALL_MESSAGES + 100_000)},
        }
    )
    for index in range(300):  # enough small ones that batches must respect the server's cap
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"small-{index}", "namespace": "default"},
                "data": {"value": "y" * 2000},
            }
        )
    base = server.ServerConfig()
    config = replace(
        base,
        grpc=replace(base.grpc, max_message_size=SMALL_MESSAGES),
        sessions=replace(base.sessions, max_batch_events=50),
    )
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim, server_config=config) as stack:

            async def synced() -> bool:
                objects = await stored_objects(stack, "k1")
                names = {key[3] for key in objects if key[1] == "ConfigMap"}
                return "huge" in names and len({n for n in names if n.startswith("small-")}) == 300

            await wait_until(synced)
            huge = (await stored_objects(stack, "k1"))[("v1", "ConfigMap", "default", "huge")]
            assert agent.OVERSIZE_ANNOTATION in huge["metadata"]["annotations"]
            assert huge["metadata"]["labels"] == {"app": "big"}
            assert "data" not in huge
            assert stack.agent.link.status.oversize_dropped >= 1
            assert stack.agent.link.status.disconnections == 0  # nothing was refused
