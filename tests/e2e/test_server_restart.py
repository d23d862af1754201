"""Issue 5 acceptance, end to end: the server restarts on the same SQLite file; the agent
reconnects and resumes every kind from the stored resourceVersions (no list on kubesim, no
streaming list either), and the changes made while the server was down arrive."""

from __future__ import annotations

from pathlib import Path

import trio

import kubesim
from server.store import AccountState

from .cache_check import relisted_kinds, wait_cache_equal
from .harness import open_stack, wait_until


async def test_restart_on_the_same_sqlite_file_resumes_without_lists(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    kubesim.load_pods(sim, 40, namespaces=["team-a", "team-b"])
    for index in range(20):
        sim.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{index}", "namespace": "default"},
                    "data": {"value": str(index)}})
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim) as stack:
            await wait_cache_equal(stack, patience=30)
            sessions_before = stack.agent.link.status.sessions
            lists_before = stack.kube.requests.count("list")
            server_before = stack.server.state.server_id
            objects_before = await stack.store.count_objects(account="k1")

            await stack.stop_server()

            async def disconnected() -> bool:
                return not stack.agent.link.status.connected

            await wait_until(disconnected)
            # Changes while the server is down: creates, updates, deletes, across kinds.
            for index in range(20, 30):
                sim.create({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": f"cm-{index}", "namespace": "default"},
                            "data": {"value": str(index)}})
            changed = sim.get("", "v1", "configmaps", "default", "cm-3")
            changed["data"] = {"value": "changed while the server was down"}
            sim.update(changed)
            for index in range(5):
                sim.delete("", "v1", "configmaps", "default", f"cm-{10 + index}")
            pod = sim.list("", "v1", "pods", "team-a")[0]["metadata"]["name"]
            sim.delete("", "v1", "pods", "team-a", pod)
            churn = kubesim.Churn(sim, rate=100, seed=3, kinds=("pods", "deployments"))
            async with trio.open_nursery() as nursery:
                await nursery.start(churn.run)
                await trio.sleep(0.5)
                nursery.cancel_scope.cancel()

            await stack.start_server()
            assert stack.server.state.server_id != server_before  # really a new process state
            # The restarted server knows the account (persisted) and still holds its objects.
            assert stack.server.state.accounts.get("k1") is not None
            assert await stack.store.count_objects(account="k1") == objects_before

            async def reconnected() -> bool:
                record = stack.server.state.accounts.get("k1")
                return (
                    stack.agent.link.status.sessions > sessions_before
                    and stack.agent.link.status.roles.get("k1") == "PRIMARY"
                    and record is not None
                    and record.status is AccountState.ACTIVE
                )

            await wait_until(reconnected)
            await wait_cache_equal(stack, patience=30)
            assert stack.kube.requests.count("list") == lists_before, stack.kube.requests.snapshot()
            assert relisted_kinds(stack.agent) == [], "these kinds were fetched in full again"
            stored = await stack.store.get_object("k1", "v1", "ConfigMap", "default", "cm-3")
            assert stored is not None
            assert b"changed while the server was down" in stored.body
