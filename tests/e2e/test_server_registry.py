"""Issue 5 acceptance, end to end: several agents for one account (STANDBY, promotion through
churn), a second cluster claiming a taken name (REJECTED with the reason), and an account
nobody serves (ORPHANED, kept by a reconnect within the grace period, removed after it)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import kubesim
import server
from server.store import AccountState

from .cache_check import relisted_kinds, wait_cache_equal
from .harness import Stack, churned, open_stack, wait_churned, wait_until


def _seed(sim: kubesim.Cluster) -> None:
    kubesim.load_pods(sim, 30, namespaces=["team-a"])
    for index in range(10):
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{index}", "namespace": "default"},
                "data": {"value": str(index)},
            }
        )


def _role(stack: Stack, agent_id: str, account: str = "k1") -> str | None:
    """The role the server gives ``agent_id``'s session for ``account`` (None: none)."""
    for view in stack.server.state.sessions.agents():
        if view.agent_id == agent_id and account in view.accounts:
            return view.accounts[account].name
    return None


async def _account_json(stack: Stack, name: str) -> tuple[int, Any]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.server.api_port}") as client:
        response = await client.get(f"/armory/accounts/{name}")
    return response.status_code, response.json()


async def test_standby_is_promoted_when_the_primary_dies_and_the_cache_stays_right(
    tmp_path: Path,
) -> None:
    sim = kubesim.Cluster()
    _seed(sim)
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim) as stack:
            await wait_cache_equal(stack, patience=30)
            second, _ = await stack.start_agent("agent-b")

            async def standing_by() -> bool:
                return second.link.status.roles.get("k1") == "STANDBY"

            await wait_until(standing_by)
            assert stack.agent.link.status.roles["k1"] == "PRIMARY"
            assert _role(stack, "agent-a") == "PRIMARY"
            assert _role(stack, "agent-b") == "STANDBY"
            # A standby watches nothing.
            assert second.accounts.accounts["k1"].watch is None or not (
                second.accounts.accounts["k1"].watch.reflectors
            )

            churn = kubesim.Churn(
                sim, rate=150, seed=11, kinds=("configmaps", "pods", "deployments", "secrets")
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(churn.run)
                await wait_churned(churn, 150)
                assert stack.agent_task is not None
                await stack.agent_task.stop()  # the primary dies mid-churn

                async def promoted() -> bool:
                    return second.link.status.roles.get("k1") == "PRIMARY"

                await wait_until(promoted)
                assert second.link.status.role_reasons.get("k1", "").startswith("promoted")
                await wait_churned(churn, churned(churn) + 200)  # more under the new primary
                nursery.cancel_scope.cancel()
            assert _role(stack, "agent-b") == "PRIMARY"
            await wait_cache_equal(stack, patience=30, watcher=second)
            record = stack.server.state.accounts.get("k1")
            assert record is not None
            assert record.status is AccountState.ACTIVE
            assert [c["agentId"] for c in record.connections] == ["agent-b"]


async def test_a_second_cluster_claiming_a_taken_name_is_rejected_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with trio.fail_after(60):
        async with open_stack(tmp_path) as stack:

            async def primary() -> bool:
                return stack.agent.link.status.roles.get("k1") == "PRIMARY"

            await wait_until(primary)
            other = kubesim.Cluster()
            other.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "from-the-other-cluster", "namespace": "default"},
                }
            )
            async with kubesim.open_server(other, host="127.0.0.1", port=0) as other_kube:
                other_config = tmp_path / "other-kubeconfig"
                other_kube.kubeconfig(other_config, user="admin")
                intruder, intruder_task = await stack.start_agent(
                    "agent-other", [{"name": "k1", "kubeConfigFile": str(other_config)}]
                )

                async def rejected() -> bool:
                    return intruder.link.status.roles.get("k1") == "REJECTED"

                await wait_until(rejected)
                reason = intruder.link.status.role_reasons["k1"]
                assert "held by another cluster" in reason, reason
                assert stack.kube.url.split("://", 1)[1] in reason, reason
                assert other_kube.url.split("://", 1)[1] in reason, reason
                # The rightful owner keeps the account; nothing of the other cluster is cached.
                assert stack.agent.link.status.roles["k1"] == "PRIMARY"
                code, body = await _account_json(stack, "k1")
                assert code == 200
                assert body["kubeHost"] == stack.kube.url.split("://", 1)[1]
                assert [c["agentId"] for c in body["connections"]] == ["agent-a"]
                assert (
                    await stack.store.get_object(
                        "k1", "v1", "ConfigMap", "default", "from-the-other-cluster"
                    )
                    is None
                )
                assert _role(stack, "agent-other") is None
                await intruder_task.stop()
    logged = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert any(r.startswith("account k1 rejected by the server: ") for r in logged), logged
    assert any("account k1 rejected: " in r and "another cluster" in r for r in logged), logged


async def test_orphaned_account_kept_by_a_reconnect_and_removed_after_the_grace(
    tmp_path: Path,
) -> None:
    sim = kubesim.Cluster()
    _seed(sim)
    base = server.ServerConfig()
    config = replace(base, accounts=replace(base.accounts, orphan_grace_seconds=2.0))
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim, server_config=config) as stack:
            await wait_cache_equal(stack, patience=30)
            cached = await stack.store.count_objects(account="k1")
            assert stack.agent_task is not None
            await stack.agent_task.stop()

            async def orphaned() -> bool:
                record = stack.server.state.accounts.get("k1")
                return record is not None and record.status is AccountState.ORPHANED

            await wait_until(orphaned)
            code, body = await _account_json(stack, "k1")
            assert code == 200
            assert body["status"] == "ORPHANED"
            assert body["connections"] == []

            # A new agent within the grace period: ACTIVE again, the cache kept, and it resumes
            # from the stored resourceVersions instead of listing again.
            lists_before = stack.kube.requests.count("list")
            sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "while-orphaned", "namespace": "default"},
                }
            )
            back, back_task = await stack.start_agent("agent-a")

            async def active() -> bool:
                record = stack.server.state.accounts.get("k1")
                return record is not None and record.status is AccountState.ACTIVE

            await wait_until(active)
            assert await stack.store.count_objects(account="k1") >= cached
            await wait_cache_equal(stack, patience=30, watcher=back)
            assert stack.kube.requests.count("list") == lists_before, stack.kube.requests.snapshot()
            assert relisted_kinds(back) == []

            # Gone for longer than the grace: the account and its objects are removed.
            await back_task.stop()
            await wait_until(orphaned)
            with trio.fail_after(6):

                async def removed() -> bool:
                    # The registry forgets it first, then the store drops its objects.
                    return (
                        stack.server.state.accounts.get("k1") is None
                        and await stack.store.count_objects(account="k1") == 0
                    )

                await wait_until(removed)
            code, _ = await _account_json(stack, "k1")
            assert code == 404


async def test_an_operator_disconnect_moves_the_account_to_the_standby(tmp_path: Path) -> None:
    """POST /armory/agent/{id}/disconnect ends the primary's session: the standby takes over
    and the disconnected agent, reconnecting, queues up behind it as STANDBY."""
    sim = kubesim.Cluster()
    _seed(sim)
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim) as stack:
            await wait_cache_equal(stack, patience=30)
            second, _ = await stack.start_agent("agent-b")

            async def standing_by() -> bool:
                return _role(stack, "agent-b") == "STANDBY"

            await wait_until(standing_by)
            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base) as client:
                response = await client.post("/armory/agent/agent-a/disconnect")
                assert response.status_code == 200, response.text
                missing = await client.post("/armory/agent/nobody/disconnect")
                assert missing.status_code == 404

            async def swapped() -> bool:
                return (
                    _role(stack, "agent-b") == "PRIMARY"
                    and _role(stack, "agent-a") == "STANDBY"
                    and stack.agent.link.status.roles.get("k1") == "STANDBY"
                    and second.link.status.roles.get("k1") == "PRIMARY"
                )

            await wait_until(swapped)
            assert stack.agent.link.status.disconnections == 1
            sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "after-the-swap", "namespace": "default"},
                }
            )
            await wait_cache_equal(stack, patience=30, watcher=second)


async def test_the_agent_learns_why_an_operator_ended_its_session(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_stack(tmp_path) as stack:

            async def primary() -> bool:
                return _role(stack, "agent-a") == "PRIMARY"

            await wait_until(primary)
            assert await stack.server.state.sessions.disconnect("agent-a") == 1

            async def dropped() -> bool:
                return stack.agent.link.status.disconnections == 1

            await wait_until(dropped)
            last_error = stack.agent.link.status.last_error
            assert "UNAVAILABLE" in last_error, last_error
            assert "disconnected by an operator" in last_error, last_error
