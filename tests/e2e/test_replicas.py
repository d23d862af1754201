"""Two server replicas on one real PostgreSQL, two agents for one cluster (kubesim over TLS),
every part a real process (issue #13; tests/e2e/replica_stack.py says how they are wired).

One test walks an operator's day, because each step starts from what the last one left:

1. Exactly one replica holds the cluster's PRIMARY; both replicas list both live replicas;
   either replica answers queries with kubesim's objects.
2. A deploy posted to the replica WITHOUT the agent's stream succeeds; its task reads the
   same on both replicas.
3. Under churn, with one deploy posted to each replica and the API server stalling the next
   write (so a deploy is mid-flight), the replica holding the PRIMARY is killed (-9). A change
   made after the kill is visible on the survivor within 15 s (time to recovery); both tasks
   end (succeeded, or failed with a reason), none hangs; the survivor's cache ends equal to
   kubesim's (0 missing / extra / stale); the survivor holds the PRIMARY.
4. The killed replica starts again and rejoins. The survivor is SIGTERMed (a rollout): it
   exits 0 inside its drain bound, the agents move to the restarted replica, which takes the
   PRIMARY, and its cache ends equal to kubesim's after more churn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import kubesim

from .._wait import wait_until
from .drain_stack import KINDS, NAMESPACE, new_sim, server_state, sim_state, wait_converged
from .harness import churned, wait_churned
from .ops_client import OrcaClient
from .replica_stack import DRAIN_SECONDS, ReplicaStack, open_replica_stack

pytestmark = pytest.mark.timeout(300)

RECOVERY_BOUND_S = 15.0
CHURN_RATE = 100  # changes/s: what the agents' share of 2 cores keeps up with


def _deploy(name: str) -> dict[str, Any]:
    """Orca's deployManifest context for one ConfigMap in the churned namespace."""
    return {
        "account": "k1",
        "source": "text",
        "manifests": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    # one name, not name-v000: ConfigMaps are versioned unless told
                    "annotations": {"strategy.spinnaker.io/versioned": "false"},
                },
                "data": {"deployed": name},
            }
        ],
        "moniker": {"app": "shop"},
        "skipExpressionEvaluation": "false",
        "trafficManagement": {"enabled": False, "options": {"enableTraffic": False}},
    }


def _ended(task: dict[str, Any]) -> str:
    """How a task ended, as Orca reads it; a failure must say why."""
    status = task["status"]
    if status["failed"]:
        reasons = [
            o.get("message", "") for o in task["resultObjects"] if o.get("type") == "EXCEPTION"
        ]
        assert reasons, f"a failed task without a reason: {task}"
        assert all(reasons), f"a failed task without a reason: {task}"
        return f"failed: {reasons[0]}"
    assert status["completed"], task
    return "succeeded"


async def _wait_task(stack: ReplicaStack, via: str, task_id: str) -> dict[str, Any]:
    return await OrcaClient(stack.replica(via).http).wait("deployManifest", task_id)


async def test_replicas_share_one_cluster_and_survive_kill_and_rollout(
    tmp_path: Path, postgres_server: Any
) -> None:
    store_url = postgres_server.url(postgres_server.create_database())
    sim = new_sim()
    churn = kubesim.Churn(
        sim, rate=CHURN_RATE, kinds=tuple(KINDS.values()), namespace=NAMESPACE, seed=13
    )
    for _ in range(60):
        churn.step()
    async with open_replica_stack(tmp_path, sim, store_url) as stack:
        # 1. one PRIMARY; both replicas live; both answer queries.
        holder = await stack.wait_primary("r1")
        other = "r2" if holder == "r1" else "r1"
        assert await stack.primary_holder(other) == holder
        for via in ("r1", "r2"):
            assert {"r1", "r2"} <= {d["id"] for d in await stack.clouddrivers(via)}
            await wait_converged(stack.replica(via).http, sim)

        # 2. an operation posted where the stream is not.
        far = OrcaClient(stack.replica(other).http)
        task = await far.run("deployManifest", _deploy("via-other-replica"))
        assert _ended(task) == "succeeded", task
        deployed = sim.get("", "v1", "configmaps", NAMESPACE, "via-other-replica")
        assert deployed["data"] == {"deployed": "via-other-replica"}
        on_holder = (await stack.replica(holder).http.get(f"/task/{task['id']}")).json()
        assert on_holder["status"] == task["status"]

        # 3. kill -9 the PRIMARY's replica during churn and during deploys.
        survivor = stack.replica(other)
        async with trio.open_nursery() as churning:
            await churning.start(churn.run)  # kubesim's own pacing: CHURN_RATE changes/s
            await wait_churned(churn, churned(churn) + 1)
            stack.kube.faults.stall_responses(seconds=3, count=1)
            posted = [
                (other, await far.submit("deployManifest", _deploy("posted-far"))),
                (
                    holder,
                    await OrcaClient(stack.replica(holder).http).submit(
                        "deployManifest", _deploy("posted-near")
                    ),
                ),
            ]
            killed_at = trio.current_time()
            await stack.replica(holder).kill()
            sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "after-the-kill", "namespace": NAMESPACE},
                }
            )

            async def visible() -> bool:
                return ("ConfigMap", "after-the-kill") in await server_state(survivor.http)

            await wait_until(visible, interval=0.1, what="a change after the kill on the survivor")
            recovery = trio.current_time() - killed_at
            churning.cancel_scope.cancel()
        print(f"\nrecovery after kill -9 of the PRIMARY's replica: {recovery:.2f} s")
        assert recovery <= RECOVERY_BOUND_S
        with trio.fail_after(WAIT_S := 40):
            endings = [_ended(await _wait_task(stack, other, task_id)) for _, task_id in posted]
        print(f"deploys in flight at the kill (within {WAIT_S} s): {endings}")
        await wait_converged(survivor.http, sim)
        assert server_state_equal(await server_state(survivor.http), sim)
        assert await stack.wait_primary(other) == other

        # 4. the killed replica rejoins; a rollout SIGTERMs the survivor.
        restarted = stack.replica(holder)
        await restarted.start()

        async def both_live() -> bool:
            return {"r1", "r2"} <= {d["id"] for d in await stack.clouddrivers(other)}

        await wait_until(both_live, interval=0.1, what="the restarted replica is listed")
        code, took, ready = await survivor.role.terminate(grace=DRAIN_SECONDS + 10)
        assert ready, f"{other} never logged that it runs:\n{survivor.role.log_tail(30)}"
        assert code == 0, f"{other} exited {code}:\n{survivor.role.log_tail(30)}"
        print(f"{other} drained in {took:.2f} s")
        assert await stack.wait_primary(holder, not_on=other) == holder
        for _ in range(100):
            churn.step()
        await wait_converged(restarted.http, sim)
        for name, agent in stack.agents.items():
            assert agent.exited() is None, f"agent {name} exited:\n{agent.log_tail(30)}"


def server_state_equal(state: dict[tuple[str, str], str], sim: kubesim.Cluster) -> bool:
    """0 missing, 0 extra, 0 stale (names the difference when not)."""
    want = sim_state(sim)
    missing = sorted(set(want) - set(state))[:5]
    extra = sorted(set(state) - set(want))[:5]
    stale = sorted(k for k in set(want) & set(state) if want[k] != state[k])[:5]
    difference = f"missing {missing} extra {extra} stale {stale}"
    assert not missing, difference
    assert not extra, difference
    assert not stale, difference
    return True
