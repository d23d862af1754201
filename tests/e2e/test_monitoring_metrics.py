"""The dashboard and the alerts (manifests/overlays/monitoring) read only metrics the running
agent and server export, with the labels they group and match on.

The real parts run as the e2e tests run them: kubesim over TLS, the server, the agent. Two
accounts sync (one of them may not list ConfigMaps, so a refused kind shows), one operation
runs through the REST API as Orca sends it, and then both /metrics endpoints are scraped.
Every metric name in the dashboard's and the rules' PromQL (taken from the parsed queries)
must have samples in one of them; every label a query matches on or groups by must be on
the metric it applies to (or be one Prometheus adds from the target).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

import kubesim

from .._monitoring import PROMETHEUS_SERIES, TARGET_LABELS, all_queries, references
from ..agent.operations_harness import workload
from .harness import Stack, open_orca, wait_until

Exported = dict[str, set[str]]  # sample name -> the label names its samples carry
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def _scrape(port: int | None) -> Samples:
    assert port is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _ready(stack: Stack) -> bool:
    accounts = stack.agent.accounts.accounts
    if set(accounts) != {"k1", "limited"}:
        return False
    limited = accounts["limited"].watch
    k1 = accounts["k1"].watch
    return (
        k1 is not None
        and k1.synced
        and limited is not None
        and any(
            r.target.kind.kind == "ConfigMap" and not r.available
            for r in limited.reflectors.values()
        )
    )


async def test_the_dashboard_and_the_alerts_read_only_what_the_processes_export(
    tmp_path: Path,
) -> None:
    with trio.fail_after(90):
        async with open_orca(tmp_path, kube_tls=True) as (stack, orca):
            stack.kube.add_user("limited", grants={"*": kubesim.READ_VERBS, "configmaps": ()})
            limited = tmp_path / "limited.kubeconfig"
            stack.kube.kubeconfig(limited, user="limited")
            kinds = ["deployment", "replicaset", "pod", "configmap", "namespace"]
            stack.write_config(
                [
                    {"name": "k1", "kubeConfigFile": str(stack.kubeconfig), "kinds": kinds},
                    {"name": "limited", "kubeConfigFile": str(limited), "kinds": kinds},
                ]
            )
            await wait_until(lambda: _ready(stack), what="k1 synced, ConfigMaps refused to limited")
            manifest = workload("Deployment", "web", image="web:1", namespace="default")
            task = await orca.run("deployManifest", {"account": "k1", "manifests": [manifest]})
            assert task["status"]["completed"], task
            assert not task["status"]["failed"], task
            agent = await _scrape(stack.agent.metrics_port)
            server = await _scrape(stack.server.api_port)
    # What the run did shows in the new metrics (the rest of the test is about names).
    assert _value(server, "kubesvc_server_account_state", account="k1", state="ACTIVE") == 1
    assert _value(server, "kubesvc_server_operations_total", account="k1", outcome="succeeded")
    assert _value(server, "kubesvc_server_operations_total", account="k1", outcome="no_agent") == 0
    assert _value(server, "kubesvc_server_operation_duration_seconds_count", type="deployManifest")
    assert _value(agent, "kubesvc_ack_latency_seconds_count")
    unavailable = {"account": "limited", "kind": "ConfigMap", "group": "core", "code": "403"}
    assert _value(agent, "kubesvc_watch_unavailable", **unavailable) == 1
    sessions = [(k, v) for k, v in server.items() if k[0] == "kubesvc_server_agent_sessions"]
    assert [dict(k[1])["agent_id"] for k, v in sessions if v >= 1] == ["agent-a"]

    exported: Exported = {}
    for name, labels in (*agent, *server):
        exported.setdefault(name, set()).update(key for key, _ in labels)
    assert not PROMETHEUS_SERIES & set(exported)  # Prometheus' own names are not ours

    found = references(all_queries())
    assert len(found.metrics) >= 25
    missing = {
        name: where[0]
        for name, where in found.metrics.items()
        if name not in exported and name not in PROMETHEUS_SERIES
    }
    assert missing == {}, "referenced but not exported (name: first use)"
    for (metric, label), uses in found.matcher_labels.items():
        if metric in PROMETHEUS_SERIES:
            continue
        assert label in exported[metric] | TARGET_LABELS, f"{uses[0]}: {metric} has no {label}"
    for query, grouped, metrics in found.grouped:
        available = set(TARGET_LABELS).union(*(exported.get(m, set()) for m in metrics))
        assert grouped <= available, f"{query}: {sorted(grouped - available)} on none of {metrics}"
