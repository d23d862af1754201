"""Orca-style use, end to end: REST -> server -> agent -> kubesim -> back.

A client behaving like Orca drives deploy -> scale -> patch -> undo -> delete of one
Deployment to success, checking after each step the cluster (kubesim), the task and the
server's cache (/manifests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

import kubesim
from kubesim import ApiError

from ..agent.operations_harness import workload
from .harness import open_orca, wait_until


def deployment(image: str = "nginx:1") -> dict[str, Any]:
    return workload(
        "Deployment", "web", image=image, replicas=2, container="web", namespace="default"
    )


def live(sim: kubesim.Cluster) -> dict[str, Any] | None:
    try:
        return sim.get("apps", "v1", "deployments", "default", "web")
    except ApiError:
        return None


def image_of(obj: dict[str, Any] | None) -> str:
    assert obj is not None
    return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])


def assert_succeeded(task: dict[str, Any]) -> None:
    status = task["status"]
    assert status["failed"] is False, task["resultObjects"]
    assert status["completed"] is True
    assert status["retryable"] is False
    assert task["history"][0]["status"] == "Initializing Orchestration Task"
    assert task["history"][-1]["status"] == "Orchestration completed."


async def test_deploy_scale_patch_undo_delete_like_orca(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path) as (stack, orca):
            sim = stack.sim
            task = await orca.run(
                "deployManifest",
                {
                    "account": "k1",
                    "source": "text",
                    "manifests": [deployment()],
                    "moniker": {"app": "shop", "cluster": "deployment web"},
                    "skipExpressionEvaluation": "false",
                    "enableTraffic": "true",
                    "trafficManagement": {"enabled": False, "options": {"enableTraffic": False}},
                },
            )
            assert_succeeded(task)
            assert "Processing op: KubernetesDeployManifestOperation" in [
                h["status"] for h in task["history"]
            ]
            assert any(h["phase"] == "DEPLOY_KUBERNETES_MANIFEST" for h in task["history"])
            result = task["resultObjects"][0]
            assert result["manifestNamesByNamespace"] == {"default": ["deployment web"]}
            obj = live(sim)
            assert obj is not None
            assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "spinnaker"
            assert obj["metadata"]["annotations"]["moniker.spinnaker.io/application"] == "shop"
            stable = await orca.wait_stable("k1", "default", "deployment web")
            assert stable["manifest"]["metadata"]["uid"] == obj["metadata"]["uid"]

            scale = {"account": "k1", "manifestName": "deployment web", "location": "default"}
            task = await orca.run("scaleManifest", {**scale, "replicas": "3"})
            assert_succeeded(task)
            assert task["resultObjects"] == []
            assert (live(sim) or {})["spec"]["replicas"] == 3

            patch = {
                **scale,
                "patchBody": {
                    "spec": {
                        "template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}
                    }
                },
                "options": {"mergeStrategy": "strategic", "record": "true"},
                "allArtifacts": None,
            }
            task = await orca.run("patchManifest", patch)
            assert_succeeded(task)
            assert task["resultObjects"][0]["manifestNamesByNamespace"] == {
                "default": ["deployment web"]
            }
            assert image_of(live(sim)) == "nginx:2"
            await orca.wait_stable("k1", "default", "deployment web")

            task = await orca.run("undoRolloutManifest", {**scale, "numRevisionsBack": "1"})
            assert_succeeded(task)
            assert image_of(live(sim)) == "nginx:1"
            await orca.wait_stable("k1", "default", "deployment web")

            task = await orca.run("deleteManifest", {**scale, "options": {"cascading": "true"}})
            assert_succeeded(task)
            assert task["resultObjects"][0]["manifestNamesByNamespace"] == {
                "default": ["deployment web"]
            }
            # Background propagation (the garbage collector) and the cache follow.
            await wait_until(lambda: live(sim) is None, what="the deployment is gone from kubesim")

            async def gone_from_the_cache() -> bool:
                answer = await orca.http.get("/manifests/k1/default/deployment%20web")
                return answer.status_code == 404

            await wait_until(gone_from_the_cache, what="the deployment is gone from the cache")
