"""A cluster behind a path (``https://host:port/clusters/17``, as Rancher-style proxies expose
clusters): the real agent syncs it, streams its changes and runs operations on it, every
request under the path, while another cluster of the same kubesim is served beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

import kubesim
from tests.agent.operations_harness import workload
from tests.e2e.harness import open_orca, stored_objects, wait_until


def _configmap(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"k": name},
    }


async def _op(http: httpx.AsyncClient, name: str, description: dict[str, Any]) -> dict[str, Any]:
    posted = await http.post(
        "/kubernetes/ops",
        json=[{name: {"credentials": "c17", "cloudProvider": "kubernetes", **description}}],
    )
    assert posted.status_code == 200, posted.text
    task_id = posted.json()["id"]
    task: dict[str, Any] = {}

    async def completed() -> bool:
        nonlocal task
        task = (await http.get(f"/task/{task_id}")).json()
        return bool(task["status"]["completed"])

    await wait_until(completed, what=f"task {task_id} completed")
    assert not task["status"]["failed"], task["history"][-1]
    return task


async def test_an_account_behind_a_path_syncs_streams_and_runs_operations(
    tmp_path: Path,
) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path, http_timeout=20) as (stack, orca):
            member = stack.kube.add_cluster(
                "17", kubesim.Cluster(kubesim.SimConfig(namespaces=("team",)))
            )
            member.cluster.create(_configmap("only-in-17", "team"))
            kubeconfig = member.kubeconfig(tmp_path / "kubeconfig-17")
            stack.write_config(
                [
                    {"name": "k1", "kubeConfigFile": str(stack.kubeconfig)},
                    {"name": "c17", "kubeConfigFile": str(kubeconfig)},
                ]
            )

            async def synced() -> bool:
                objects = await stored_objects(stack, "c17")
                return ("v1", "ConfigMap", "team", "only-in-17") in objects and (
                    "v1",
                    "Namespace",
                    "",
                    "team",
                ) in objects

            await wait_until(synced, what="cluster 17 synced")
            objects = await stored_objects(stack, "c17")
            namespaces = {key[3] for key in objects if key[1] == "Namespace"}
            assert namespaces == {"team"}  # cluster 17's, not the server's own cluster's
            accounts = (await orca.http.get("/armory/accounts")).json()
            hosts = {a["name"]: a.get("kubeHost") for a in accounts}
            assert hosts["c17"] == member.url.removeprefix("https://")

            member.cluster.create(_configmap("late", "team"))

            async def streamed() -> bool:
                objects = await stored_objects(stack, "c17")
                return ("v1", "ConfigMap", "team", "late") in objects

            await wait_until(streamed, what="a change of cluster 17 streamed")

            deployment = workload("Deployment", "web", image="nginx:1", namespace="team")
            await _op(orca.http, "deployManifest", {"manifests": [deployment], "source": "text"})
            # Deployed again, changed: kubectl's client-side apply computes the patch from
            # the OpenAPI document of apps/v1, read from the cluster.
            changed = workload("Deployment", "web", image="nginx:2", namespace="team")
            await _op(orca.http, "deployManifest", {"manifests": [changed], "source": "text"})
            patched = member.cluster.get("apps", "v1", "deployments", "team", "web")
            containers = patched["spec"]["template"]["spec"]["containers"]
            assert [c["image"] for c in containers] == ["nginx:2"]
            # Every request went under the path: discovery, lists, watches, the operations
            # and the OpenAPI documents client-side apply reads.
            assert member.requests.count("watch", "configmaps") >= 1
            assert member.requests.count("patch", "deployments.apps") == 1
            assert member.requests.count("get", "openapi") >= 1
            assert stack.kube.requests.count("patch", "deployments.apps") == 0
            assert stack.sim.list("apps", "v1", "deployments") == []
