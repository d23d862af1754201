"""Client-side apply through deployManifest keeps what others added, as ``kubectl apply``
does: the strategic merge patch from the cluster's OpenAPI, and its fallbacks."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import trio

import kubesim
from agent import AccountConfig, open_kube_client
from agent.operations._kinds import KindResolver
from agent.operations._openapi import PatchSchemas
from tests.agent.operations_harness import OpsBench, assert_ok, deployment, open_ops_bench

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
DEPLOYMENTS = "deployments.apps"


async def _deploy(bench: OpsBench, manifest: dict[str, Any]) -> None:
    ran = await bench.run(
        "deployManifest",
        {"namespace": "default", "manifests": [manifest], "moniker": {"app": "api"}},
    )
    assert_ok(ran)


async def _edit(bench: OpsBench, patch: dict[str, Any]) -> None:
    """Someone else's edit of Deployment api, sent as kubectl sends its own."""
    reply = await bench.client.request(
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/api",
        headers={"Content-Type": STRATEGIC},
        content=json.dumps(patch).encode(),
    )
    reply.raise_for_status()


def _pod_spec(bench: OpsBench) -> dict[str, Any]:
    live = bench.sim.get("apps", "v1", "deployments", "default", "api")
    spec: dict[str, Any] = live["spec"]["template"]["spec"]
    return spec


def _last_patch_type(bench: OpsBench) -> str:
    return bench.server.writes.recent("patch", DEPLOYMENTS)[-1].content_type


SET_ENV = {  # what `kubectl set env deployment/api FOREIGN=yes` sends
    "spec": {
        "template": {
            "spec": {"containers": [{"name": "main", "env": [{"name": "FOREIGN", "value": "yes"}]}]}
        }
    }
}
INJECTED = {  # what a sidecar injector's mutation amounts to
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {"name": "istio-proxy", "image": "istio/proxyv2:1.22"},
                    {
                        "name": "main",
                        "volumeMounts": [{"name": "istio-certs", "mountPath": "/etc/certs"}],
                    },
                ],
                "volumes": [{"name": "istio-certs", "emptyDir": {}}],
            }
        }
    }
}


def _with_env(image: str) -> dict[str, Any]:
    manifest = deployment(image=image)
    manifest["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    return manifest


async def test_a_kubectl_set_env_entry_survives_a_redeploy(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            await _deploy(bench, _with_env("nginx:1"))
            await _edit(bench, SET_ENV)
            await _deploy(bench, _with_env("nginx:2"))
            container = _pod_spec(bench)["containers"][0]
            patch_type = _last_patch_type(bench)
    assert container["image"] == "nginx:2"
    assert container["env"] == [{"name": "A", "value": "1"}, {"name": "FOREIGN", "value": "yes"}]
    assert patch_type == STRATEGIC


async def test_an_injected_sidecar_and_its_volume_survive_a_redeploy(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            await _deploy(bench, deployment(image="nginx:1"))
            await _edit(bench, INJECTED)
            injected = [c["name"] for c in _pod_spec(bench)["containers"]]
            await _deploy(bench, deployment(image="nginx:2"))
            pod = _pod_spec(bench)
    containers = {c["name"]: c for c in pod["containers"]}
    assert [c["name"] for c in pod["containers"]] == injected  # and in the same order
    assert containers["istio-proxy"]["image"] == "istio/proxyv2:1.22"
    assert containers["main"]["image"] == "nginx:2"
    assert containers["main"]["volumeMounts"] == [
        {"name": "istio-certs", "mountPath": "/etc/certs"}
    ]
    assert pod["volumes"] == [{"name": "istio-certs", "emptyDir": {}}]


async def test_a_cluster_with_openapi_v2_only_still_merges_by_key(tmp_path: Path) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(openapi=("v2",)))
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True, sim=sim) as bench:
            await _deploy(bench, _with_env("nginx:1"))
            await _edit(bench, SET_ENV)
            await _deploy(bench, _with_env("nginx:2"))
            env = _pod_spec(bench)["containers"][0]["env"]
            patch_type = _last_patch_type(bench)
    assert patch_type == STRATEGIC
    assert {"name": "FOREIGN", "value": "yes"} in env


async def test_without_openapi_a_merge_patch_is_sent_and_that_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.operations")
    sim = kubesim.Cluster(kubesim.SimConfig(openapi=()))
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True, sim=sim) as bench:
            await _deploy(bench, _with_env("nginx:1"))
            await _edit(bench, SET_ENV)
            await _deploy(bench, _with_env("nginx:2"))
            await _deploy(bench, _with_env("nginx:3"))
            env = _pod_spec(bench)["containers"][0]["env"]
            patch_type = _last_patch_type(bench)
            asked = bench.server.requests.count("get", "openapi")
    said = [r for r in caplog.records if "publishes no OpenAPI" in r.getMessage()]
    assert len(said) == 1
    assert "k1" in said[0].getMessage()
    assert patch_type == MERGE
    # The fallback is a JSON merge patch: the list is replaced, the foreign entry lost.
    assert env == [{"name": "A", "value": "1"}]
    assert asked == 2  # /openapi/v3 and /openapi/v2, once for the server's version


async def test_openapi_is_read_once_per_server_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.operations")
    sim = kubesim.Cluster()
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            account = AccountConfig("k1", kube_config_file=str(server.kubeconfig(tmp_path / "kc")))
            async with open_kube_client(account, environ={}) as client:
                kinds = KindResolver(client)
                deployments = await kinds.resolve("Deployment")
                services = await kinds.resolve("Service")
                # recheck_seconds=0: /version is read on every call, as after each 5 minutes.
                schemas = PatchSchemas(client, "k1", recheck_seconds=0)
                first = await schemas.for_kind(deployments)
                again = await schemas.for_kind(deployments)
                await schemas.for_kind(services)
                asked = server.requests.count("get", "openapi")
                sim.config.version["gitVersion"] = "v1.32.1-kubesim"
                after_upgrade = await schemas.for_kind(deployments)
                asked_after = server.requests.count("get", "openapi")
    assert first is not None
    assert first.kind.strategic
    assert again is not None
    assert again.schema is first.schema
    assert asked == 3  # the index, apps/v1, api/v1
    assert after_upgrade is not None
    assert after_upgrade.schema is not first.schema
    assert asked_after == 5
    assert any("is now v1.32.1-kubesim" in r.getMessage() for r in caplog.records)


async def test_a_failed_openapi_read_falls_back_and_is_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.operations")
    sim = kubesim.Cluster()
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            account = AccountConfig("k1", kube_config_file=str(server.kubeconfig(tmp_path / "kc")))
            async with open_kube_client(account, environ={}) as client:
                deployments = await KindResolver(client).resolve("Deployment")
                schemas = PatchSchemas(client, "k1", retry_seconds=0)
                server.faults.fail_next(1, status=503, resource="openapi")
                failed = await schemas.for_kind(deployments)
                retried = await schemas.for_kind(deployments)
    assert failed is None
    assert any(
        r.levelno == logging.WARNING and "could not read the cluster's OpenAPI" in r.getMessage()
        for r in caplog.records
    )
    assert retried is not None
    assert retried.kind.strategic
