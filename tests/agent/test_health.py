"""Health, readiness, admin views and Prometheus metrics over real HTTP on loopback."""

from __future__ import annotations

import ssl
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from agent import AccountConfig, ClusterIdentity, ConfigError
from agent._accounts import AccountState
from agent._health import health_app, metrics_app, serve_http
from agent._metrics import metrics_registry
from agent._status import AgentStatus
from agent.config._schema import ServerSslConfig
from agent.link._link import LinkStatus
from agent.watch import ReflectorState
from agent.watch._account import AccountWatchStatus
from agent.watch._discovery import KindInfo, WatchTarget
from budget import ByteBudget

from ._kube_edge import make_pki

PODS = KindInfo(group="", version="v1", kind="Pod", plural="pods", namespaced=True)
DEPLOYMENTS = KindInfo(
    group="apps", version="v1", kind="Deployment", plural="deployments", namespaced=True
)
SECRETS = KindInfo(group="", version="v1", kind="Secret", plural="secrets", namespaced=True)


def _status() -> tuple[AgentStatus, ByteBudget]:
    watch = AccountWatchStatus(account="prod", discovered=True)
    for kind, state in (
        (PODS, {"synced": True, "lists": 1, "watches": 2, "events": 10, "resource_version": "42"}),
        (DEPLOYMENTS, {"synced": False, "lists": 1}),
        (SECRETS, {"available": False, "reason": "403 Forbidden", "unavailable_code": 403}),
    ):
        target = WatchTarget(kind)
        watch.reflectors[target] = ReflectorState(target=target, **state)
    deployments = watch.reflectors[WatchTarget(DEPLOYMENTS)]
    deployments.retries = {"network": 3, "throttled": 1}
    deployments.backoff_seconds = 2.5  # waiting now
    prod = AccountState(
        config=AccountConfig("prod"),
        identity=ClusterIdentity("10.0.0.1:6443", "ab" * 32, {"gitVersion": "v1.31.0"}),
        watch=watch,
    )
    link = LinkStatus(connected=True, disconnections=2, roles={"prod": "PRIMARY"})
    link.events_by_kind[("Pod", "v1")] = (7, 7000)
    link.events_by_kind[("Deployment", "apps/v1")] = (3, 900)
    budget = ByteBudget(capacity=1 << 20)
    budget.reserve_nowait(1000)
    status = AgentStatus(link=link, accounts={"prod": prod}, budget=budget.statistics)
    op = status.operation_started("op-1", "prod", "deployManifest")
    op.ok, op.finished_at = True, op.started_at + 1
    status.operation_started("op-2", "prod", "scaleManifest")
    return status, budget


def test_readiness_waits_for_the_initial_sync_of_primary_accounts() -> None:
    status, _ = _status()
    ok, why = status.ready()
    assert not ok
    assert why == "initial sync not done for prod"
    status.link.roles["prod"] = "STANDBY"
    assert status.ready() == (True, "")
    status.link.connected = False
    status.link.last_error = "connection refused"
    assert status.ready() == (False, "not connected to the server: connection refused")


async def test_health_and_admin_views() -> None:
    status, _ = _status()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_http, health_app(status), "127.0.0.1", 0))
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                health = await client.get("/health")
                ready = await client.get("/ready")
                accounts = (await client.get("/accounts")).json()
                watches = (await client.get("/watches")).json()
                operations = (await client.get("/operations")).json()
                missing = await client.get("/nope")
                post = await client.post("/health")
            nursery.cancel_scope.cancel()
    assert health.status_code == 200
    assert health.json() == {"status": "UP"}
    assert ready.status_code == 503
    assert ready.json()["reason"] == "initial sync not done for prod"
    assert accounts == [
        {
            "name": "prod",
            "role": "PRIMARY",
            "kubeHost": "10.0.0.1:6443",
            "certFingerprint": "ab" * 32,
            "kubeVersion": "v1.31.0",
            "error": "",
            "discovered": True,
            "discoveryError": "",
            "synced": False,
            "watches": 3,
            "unavailableKinds": ["Secret"],
            # Pod synced and Secret unavailable are done; Deployment is still listing.
            "initialSync": {
                "done": False,
                "kindsDone": 2,
                "kindsTotal": 3,
                "objects": 0,
                "unavailableKinds": 1,
                "seconds": 0.0,
            },
        }
    ]
    assert [(w["kind"], w["synced"], w["available"]) for w in watches] == [
        ("Deployment", False, True),
        ("Pod", True, True),
        ("Secret", False, False),
    ]
    assert watches[1]["resourceVersion"] == "42"
    assert (watches[0]["retries"], watches[0]["backoffSeconds"]) == (4, 2.5)
    assert [(o["id"], o["state"]) for o in operations] == [
        ("op-2", "running"),
        ("op-1", "succeeded"),
    ]
    assert missing.status_code == 404
    assert post.status_code == 405


async def test_metrics_carry_the_armory_names_and_the_budget() -> None:
    status, budget = _status()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            app = metrics_app(metrics_registry(status))
            port = await nursery.start(partial(serve_http, app, "127.0.0.1", 0))
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                text = (await client.get("/metrics")).text
                same = await client.get("/prometheus_metrics")
            nursery.cancel_scope.cancel()
    assert same.status_code == 200
    assert same.headers["content-type"].startswith("text/plain")
    lines = set(text.splitlines())
    for expected in (
        "kubesvc_connection_count 1.0",
        "kubesvc_disconnection_total 2.0",
        'kubesvc_events_sent_total{event_group="core",event_kind="Pod"} 7.0',
        'kubesvc_events_sent_total{event_group="apps",event_kind="Deployment"} 3.0',
        'kubesvc_events_bytes_sent_total{event_group="core",event_kind="Pod"} 7000.0',
        'kubesvc_resource_agent_total{account="prod"} 3.0',
        'kubesvc_kubernetes_requests_total{account="prod",verb="watch"} 2.0',
        'kubesvc_watches{account="prod",state="unavailable"} 1.0',
        'kubesvc_watches{account="prod",state="synced"} 1.0',
        "kubesvc_budget_capacity_bytes 1.048576e+06",
        "kubesvc_budget_in_use_bytes 1000.0",
        "kubesvc_budget_high_water_bytes 1000.0",
        "kubesvc_budget_waits_total 0.0",
        'kubesvc_watch_retries_total{account="prod",group="apps",kind="Deployment",'
        'reason="network"} 3.0',
        'kubesvc_watch_retries_total{account="prod",group="apps",kind="Deployment",'
        'reason="throttled"} 1.0',
        'kubesvc_watch_backoff_seconds{account="prod",group="apps",kind="Deployment"} 2.5',
        'kubesvc_watch_backoff_seconds{account="prod",group="core",kind="Pod"} 0.0',
    ):
        assert expected in lines, expected
    assert any(line.startswith("process_") for line in lines)
    budget.release(1000)


async def test_two_agents_in_one_process_have_separate_registries() -> None:
    first, _ = _status()
    second, _ = _status()
    second.link.disconnections = 9
    one = metrics_registry(first, process=False)
    two = metrics_registry(second, process=False)
    assert one.get_sample_value("kubesvc_disconnection_total") == 2
    assert two.get_sample_value("kubesvc_disconnection_total") == 9


async def test_relists_refused_kinds_ack_latency_and_budget_wait_time() -> None:
    """The metrics the dashboard and alerts need beyond Armory's (docs/monitoring.md)."""
    status, budget = _status()
    pods = status.accounts["prod"].watch.reflectors[WatchTarget(PODS)]  # type: ignore[union-attr]
    pods.relists = 4
    for seconds in (0.002, 0.002, 0.3, 45.0):
        status.link.ack_latency.observe(seconds)
    registry = metrics_registry(status, process=False)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    kind = {"account": "prod", "group": "core"}
    assert value("kubesvc_watch_relists_total", **kind, kind="Pod") == 4
    assert value("kubesvc_watch_relists_total", **kind, kind="Secret") == 0
    assert value("kubesvc_watch_unavailable", **kind, kind="Secret", code="403") == 1
    assert value("kubesvc_watch_unavailable", **kind, kind="Pod", code="0") is None
    assert value("kubesvc_ack_latency_seconds_bucket", le="0.001") == 0
    assert value("kubesvc_ack_latency_seconds_bucket", le="0.0025") == 2
    assert value("kubesvc_ack_latency_seconds_bucket", le="0.5") == 3
    assert value("kubesvc_ack_latency_seconds_bucket", le="30.0") == 3
    assert value("kubesvc_ack_latency_seconds_bucket", le="+Inf") == 4
    assert value("kubesvc_ack_latency_seconds_count") == 4
    assert value("kubesvc_ack_latency_seconds_sum") == pytest.approx(45.304)
    assert value("kubesvc_budget_wait_seconds_total") == 0
    budget.release(1000)


async def test_the_health_port_serves_tls_when_server_ssl_is_enabled(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    ssl_config = ServerSslConfig(
        enabled=True,
        cert_file=str(pki.write("s.crt", pki.server_cert_pem)),
        key_file=str(pki.write("s.key", pki.server_key_pem)),
    )
    status, _ = _status()
    context = ssl.create_default_context(cadata=pki.ca_pem.decode())
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                partial(serve_http, health_app(status), "127.0.0.1", 0, ssl=ssl_config)
            )
            async with httpx.AsyncClient(verify=context) as client:
                response = await client.get(f"https://127.0.0.1:{port}/health")
            nursery.cancel_scope.cancel()
    assert response.json() == {"status": "UP"}


async def test_enabled_tls_without_files_is_a_config_error() -> None:
    status, _ = _status()
    with trio.fail_after(5), pytest.raises(ConfigError, match="certFile and keyFile"):
        await serve_http(health_app(status), "127.0.0.1", 0, ssl=ServerSslConfig(enabled=True))
