"""One account split across agents (docs/sharding.md), end to end over TLS with kubesim: one
agent serves the account's Pods, another everything else. Both stream and the server's cache
of the account equals kubesim's; one shard's agent dying orphans that shard only, and its
relist when it comes back sweeps its own objects, never the other shard's; a standby of a
shard takes over; the REST API shows one account with its shards; an operation goes to the
shard that owns what it writes; an overlapping shard is refused."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import kubesim
from agent import Agent

from .cache_check import expected_objects, relisted_kinds, watched_kinds
from .harness import Stack, open_stack, stored_objects, wait_until
from .ops_client import OrcaClient

ACCOUNT = "big"
NAMESPACES = (*kubesim.SimConfig().namespaces, "a", "b")


def pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }


def configmap(name: str, value: str = "v") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"value": value},
    }


def cluster() -> kubesim.Cluster:
    # A short watch history: a shard's agent away for a while relists when it comes back.
    config = kubesim.SimConfig(watch_history=20, controllers=False, namespaces=NAMESPACES)
    sim = kubesim.Cluster(config)
    for index in range(12):
        sim.create(pod(f"p-{index}", "a" if index % 2 else "b"))
    for index in range(10):
        sim.create(configmap(f"cm-{index}"))
    return sim


def shard_account(stack_or_path: Stack | Path, name: str, **spec: Any) -> dict[str, Any]:
    kubeconfig = stack_or_path.kubeconfig if isinstance(stack_or_path, Stack) else stack_or_path
    return {
        "name": ACCOUNT,
        "kubeConfigFile": str(kubeconfig),
        "shard": {"name": name, **spec},
    }


def pods_shard(stack: Stack) -> dict[str, Any]:
    return shard_account(stack, "pods", kinds=["Pod"])


def rest_shard(stack: Stack) -> dict[str, Any]:
    return shard_account(stack, "rest", omitKinds=["Pod"])


def primary_agent(stack: Stack, unit: str) -> str | None:
    session = stack.server.state.sessions.primary_session(unit)
    return session.agent_id if session is not None else None


async def cache_equal(stack: Stack, agents: list[Agent]) -> list[str]:
    """What differs between the server's cache of the account and kubesim's objects of the
    kinds the shards' agents watch (empty: equal)."""
    kinds: set[tuple[str, str]] = set()
    for agent in agents:
        state = agent.accounts.accounts.get(ACCOUNT)
        if state is None or state.watch is None or not state.watch.synced:
            return [f"agent {agent} has not synced yet"]
        kinds |= watched_kinds(stack, ACCOUNT, agent)
    want = expected_objects(stack.sim, kinds)
    have = await stored_objects(stack, ACCOUNT)
    problems = [f"missing {key}" for key in want.keys() - have.keys()]
    problems += [f"extra {key}" for key in have.keys() - want.keys()]
    problems += [f"differs {key}" for key in want.keys() & have.keys() if want[key] != have[key]]
    return problems


async def wait_cache_equal(stack: Stack, agents: list[Agent]) -> None:
    async def equal() -> bool:
        return not await cache_equal(stack, agents)

    await wait_until(equal, what="the server's cache equals kubesim's")


def relists(agent: Agent) -> int:
    """How many times ``agent``'s watches of the account listed again after their first."""
    state = agent.accounts.accounts.get(ACCOUNT)
    assert state is not None
    assert state.watch is not None
    return sum(r.relists for r in state.watch.reflectors.values())


async def counts(stack: Stack) -> dict[str, int]:
    found: dict[str, int] = {}
    for key in await stored_objects(stack, ACCOUNT):
        found[key[1]] = found.get(key[1], 0) + 1
    return found


async def test_two_agents_each_stream_their_shard_and_a_relist_keeps_the_others(
    tmp_path: Path,
) -> None:
    sim = cluster()
    kubeconfig = tmp_path / "kubeconfig"
    pods = [shard_account(kubeconfig, "pods", kinds=["Pod"])]
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim, accounts=pods, agent_id="agent-pods") as stack:
            rest, rest_task = await stack.start_agent("agent-rest", [rest_shard(stack)])
            registry = stack.server.state.accounts.registry
            await wait_until(
                lambda: (
                    primary_agent(stack, "big/pods") == "agent-pods"
                    and primary_agent(stack, "big/rest") == "agent-rest"
                ),
                what="each shard has its own PRIMARY",
            )
            await wait_cache_equal(stack, [stack.agent, rest])
            assert (await counts(stack))["Pod"] == 12
            assert (await counts(stack))["ConfigMap"] == 10

            # Both stream live changes.
            sim.create(pod("late", "a"))
            sim.create(configmap("late"))
            await wait_cache_equal(stack, [stack.agent, rest])

            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                credentials = (await http.get("/credentials")).json()
                assert [c["name"] for c in credentials] == [ACCOUNT]
                account = (await http.get(f"/armory/accounts/{ACCOUNT}")).json()
                assert account["status"] == "ACTIVE"
                shards = {s["name"]: s for s in account["properties"]["shards"]}
                assert shards["pods"]["primary"] == "agent-pods"
                assert shards["pods"]["kinds"] == ["pod"]
                assert shards["rest"]["primary"] == "agent-rest"
                assert shards["rest"]["omitKinds"] == ["pod"]
                assert (await http.get(f"/credentials/{ACCOUNT}")).status_code == 200

            # The Pods' agent dies: its shard alone is ORPHANED, the rest streams on.
            assert stack.agent_task is not None
            await stack.agent_task.stop()
            await wait_until(
                lambda: (
                    (record := registry.get("big/pods")) is not None
                    and str(record.status) == "ORPHANED"
                ),
                what="the Pods' shard is ORPHANED",
            )
            record = registry.get("big/rest")
            assert record is not None
            assert str(record.status) == "ACTIVE"
            folded = stack.server.state.accounts.get(ACCOUNT)
            assert folded is not None
            assert str(folded.status) == "ACTIVE"
            sim.create(configmap("while-pods-are-away"))
            # Pods change meanwhile, more than kubesim remembers: the Pods' next agent lists
            # them again (410 Gone on its resume point) and its sync bracket sweeps p-0..p-2.
            for index in range(3):
                sim.delete("", "v1", "pods", "b" if index % 2 == 0 else "a", f"p-{index}")
            for round_ in range(25):
                late = sim.get("", "v1", "pods", "a", "late")
                late["metadata"].setdefault("labels", {})["round"] = str(round_)
                sim.update(late)

            back, _task = await stack.start_agent(
                "agent-pods-2", [shard_account(kubeconfig, "pods", kinds=["Pod"])]
            )
            await wait_until(
                lambda: primary_agent(stack, "big/pods") == "agent-pods-2",
                what="the Pods' shard is served again",
            )
            await wait_cache_equal(stack, [back, rest])
            assert "v1 Pod" in relisted_kinds(back, ACCOUNT)
            found = await counts(stack)
            assert found["Pod"] == 10  # 12 + late - 3
            assert found["ConfigMap"] == 12  # none of the rest's objects was swept
            assert relists(rest) == 0  # the rest's watches never listed again
            await rest_task.stop()


async def test_a_standby_takes_over_its_shard_and_operations_go_to_the_owner(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sim = cluster()
    kubeconfig = tmp_path / "kubeconfig"
    pods = [shard_account(kubeconfig, "pods", kinds=["Pod"])]
    caplog.set_level(logging.WARNING, logger="server")
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim, accounts=pods, agent_id="agent-pods") as stack:
            registry = stack.server.state.accounts.registry
            rest, rest_task = await stack.start_agent("agent-rest", [rest_shard(stack)])
            await wait_until(
                lambda: primary_agent(stack, "big/rest") == "agent-rest", what="rest PRIMARY"
            )
            spare, _spare_task = await stack.start_agent("agent-spare", [rest_shard(stack)])
            await wait_until(
                lambda: len(registry.holders("big/rest")) == 2, what="a standby of the rest"
            )
            # An agent claiming every kind overlaps both shards: refused, with the reason.
            everything = [shard_account(kubeconfig, "all")]
            await stack.start_agent("agent-all", everything)
            await wait_until(
                lambda: "overlaps its shard" in caplog.text, what="the overlapping shard refused"
            )
            assert registry.get("big/all") is None
            await wait_cache_equal(stack, [stack.agent, rest])

            # An operation goes to the shard that owns what it writes.
            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                orca = OrcaClient(http)
                task = await orca.run(
                    "deployManifest", {"account": ACCOUNT, "manifests": [configmap("deployed")]}
                )
                assert not task["status"]["failed"], task
                op = (await http.get(f"/armory/agent/operations/{task['id']}-0")).json()
                assert any("sent to agent agent-rest" in h["message"] for h in op["history"])
                task = await orca.run(
                    "deleteManifest",
                    {"account": ACCOUNT, "manifestName": "pod p-1", "location": "a"},
                )
                assert not task["status"]["failed"], task
                op = (await http.get(f"/armory/agent/operations/{task['id']}-0")).json()
                assert any("sent to agent agent-pods" in h["message"] for h in op["history"])

            # The rest's primary dies: its standby takes over that shard, and streams.
            await rest_task.stop()
            await wait_until(
                lambda: primary_agent(stack, "big/rest") == "agent-spare",
                what="the standby promoted",
            )
            assert primary_agent(stack, "big/pods") == "agent-pods"
            sim.create(configmap("after-failover"))
            await wait_cache_equal(stack, [stack.agent, spare])
            assert relists(stack.agent) == 0


async def test_a_kind_moves_between_shards_narrowing_first(tmp_path: Path) -> None:
    """The layout changes live (docs/sharding.md, "Changing a layout"): the rest gives up
    ConfigMaps (they stay cached meanwhile), then the Pods' shard takes them and lists them;
    a ConfigMap deleted in between is swept by that listing."""
    sim = cluster()
    kubeconfig = tmp_path / "kubeconfig"
    pods = [shard_account(kubeconfig, "pods", kinds=["Pod"])]
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim, accounts=pods, agent_id="agent-pods") as stack:
            registry = stack.server.state.accounts.registry
            rest, _rest_task = await stack.start_agent("agent-rest", [rest_shard(stack)])
            await wait_cache_equal(stack, [stack.agent, rest])

            narrower = [shard_account(kubeconfig, "rest", omitKinds=["Pod", "ConfigMap"])]
            rest_config = stack.config_path.with_name("agent-rest.yaml")
            rest_config.write_text(stack.config_text(narrower), encoding="utf-8")

            def rest_spec_is(kinds: list[str]) -> bool:
                record = registry.get("big/rest")
                return (
                    record is not None
                    and primary_agent(stack, "big/rest") == "agent-rest"
                    and sorted(record.properties["shard"]["omit_kinds"]) == kinds
                )

            await wait_until(lambda: rest_spec_is(["ConfigMap", "Pod"]), what="rest narrowed")
            await wait_until(lambda: rest.accounts.accounts[ACCOUNT].watch is not None)
            assert (await counts(stack))["ConfigMap"] == 10  # not the rest's to remove now
            sim.delete("", "v1", "configmaps", "default", "cm-0")

            stack.write_config([shard_account(kubeconfig, "pods", kinds=["Pod", "ConfigMap"])])
            await wait_until(
                lambda: (
                    (record := registry.get("big/pods")) is not None
                    and primary_agent(stack, "big/pods") == "agent-pods"
                    and sorted(record.properties["shard"]["kinds"]) == ["ConfigMap", "Pod"]
                ),
                what="pods widened",
            )
            await wait_cache_equal(stack, [stack.agent, rest])
            assert (await counts(stack))["ConfigMap"] == 9
