"""Issue 5 acceptance, end to end: the server restarts on the same SQLite file; the agent
reconnects and resumes every kind from the stored resourceVersions (no list on kubesim, no
streaming list either), and the changes made while the server was down arrive."""

from __future__ import annotations

import json
from pathlib import Path

import trio

import kubesim
from server.store import AccountState

from .cache_check import relisted_kinds, wait_cache_equal
from .harness import churned, open_stack, run_churn, wait_churned, wait_until


async def test_restart_on_the_same_sqlite_file_resumes_without_lists(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    kubesim.load_pods(sim, 40, namespaces=["team-a", "team-b"])
    for index in range(20):
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{index}", "namespace": "default"},
                "data": {"value": str(index)},
            }
        )
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
                sim.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": f"cm-{index}", "namespace": "default"},
                        "data": {"value": str(index)},
                    }
                )
            changed = sim.get("", "v1", "configmaps", "default", "cm-3")
            changed["data"] = {"value": "changed while the server was down"}
            sim.update(changed)
            for index in range(5):
                sim.delete("", "v1", "configmaps", "default", f"cm-{10 + index}")
            pod = sim.list("", "v1", "pods", "team-a")[0]["metadata"]["name"]
            sim.delete("", "v1", "pods", "team-a", pod)
            churn = kubesim.Churn(sim, rate=100, seed=3, kinds=("pods", "deployments"))
            await run_churn(churn, 50)

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


async def test_namespaced_account_resumes_each_namespace_after_a_restart(tmp_path: Path) -> None:
    """An account limited to namespaces watches per namespace: every record carries its
    watch's scope, so the server keeps one resume point per (kind, namespace) and nothing for a
    cluster-wide scope the agent never watches."""
    sim = kubesim.Cluster()
    for namespace in ("team-a", "team-b", "elsewhere"):
        sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for index in range(5):
            sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{index}", "namespace": namespace},
                    "data": {"value": str(index)},
                }
            )
    accounts = [
        {
            "name": "k1",
            "kubeConfigFile": str(tmp_path / "kubeconfig"),
            "namespaces": ["team-a", "team-b"],
            "kinds": ["ConfigMap", "Pod"],
        }
    ]
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim, accounts=accounts) as stack:

            async def synced() -> bool:
                page = await stack.store.query_objects(account="k1", kind="ConfigMap")
                return len(page.objects) == 10

            await wait_until(synced)
            cm = sim.get("", "v1", "configmaps", "team-a", "cm-1")
            cm["data"] = {"value": "changed before the restart"}
            sim.update(cm)

            async def changed() -> bool:
                stored = await stack.store.get_object("k1", "v1", "ConfigMap", "team-a", "cm-1")
                return stored is not None and b"changed before the restart" in stored.body

            await wait_until(changed)
            points = await stack.store.resume_points("k1")
            scopes = {(p.kind, p.scope) for p in points}
            assert scopes == {
                ("ConfigMap", "team-a"),
                ("ConfigMap", "team-b"),
                ("Pod", "team-a"),
                ("Pod", "team-b"),
            }, scopes
            by_scope = {(p.kind, p.scope): p.resource_version for p in points}
            # The object event advanced its own namespace's resume point.
            assert by_scope[("ConfigMap", "team-a")] == cm_rv(sim, "team-a", "cm-1")

            await stack.stop_server()
            sim.delete("", "v1", "configmaps", "team-b", "cm-2")
            sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "late", "namespace": "team-a"},
                }
            )
            sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "ignored", "namespace": "elsewhere"},
                }
            )
            sessions = stack.agent.link.status.sessions
            await stack.start_server()

            async def caught_up() -> bool:
                names = {
                    (o.namespace, o.name)
                    for o in (
                        await stack.store.query_objects(account="k1", kind="ConfigMap")
                    ).objects
                }
                return (
                    stack.agent.link.status.sessions > sessions
                    and ("team-a", "late") in names
                    and ("team-b", "cm-2") not in names
                )

            await wait_until(caught_up)
            assert relisted_kinds(stack.agent) == []
            assert stack.kube.requests.count("list") == 0
            names = {
                (o.namespace, o.name)
                for o in (await stack.store.query_objects(account="k1", kind="ConfigMap")).objects
            }
            assert not any(ns == "elsewhere" for ns, _ in names)


def cm_rv(sim: kubesim.Cluster, namespace: str, name: str) -> str:
    rv: str = sim.get("", "v1", "configmaps", namespace, name)["metadata"]["resourceVersion"]
    return rv


async def test_expired_resume_point_relists_and_sweeps_what_was_deleted(tmp_path: Path) -> None:
    """kubesim keeps little watch history: after the restart the stored resourceVersions are
    too old (410 Gone), so the agent lists again; the sync bracket removes the objects deleted
    meanwhile, and the change feed announces those removals."""
    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=20))
    for index in range(30):
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{index}", "namespace": "default"},
                "data": {"value": str(index)},
            }
        )
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim) as stack:
            await wait_cache_equal(stack, patience=30)
            await stack.stop_server()
            for index in range(10):
                sim.delete("", "v1", "configmaps", "default", f"cm-{index}")
            for index in range(10, 30):  # more changes than kubesim remembers
                cm = sim.get("", "v1", "configmaps", "default", f"cm-{index}")
                cm["data"] = {"value": "changed"}
                sim.update(cm)
            sessions = stack.agent.link.status.sessions
            await stack.start_server()
            deleted: set[str] = set()
            with stack.server.state.feed.subscribe(accounts=["k1"], kinds=["ConfigMap"]) as feed:

                async def collect() -> None:
                    while True:
                        message = json.loads(await feed.receive())
                        if message["type"] == "DELETED":
                            deleted.add(message["name"])

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(collect)

                    async def back() -> bool:
                        return stack.agent.link.status.sessions > sessions

                    await wait_until(back)
                    await wait_cache_equal(stack, patience=30)

                    async def announced() -> bool:
                        return {f"cm-{index}" for index in range(10)} <= deleted

                    await wait_until(announced)
                    nursery.cancel_scope.cancel()
            relisted = relisted_kinds(stack.agent)
            assert "v1 ConfigMap" in relisted, relisted


async def test_restart_with_a_primary_and_a_standby(tmp_path: Path) -> None:
    """Both agents come back after the restart: one is PRIMARY (resuming, no list), the other
    STANDBY, and the cache is exact."""
    sim = kubesim.Cluster()
    kubesim.load_pods(sim, 20, namespaces=["team-a"])
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim) as stack:
            await wait_cache_equal(stack, patience=30)
            second, _ = await stack.start_agent("agent-b")

            async def standing_by() -> bool:
                return second.link.status.roles.get("k1") == "STANDBY"

            await wait_until(standing_by)
            await stack.stop_server()
            sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "while-down", "namespace": "default"},
                }
            )
            await stack.start_server()
            agents = {"agent-a": stack.agent, "agent-b": second}

            async def settled() -> bool:
                roles = sorted(a.link.status.roles.get("k1", "") for a in agents.values())
                return roles == ["PRIMARY", "STANDBY"]

            await wait_until(settled)
            primary = next(a for a in agents.values() if a.link.status.roles["k1"] == "PRIMARY")
            await wait_cache_equal(stack, patience=30, watcher=primary)
            assert stack.kube.requests.count("list") == 0
            # Whichever agent won the race resumes from the stored versions (agent-b too, which
            # never watched before): nothing is fetched in full again.
            assert relisted_kinds(primary) == []
            views = {v.agent_id: v.accounts for v in stack.server.state.sessions.agents()}
            assert sorted(r.name for roles in views.values() for r in roles.values()) == [
                "PRIMARY",
                "STANDBY",
            ]


async def test_server_restart_in_the_middle_of_churn(tmp_path: Path) -> None:
    """Batches in flight when the server goes down are never acknowledged; the agent drops
    them and resumes from what the server committed, so nothing is lost or doubled."""
    sim = kubesim.Cluster()
    kubesim.load_pods(sim, 20, namespaces=["team-a"])
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim) as stack:
            await wait_cache_equal(stack, patience=30)
            churn = kubesim.Churn(
                sim, rate=300, seed=17, kinds=("configmaps", "pods", "deployments", "secrets")
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(churn.run)
                await wait_churned(churn, 300)
                await stack.stop_server()
                await wait_churned(churn, churned(churn) + 150)  # while the server is down
                await stack.start_server()
                await wait_churned(churn, churned(churn) + 450)
                nursery.cancel_scope.cancel()
            await wait_cache_equal(stack, patience=30)
            assert stack.kube.requests.count("list") == 0
            assert relisted_kinds(stack.agent) == []
