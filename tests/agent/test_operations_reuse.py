"""Version reuse through the executor against kubesim: a versioned ReplicaSet (its sequence
label is on the pod template, so it is content) and a server-side-applied ConfigMap (no
last-applied annotation: the live object is compared)."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.agent.operations_harness import assert_ok, open_ops_bench, replica_set


async def test_identical_replicaset_reuses_its_version(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            moniker = {"app": "shop", "cluster": "replicaSet web"}
            d = {"namespace": "default", "manifests": [replica_set()], "moniker": moniker}
            first = await bench.run("deployManifest", d)
            second = await bench.run("deployManifest", d)
            third = await bench.run(
                "deployManifest", {**d, "manifests": [replica_set(image="nginx:2")]}
            )
            names = sorted(
                o["metadata"]["name"]
                for o in bench.sim.list("apps", "v1", "replicasets", "default")
            )
    assert_ok(first, second, third)
    assert second.result["manifestNamesByNamespace"] == {"default": ["replicaSet web-v000"]}
    assert second.result["createdArtifacts"][0]["reference"] == "web-v000"
    assert third.result["manifestNamesByNamespace"] == {"default": ["replicaSet web-v001"]}
    assert names == ["web-v000", "web-v001"]


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
