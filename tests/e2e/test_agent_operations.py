"""Operations end to end: REST (as Orca posts them) -> server -> gRPC -> the real agent ->
kubesim -> back; each test checks the task, the cluster state in kubesim and the cache."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.agent.operations_harness import workload
from tests.e2e.harness import Stack, open_orca, wait_until


@asynccontextmanager
async def _stack(tmp_path: Path) -> AsyncIterator[tuple[Stack, httpx.AsyncClient]]:
    async with open_orca(tmp_path, http_timeout=20) as (stack, orca):
        yield stack, orca.http


async def _op(
    http: httpx.AsyncClient, name: str, description: dict[str, Any], request_id: str = ""
) -> dict[str, Any]:
    """POST like Orca (a list of one, credentials, string numbers) and poll the task."""
    params = {"clientRequestId": request_id} if request_id else {}
    posted = await http.post(
        "/kubernetes/ops",
        params=params,
        json=[{name: {"credentials": "k1", "cloudProvider": "kubernetes", **description}}],
    )
    assert posted.status_code == 200, posted.text
    task_id = posted.json()["id"]
    task: dict[str, Any] = {}

    async def completed() -> bool:
        nonlocal task
        task = (await http.get(f"/task/{task_id}")).json()
        return bool(task["status"]["completed"])

    await wait_until(completed, what=f"task {task_id} completed")
    return task


def _deployment(image: str = "nginx:1") -> dict[str, Any]:
    return workload("Deployment", "web", image=image, namespace="default")


def _succeeded(task: dict[str, Any]) -> None:
    assert not task["status"]["failed"], task["history"][-1]
    assert task["history"][-1]["status"] == "Orchestration completed."


async def test_deploy_scale_patch_undo_delete_like_orca(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with _stack(tmp_path) as (stack, http):
            target = {"manifestName": "deployment web", "location": "default"}
            deploy = await _op(
                http,
                "deployManifest",
                {
                    "manifests": [_deployment()],
                    "moniker": {"app": "shop"},
                    "source": "text",
                    "skipExpressionEvaluation": "false",
                },
                request_id="a" * 64,
            )
            again = await _op(
                http,
                "deployManifest",
                {"manifests": [_deployment()], "moniker": {"app": "shop"}},
                request_id="a" * 64,
            )
            cached = await stack.store.get_object("k1", "apps", "Deployment", "default", "web")
            scale = await _op(http, "scaleManifest", {**target, "replicas": "3"})
            replicas = stack.sim.get("apps", "v1", "deployments", "default", "web")["spec"][
                "replicas"
            ]
            patch = await _op(
                http,
                "patchManifest",
                {
                    **target,
                    "patchBody": {
                        "spec": {
                            "template": {
                                "spec": {"containers": [{"name": "main", "image": "nginx:2"}]}
                            }
                        }
                    },
                    "options": {"mergeStrategy": "strategic", "record": "true"},
                },
            )
            patched = stack.sim.get("apps", "v1", "deployments", "default", "web")
            undo = await _op(http, "undoRolloutManifest", {**target, "numRevisionsBack": "1"})
            undone = stack.sim.get("apps", "v1", "deployments", "default", "web")
            delete = await _op(http, "deleteManifest", {**target, "options": {"cascading": "true"}})
            left = stack.sim.list("apps", "v1", "deployments", "default")

            async def uncached() -> bool:
                found = await stack.store.get_object("k1", "apps", "Deployment", "default", "web")
                return found is None

            await wait_until(uncached)
    for task in (deploy, scale, patch, undo, delete):
        _succeeded(task)
    assert again["id"] == deploy["id"]
    assert cached is not None  # in the cache as soon as the task completed
    assert json.loads(cached.body)["metadata"]["labels"]["app.kubernetes.io/managed-by"] == (
        "spinnaker"
    )
    assert deploy["resultObjects"][0]["manifestNamesByNamespace"] == {"default": ["deployment web"]}
    assert any(line["phase"] == "DEPLOY_KUBERNETES_MANIFEST" for line in deploy["history"])
    assert replicas == 3
    assert patched["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    assert undone["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1"
    assert delete["resultObjects"][0]["manifestNamesByNamespace"] == {"default": ["deployment web"]}
    assert left == []


async def test_versions_cleanup_and_run_job(tmp_path: Path) -> None:
    rs: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "api",
            "namespace": "default",
            "annotations": {"strategy.spinnaker.io/max-version-history": "1"},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "api"}},
            "template": {
                "metadata": {"labels": {"app": "api"}},
                "spec": {"containers": [{"name": "m", "image": "a:1"}]},
            },
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "m", "image": "busybox"}],
                }
            }
        },
    }
    with trio.fail_after(60):
        async with _stack(tmp_path) as (stack, http):
            first = await _op(
                http, "deployManifest", {"manifests": [rs], "moniker": {"app": "api"}}
            )
            # New content (identical content would reuse -v000).
            rs2 = copy.deepcopy(rs)
            rs2["spec"]["template"]["spec"]["containers"][0]["image"] = "a:2"
            second = await _op(
                http, "deployManifest", {"manifests": [rs2], "moniker": {"app": "api"}}
            )
            cleanup = await _op(
                http, "cleanupArtifacts", {"manifests": second["resultObjects"][0]["manifests"]}
            )
            names = {
                o["metadata"]["name"]
                for o in stack.sim.list("apps", "v1", "replicasets", "default")
            }
            ran = await _op(
                http, "runJob", {"manifest": job, "application": "api", "namespace": "default"}
            )
            refused = await _op(http, "runJob", {"manifest": rs, "application": "api"})
            jobs = stack.sim.list("batch", "v1", "jobs", "default")
    for task in (first, second, cleanup, ran):
        _succeeded(task)
    assert first["resultObjects"][0]["manifestNamesByNamespace"] == {
        "default": ["replicaSet api-v000"]
    }
    assert second["resultObjects"][0]["manifestNamesByNamespace"] == {
        "default": ["replicaSet api-v001"]
    }
    assert names == {"api-v001"}
    assert len(jobs) == 1
    assert refused["status"]["failed"]
    assert refused["resultObjects"][-1]["message"] == (
        "Only kind of Job is accepted for the Run Job operation."
    )


async def test_refusals_carry_the_api_server_message(tmp_path: Path) -> None:
    broken = _deployment()
    broken["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with trio.fail_after(60):
        async with _stack(tmp_path) as (stack, http):
            invalid = await _op(http, "deployManifest", {"manifests": [broken]})
            missing = await _op(
                http,
                "scaleManifest",
                {"manifestName": "deployment nope", "location": "default", "replicas": 2},
            )
            deployments = stack.sim.list("apps", "v1", "deployments", "default")
    assert invalid["status"]["failed"]
    assert invalid["status"]["completed"]
    assert deployments == []
    exception = invalid["resultObjects"][-1]
    assert exception["type"] == "EXCEPTION"
    assert "selector" in exception["message"]
    assert "Traceback" not in exception["message"]
    assert missing["status"]["failed"]
    assert 'deployments.apps "nope" not found' in missing["resultObjects"][-1]["message"]
