"""Version reuse through the executor against kubesim: a versioned ReplicaSet never reuses (as
in Clouddriver, whose comparison never matches a pod template; a disabled or scaled-down old
version would serve nothing), a ConfigMap does, and a server-side-applied ConfigMap (no
last-applied annotation) is compared live."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.agent.operations_harness import assert_ok, open_ops_bench, replica_set


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
