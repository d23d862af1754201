"""The agent's own /metrics endpoint, read over HTTP while the stack runs: the budget wait
counter counts what really happened (issue 12: it stayed 0)."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

import kubesim

from .harness import Stack, open_stack, stored_objects, wait_until

NAMESPACE = "burst"


async def _scrape(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the agent's /metrics: (name, sorted labels) -> value."""
    port = stack.agent.metrics_port
    assert port is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


async def _pods_stored(stack: Stack, count: int, namespace: str = NAMESPACE) -> bool:
    objects = await stored_objects(stack, "k1")
    return sum(1 for key in objects if key[1] == "Pod" and key[2] == namespace) == count


async def test_budget_waits_rise_when_a_burst_meets_a_tiny_budget(tmp_path: Path) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False, watch_history=10_000))
    accounts = [{"name": "k1", "kubeConfigFile": str(tmp_path / "kubeconfig"), "kinds": ["Pod"]}]
    with trio.fail_after(60):
        async with open_stack(
            tmp_path, sim=sim, accounts=accounts, budget={"bytes": "64Ki"}
        ) as stack:
            await wait_until(lambda: _synced(stack))
            before = (await _scrape(stack))[("kubesvc_budget_waits_total", ())]
            # ~300 pods of ~4.4 KB: twenty times the budget, so the reflector must wait for
            # the server's acks to free room again and again.
            kubesim.load_pods(sim, 300, namespaces=[NAMESPACE])
            await wait_until(lambda: _pods_stored(stack, 300))
            metrics = await _scrape(stack)
    waits = metrics[("kubesvc_budget_waits_total", ())]
    assert before == 0
    assert waits > 0
    assert metrics[("kubesvc_budget_capacity_bytes", ())] == 64 * 1024
    assert metrics[("kubesvc_budget_high_water_bytes", ())] <= 64 * 1024


async def _synced(stack: Stack) -> bool:
    return all(
        state.watch is not None and state.watch.synced
        for state in stack.agent.status.accounts.values()
    ) and bool(stack.agent.status.accounts)
