"""The agent's own /metrics endpoint, read over HTTP while the stack runs: budget waits and
watch retries count what really happened (issue 12: the budget wait counter stayed 0 and
retries were invisible)."""

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


async def test_watch_retries_and_their_delay_are_in_the_metrics(tmp_path: Path) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
    accounts = [{"name": "k1", "kubeConfigFile": str(tmp_path / "kubeconfig"), "kinds": ["Pod"]}]
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim, accounts=accounts, kube_tls=True) as stack:
            await wait_until(lambda: _synced(stack))
            labels = (("account", "k1"), ("group", "core"), ("kind", "Pod"))
            network = ("kubesvc_watch_retries_total", (*labels, ("reason", "network")))
            # Cut the link to the API server for 1.5 s: the watch breaks, the reflector
            # waits its first delay (about 1 s), and tries again until the link is back.
            stack.kube.cut(1.5)
            sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "after", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                }
            )
            waiting = 0.0

            async def stored_noting_the_delay() -> bool:
                nonlocal waiting
                if await _pods_stored(stack, 1, "default"):
                    return True
                metrics = await _scrape(stack)
                waiting = max(waiting, metrics.get(("kubesvc_watch_backoff_seconds", labels), 0))
                return False

            await wait_until(stored_noting_the_delay, interval=0.05, what="the pod 'after'")
            after = await _scrape(stack)
    # The delays of the policy (1 s, then 1.6 s, ±20 %) were visible while waited.
    assert 0.8 <= waiting <= 1.92
    assert after[network] >= 1
    assert after[("kubesvc_watch_backoff_seconds", labels)] == 0
