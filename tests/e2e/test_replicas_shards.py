"""A sharded account on two server replicas over one real PostgreSQL (docs/sharding.md),
every part a real process: agent a serves k1's Pods and starts on r1, agent b its ConfigMaps
and starts on r2. Each shard holds its own lease, so both replicas hold a PRIMARY; both
replicas show one account with its two shards; an operation posted to the replica without
the owning shard's stream is dispatched to the one with it; when r2 is killed, b's shard
moves to r1 and streams on, and a's shard never stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .._wait import wait_until
from .drain_stack import NAMESPACE, new_sim, server_state, wait_converged
from .ops_client import OrcaClient
from .replica_stack import ReplicaStack, open_replica_stack

pytestmark = pytest.mark.timeout(300)

SHARDS = {
    "a": {"name": "pods", "kinds": ["Pod"], "namespaces": [NAMESPACE]},
    "b": {"name": "rest", "kinds": ["ConfigMap"], "namespaces": [NAMESPACE]},
}


async def primaries(stack: ReplicaStack, via: str) -> dict[str, int]:
    return {d["id"]: d.get("primaries", 0) for d in await stack.clouddrivers(via)}


def configmap(name: str) -> dict[str, Any]:
    # One name, not name-v000: ConfigMaps are versioned unless told.
    annotations = {"strategy.spinnaker.io/versioned": "false"}
    meta = {"name": name, "namespace": NAMESPACE, "annotations": annotations}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


async def test_each_shard_holds_its_lease_and_operations_cross_replicas(
    tmp_path: Path, postgres_server: Any
) -> None:
    store_url = postgres_server.url(postgres_server.create_database())
    sim = new_sim()
    for index in range(5):
        sim.create(configmap(f"cm-{index}"))
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p-{index}", "namespace": NAMESPACE},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            }
        )
    async with open_replica_stack(tmp_path, sim, store_url, shards=SHARDS) as stack:
        r1, r2 = stack.replica("r1"), stack.replica("r2")

        async def one_each() -> bool:
            return (await primaries(stack, "r1")) == {"r1": 1, "r2": 1}

        await wait_until(one_each, interval=0.1, what="each replica holds one shard's lease")
        for replica in (r1, r2):
            await wait_converged(replica.http, sim)

        async def both_shards_shown() -> bool:
            answer = (await r1.http.get("/armory/accounts/k1")).json()
            shards = {s["name"]: s["primary"] for s in answer["properties"]["shards"]}
            return shards == {"pods": "agent-a", "rest": "agent-b"}

        await wait_until(both_shards_shown, interval=0.1, what="r1 shows both shards")
        assert [c["name"] for c in (await r2.http.get("/credentials")).json()] == ["k1"]

        # A ConfigMap's deploy posted to r1 runs on r2, where the ConfigMaps' shard streams.
        task = await OrcaClient(r1.http).run(
            "deployManifest", {"account": "k1", "manifests": [configmap("deployed")]}
        )
        assert not task["status"]["failed"], task
        op = (await r1.http.get(f"/armory/agent/operations/{task['id']}-0")).json()
        messages = " ".join(h["message"] for h in op["history"])
        assert "on replica r2" in messages, messages
        assert "sent to agent agent-b" in messages, messages
        sim.get("", "v1", "configmaps", NAMESPACE, "deployed")

        # r2 dies: the ConfigMaps' shard moves to r1 (its lease lapses); the Pods' never moved.
        await r2.kill()

        async def both_on_r1() -> bool:
            return (await primaries(stack, "r1")).get("r1") == 2

        await wait_until(both_on_r1, interval=0.2, what="r1 holds both shards")
        sim.create(configmap("after-the-kill"))

        async def visible() -> bool:
            return ("ConfigMap", "after-the-kill") in await server_state(r1.http)

        await wait_until(visible, interval=0.1, what="the moved shard streams on r1")
        await wait_converged(r1.http, sim)
