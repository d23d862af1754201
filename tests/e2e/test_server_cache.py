"""Issue 5 acceptance, end to end (kubesim + the real agent + the real server): the server's
cache equals kubesim object for object after the initial sync and after churn, and it holds
no Secret data."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import trio

import kubesim

from ..agent.operations_harness import workload
from .cache_check import secret_bodies, wait_cache_equal, watched_kinds
from .harness import open_stack, run_churn

SECRET_VALUE = "s3cr3t-e2e-cache-value"


def _seed(sim: kubesim.Cluster) -> None:
    kubesim.load_pods(sim, 60, namespaces=["team-a", "team-b"])
    for index in range(10):
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{index}", "namespace": "default"},
                "data": {"value": str(index)},
            }
        )
    sim.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": "db", "namespace": "default"},
            "data": {"password": base64.b64encode(SECRET_VALUE.encode()).decode()},
        }
    )
    sim.create(_deployment("web", replicas=2))


def _deployment(name: str, *, replicas: int) -> dict[str, Any]:
    return workload("Deployment", name, replicas=replicas, container="app", namespace="default")


async def _assert_no_secret_data(stack: Any) -> None:
    bodies = await secret_bodies(stack)
    assert bodies, "no Secret reached the cache at all"
    for body in bodies:
        assert "data" not in body, body["metadata"]["name"]
        assert "stringData" not in body, body["metadata"]["name"]
    raw = b"".join(
        [obj.body for obj in (await stack.store.query_objects(account="k1", limit=10_000)).objects]
    )
    assert SECRET_VALUE.encode() not in raw
    assert base64.b64encode(SECRET_VALUE.encode()) not in raw


async def test_cache_equals_kubesim_after_sync_and_after_churn(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    _seed(sim)
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim) as stack:
            await wait_cache_equal(stack, patience=30)
            kinds = watched_kinds(stack, "k1")
            for wanted in [
                ("v1", "Pod"),
                ("v1", "Secret"),
                ("apps/v1", "Deployment"),
                ("apps/v1", "ReplicaSet"),
                ("v1", "Namespace"),
            ]:
                assert wanted in kinds, f"the agent does not watch {wanted}"
            await _assert_no_secret_data(stack)

            churn = kubesim.Churn(
                sim,
                rate=200,
                seed=5,
                kinds=("configmaps", "secrets", "services", "pods", "deployments"),
            )
            stats = await run_churn(churn, 600)
            assert stats.created > 50, stats
            assert stats.updated > 50, stats
            assert stats.deleted > 10, stats
            await wait_cache_equal(stack, patience=30)
            await _assert_no_secret_data(stack)


async def test_cache_stays_exact_when_a_small_budget_makes_the_agent_coalesce(
    tmp_path: Path,
) -> None:
    """With a byte budget far below what sync and churn produce (60 Pods of ~4 KB alone are
    four times 64 KiB), the agent's channel coalesces changes
    of one object and the reflectors wait for room; the server must still end up exact."""
    sim = kubesim.Cluster()
    _seed(sim)
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim, budget={"bytes": "64Ki"}) as stack:
            await wait_cache_equal(stack, patience=30)
            churn = kubesim.Churn(
                sim,
                rate=600,
                seed=21,
                population=40,
                kinds=("configmaps", "pods", "deployments", "secrets"),
            )
            await run_churn(churn, 1500)
            assert churn.statistics().updated > 300, churn.statistics()
            await wait_cache_equal(stack, patience=40)
            await _assert_no_secret_data(stack)
            budget = stack.agent.budget.statistics()
            assert budget.high_water > budget.capacity // 2, budget  # the pressure was real


async def test_cache_exact_from_an_https_cluster_with_http2_watches(tmp_path: Path) -> None:
    """Over HTTPS the agent's watches share its own HTTP/2 connections, and the account's
    identity carries the API server certificate's fingerprint."""
    sim = kubesim.Cluster()
    _seed(sim)
    with trio.fail_after(90):
        async with open_stack(tmp_path, sim=sim, kube_tls=True) as stack:
            await wait_cache_equal(stack, patience=30)
            churn = kubesim.Churn(
                sim, rate=200, seed=8, kinds=("configmaps", "secrets", "pods", "deployments")
            )
            await run_churn(churn, 400)
            await wait_cache_equal(stack, patience=30)
            await _assert_no_secret_data(stack)
            record = stack.server.state.accounts.get("k1")
            assert record is not None
            assert len(record.cert_fingerprint) == 64, record  # sha256 hex of the serving cert
            state = stack.agent.accounts.accounts["k1"]
            assert state.client is not None
            assert state.client.watch_connections >= 1  # watches went over HTTP/2
