"""Version reuse through the executor against kubesim: a versioned ReplicaSet never reuses (as
in Clouddriver, whose comparison never matches a pod template; a disabled or scaled-down old
version would serve nothing), a ConfigMap does, and a server-side-applied ConfigMap (no
last-applied annotation) is compared live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent.operations_harness import assert_ok, deployment, open_ops_bench, replica_set


async def test_a_replicaset_redeployed_with_old_content_is_a_new_version(tmp_path: Path) -> None:
    # v000 image A, v001 image B (Red/Black disables v000), redeploy A: reusing v000 would
    # answer a ReplicaSet without traffic, and Orca then disables v001.
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            moniker = {"app": "shop", "cluster": "replicaSet web"}
            d = {"namespace": "default", "manifests": [replica_set()], "moniker": moniker}
            first = await bench.run("deployManifest", d)
            second = await bench.run(
                "deployManifest", {**d, "manifests": [replica_set(image="nginx:2")]}
            )
            third = await bench.run("deployManifest", d)
            names = sorted(
                o["metadata"]["name"]
                for o in bench.sim.list("apps", "v1", "replicasets", "default")
            )
    assert_ok(first, second, third)
    assert third.result["manifestNamesByNamespace"] == {"default": ["replicaSet web-v002"]}
    assert names == ["web-v000", "web-v001", "web-v002"]


async def test_an_identical_config_map_reuses_its_version(tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            d = {"namespace": "default", "moniker": {"app": "shop"}}
            first = await bench.run(
                "deployManifest", {**d, "manifests": [{**cm, "data": {"a": "1"}}]}
            )
            second = await bench.run(
                "deployManifest", {**d, "manifests": [{**cm, "data": {"a": "2"}}]}
            )
            third = await bench.run(
                "deployManifest", {**d, "manifests": [{**cm, "data": {"a": "1"}}]}
            )
    assert_ok(first, second, third)
    assert third.result["manifestNamesByNamespace"] == {"default": ["configMap cfg-v000"]}
    assert third.result["createdArtifacts"][0]["reference"] == "cfg-v000"


async def test_server_side_applied_config_map_is_compared_live(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            cm = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "cfg",
                    "annotations": {"strategy.spinnaker.io/server-side-apply": "true"},
                },
                "data": {"a": "1"},
            }
            d = {"namespace": "default", "manifests": [cm], "moniker": {"app": "shop"}}
            first = await bench.run("deployManifest", d)
            second = await bench.run("deployManifest", d)
            names = sorted(
                o["metadata"]["name"] for o in bench.sim.list("", "v1", "configmaps", "default")
            )
    assert_ok(first, second)
    assert second.result["manifestNamesByNamespace"] == {"default": ["configMap cfg-v000"]}
    assert names == ["cfg-v000"]


def _hpa(target_kind: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": target_kind, "name": target},
            "minReplicas": 1,
            "maxReplicas": 3,
        },
    }


async def test_an_hpa_deploys_after_and_targets_the_versioned_replicaset(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            d = {"namespace": "default", "moniker": {"app": "shop"}}
            ran = await bench.run(
                "deployManifest", {**d, "manifests": [_hpa("ReplicaSet", "web"), replica_set()]}
            )
            hpa = bench.sim.get("autoscaling", "v2", "horizontalpodautoscalers", "default", "web")
    assert_ok(ran)
    assert ran.result["manifestNamesByNamespace"] == {
        "default": ["replicaSet web-v000", "horizontalPodAutoscaler web"]
    }
    assert hpa["spec"]["scaleTargetRef"]["name"] == "web-v000"


async def test_upstream_config_map_artifacts_bind_by_name_namespace_account(
    tmp_path: Path,
) -> None:
    pod = deployment()
    pod["spec"]["template"]["spec"]["volumes"] = [
        {"name": "a", "configMap": {"name": "settings"}},
        {"name": "b", "secret": {"secretName": "creds"}},
    ]
    settings = {
        "type": "kubernetes/configMap",
        "name": "settings",
        "location": "default",
        "reference": "settings-v007",
        "metadata": {"account": "k1"},
    }
    elsewhere = {
        "type": "kubernetes/secret",
        "name": "creds",
        "location": "other",
        "reference": "creds-v002",
    }
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            d = {"namespace": "default", "moniker": {"app": "shop"}, "manifests": [pod]}
            ran = await bench.run(
                "deployManifest",
                {**d, "requiredArtifacts": [settings], "optionalArtifacts": [elsewhere]},
            )
            live = bench.sim.get("apps", "v1", "deployments", "default", "api")
            refused = await bench.run("deployManifest", {**d, "requiredArtifacts": [elsewhere]})
    assert_ok(ran)
    volumes = live["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["configMap"]["name"] == "settings-v007"
    assert volumes[1]["secret"]["secretName"] == "creds"  # another namespace's: not bound
    assert ran.result["boundArtifacts"] == [settings]
    assert not refused.ok
    assert "could not be bound" in str(refused.answer)
