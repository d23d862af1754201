"""Artifact binding through the real deploy operation against kubesim over TLS: the manifests
a deploy creates bind into each other (issue 15, defect 2), and kubesim's kubelet-lite shows
what an unbound reference costs (pods held in CreateContainerConfigError)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent.operations_harness import OpsBench, assert_ok, deployment, open_ops_bench


def _config(kind: str, name: str, namespace: str | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "data": data}


def _web(replicas: int = 2, **container: Any) -> dict[str, Any]:
    """Deployment ``web`` whose one container has ``container``'s fields added."""
    obj = deployment("web", replicas=replicas)
    obj["spec"]["template"]["spec"]["containers"][0].update(container)
    return obj


def _pods(bench: OpsBench, namespace: str = "default") -> list[dict[str, Any]]:
    return [
        p
        for p in bench.sim.list("", "v1", "pods", namespace)
        if p["metadata"]["name"].startswith("web-")
    ]


def _container(bench: OpsBench) -> dict[str, Any]:
    live = bench.sim.get("apps", "v1", "deployments", "default", "web")
    container: dict[str, Any] = live["spec"]["template"]["spec"]["containers"][0]
    return container


_DEPLOY = {"namespace": "default", "moniker": {"app": "web"}}


async def test_a_versioned_config_map_is_bound_into_its_deployment_and_pods_start(
    tmp_path: Path,
) -> None:
    manifests = [
        _config("ConfigMap", "web-config", A="1"),
        _web(envFrom=[{"configMapRef": {"name": "web-config"}}]),
    ]
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            ran = await bench.run("deployManifest", {**_DEPLOY, "manifests": manifests})
            container = _container(bench)
            pods = _pods(bench)
            status = bench.sim.get("apps", "v1", "deployments", "default", "web")["status"]
    assert_ok(ran)
    assert bench.server.url.startswith("https://")
    assert container["envFrom"] == [{"configMapRef": {"name": "web-config-v000"}}]
    assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]
    assert status["availableReplicas"] == 2
    config_artifact = {
        "type": "kubernetes/configMap",
        "customKind": False,
        "name": "web-config",
        "version": "v000",
        "location": "default",
        "reference": "web-config-v000",
        "metadata": {"account": "k1"},
    }
    assert ran.result["boundArtifacts"] == [config_artifact]
    assert ran.result["createdArtifacts"] == [
        config_artifact,
        {
            "type": "kubernetes/deployment",
            "customKind": False,
            "name": "web",
            "version": "",
            "location": "default",
            "reference": "web",
            "metadata": {"account": "k1"},
        },
    ]


async def test_a_config_map_of_another_namespace_is_not_bound_and_its_pods_never_start(
    tmp_path: Path,
) -> None:
    # The control for the test above: the same deploy, the ConfigMap elsewhere. Nothing
    # binds, and kubesim's kubelet-lite holds the pods back as a real kubelet would.
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}},
        _config("ConfigMap", "web-config", "other", A="1"),
        _web(envFrom=[{"configMapRef": {"name": "web-config"}}]),
    ]
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            ran = await bench.run("deployManifest", {**_DEPLOY, "manifests": manifests})
            container = _container(bench)
            pods = _pods(bench)
    assert_ok(ran)
    assert ran.result["manifestNamesByNamespace"]["other"] == ["configMap web-config-v000"]
    assert container["envFrom"] == [{"configMapRef": {"name": "web-config"}}]
    assert ran.result["boundArtifacts"] == []
    assert [p["status"]["phase"] for p in pods] == ["Pending", "Pending"]
    waiting = [c["state"]["waiting"] for p in pods for c in p["status"]["containerStatuses"]]
    assert {w["reason"] for w in waiting} == {"CreateContainerConfigError"}
    assert {w["message"] for w in waiting} == {'configmap "web-config" not found'}


async def test_a_versioned_secret_is_bound_everywhere_and_rebound_to_its_next_version(
    tmp_path: Path,
) -> None:
    volumes = [
        {"name": "tls", "secret": {"secretName": "web-secret"}},
        {"name": "all", "projected": {"sources": [{"secret": {"name": "web-secret"}}]}},
    ]
    key_ref = {"secretKeyRef": {"name": "web-secret", "key": "password"}}
    web = _web(env=[{"name": "PASSWORD", "valueFrom": key_ref}])
    web["spec"]["template"]["spec"]["volumes"] = volumes
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            first = await bench.run(
                "deployManifest",
                {**_DEPLOY, "manifests": [_config("Secret", "web-secret", password="YQ=="), web]},
            )
            second = await bench.run(
                "deployManifest",
                {**_DEPLOY, "manifests": [_config("Secret", "web-secret", password="Yg=="), web]},
            )
            live = bench.sim.get("apps", "v1", "deployments", "default", "web")
            pods = _pods(bench)
    assert_ok(first, second)
    assert first.result["boundArtifacts"][0]["reference"] == "web-secret-v000"
    assert second.result["boundArtifacts"][0]["reference"] == "web-secret-v001"
    spec = live["spec"]["template"]["spec"]
    env = spec["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]
    assert env == {"name": "web-secret-v001", "key": "password"}
    assert spec["volumes"][0]["secret"]["secretName"] == "web-secret-v001"
    assert spec["volumes"][1]["projected"]["sources"][0]["secret"]["name"] == "web-secret-v001"
    assert {p["status"]["phase"] for p in pods} == {"Running"}


async def test_an_unversioned_manifest_binds_too_and_an_hpa_follows_a_versioned_deployment(
    tmp_path: Path,
) -> None:
    config = _config("ConfigMap", "plain", A="1")
    config["metadata"]["annotations"] = {"strategy.spinnaker.io/versioned": "false"}
    web = _web(envFrom=[{"configMapRef": {"name": "plain"}}])
    web["metadata"]["annotations"] = {"strategy.spinnaker.io/versioned": "true"}
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 3,
        },
    }
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            ran = await bench.run("deployManifest", {**_DEPLOY, "manifests": [hpa, web, config]})
            target = bench.sim.get(
                "autoscaling", "v2", "horizontalpodautoscalers", "default", "web"
            )["spec"]["scaleTargetRef"]
    assert_ok(ran)
    assert target["name"] == "web-v000"
    # Clouddriver reports an unversioned manifest bound too (its reference is its name).
    assert [(a["type"], a["reference"]) for a in ran.result["boundArtifacts"]] == [
        ("kubernetes/configMap", "plain"),
        ("kubernetes/deployment", "web-v000"),
    ]


async def test_an_unbindable_required_artifact_fails_the_stage_before_anything_is_applied(
    tmp_path: Path,
) -> None:
    image = {"type": "docker/image", "name": "registry.io/api", "reference": "registry.io/api:2"}
    manifests = [_config("ConfigMap", "web-config", A="1"), _web(image="registry.io/other:1")]
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            ran = await bench.run(
                "deployManifest", {**_DEPLOY, "manifests": manifests, "requiredArtifacts": [image]}
            )
            configs = bench.sim.list("", "v1", "configmaps", "default")
            deployments = bench.sim.list("apps", "v1", "deployments", "default")
    assert not ran.ok
    assert ran.answer.error_code == "Invalid"
    assert "registry.io/api:2" in ran.answer.error_message
    assert [c["metadata"]["name"] for c in configs if c["metadata"]["name"].startswith("web")] == []
    assert deployments == []


async def test_binding_disabled_skips_stage_artifacts_but_not_the_deploys_own(
    tmp_path: Path,
) -> None:
    image = {"type": "docker/image", "name": "nginx", "reference": "nginx:9"}
    unbindable = {"type": "docker/image", "name": "absent", "reference": "absent:1"}
    manifests = [
        _config("ConfigMap", "web-config", A="1"),
        _web(envFrom=[{"configMapRef": {"name": "web-config"}}]),
    ]
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            ran = await bench.run(
                "deployManifest",
                {
                    **_DEPLOY,
                    "manifests": manifests,
                    "enableArtifactBinding": False,
                    "requiredArtifacts": [unbindable],
                    "optionalArtifacts": [image],
                },
            )
            container = _container(bench)
    assert_ok(ran)
    assert container["image"] == "nginx:1"
    assert container["envFrom"] == [{"configMapRef": {"name": "web-config-v000"}}]


async def test_a_patch_binds_config_artifacts_of_its_targets_namespace(tmp_path: Path) -> None:
    # Clouddriver's patchManifest binds with the target kind's replacers (not for json patches).
    config = {
        "type": "kubernetes/configMap",
        "name": "web-config",
        "location": "default",
        "reference": "web-config-v004",
    }
    elsewhere = {**config, "location": "other", "reference": "web-config-v009"}
    body = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "main", "envFrom": [{"configMapRef": {"name": "web-config"}}]}
                    ]
                }
            }
        }
    }
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, tls=True) as bench:
            await bench.run("deployManifest", {**_DEPLOY, "manifests": [_web()]})
            ran = await bench.run(
                "patchManifest",
                {
                    "namespace": "default",
                    "kind": "Deployment",
                    "name": "web",
                    "patchBody": body,
                    "options": {"mergeStrategy": "strategic"},
                    "allArtifacts": [elsewhere, config],
                },
            )
            container = _container(bench)
    assert_ok(ran)
    assert container["envFrom"] == [{"configMapRef": {"name": "web-config-v004"}}]
    assert ran.result["boundArtifacts"] == [config]
