"""Every operation type end to end (REST -> server -> agent -> kubesim -> back), and the
failures the issue lists; each test checks kubesim afterwards, the task and the cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

import kubesim
from kubesim import ApiError

from ..agent.operations_harness import workload
from .harness import open_orca, stored_objects, wait_until


def get(sim: kubesim.Cluster, group: str, plural: str, name: str) -> dict[str, Any] | None:
    try:
        return sim.get(group, "v1", plural, "default", name)
    except ApiError:
        return None


def replica_set(**annotations: str) -> dict[str, Any]:
    return workload(
        "ReplicaSet", "api", image="api:1", container="api", namespace="default",
        annotations=annotations,
    )  # fmt: skip


def deployment(name: str = "web") -> dict[str, Any]:
    return workload("Deployment", name, image=f"{name}:1", container=name, namespace="default")


def ok(task: dict[str, Any]) -> dict[str, Any]:
    assert task["status"]["failed"] is False, task["resultObjects"]
    assert task["status"]["completed"] is True
    return task


def exception_of(task: dict[str, Any]) -> dict[str, Any]:
    assert task["status"]["failed"] is True
    assert task["status"]["completed"] is True
    exc: dict[str, Any] = task["resultObjects"][-1]
    assert exc["type"] == "EXCEPTION"
    assert task["history"][-1]["status"].startswith("Orchestration failed: ")
    return exc


async def test_versioned_deploys_cleanup_and_cache(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path) as (stack, orca):
            manifest = replica_set(**{"strategy.spinnaker.io/max-version-history": "1"})
            first = ok(await orca.run("deployManifest", {"account": "k1", "manifests": [manifest]}))
            second = ok(
                await orca.run(
                    "deployManifest",
                    {"account": "k1", "manifests": [manifest], "moniker": {"app": "x"}},
                )
            )
            assert first["resultObjects"][0]["manifestNamesByNamespace"] == {
                "default": ["replicaSet api-v000"]
            }
            assert second["resultObjects"][0]["manifestNamesByNamespace"] == {
                "default": ["replicaSet api-v001"]
            }
            # The cache has both right away (from the results, before any watch event).
            objects = await stored_objects(stack, "k1")
            assert ("apps/v1", "ReplicaSet", "default", "api-v001") in objects
            assert get(stack.sim, "apps", "replicasets", "api-v000") is not None
            cleanup = {"account": "k1", "manifests": second["resultObjects"][0]["manifests"]}
            task = ok(await orca.run("cleanupArtifacts", cleanup))
            assert any(h["phase"] == "CLEANUP_KUBERNETES_ARTIFACTS" for h in task["history"])
            assert get(stack.sim, "apps", "replicasets", "api-v000") is None
            assert get(stack.sim, "apps", "replicasets", "api-v001") is not None


async def test_rollout_operations_and_label_selector_delete(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path) as (stack, orca):
            ok(await orca.run("deployManifest", {"account": "k1", "manifests": [deployment()]}))
            target = {"account": "k1", "manifestName": "deploy web", "location": "default"}
            task = ok(await orca.run("pauseRolloutManifest", target))
            assert any(h["phase"] == "PAUSE_ROLLOUT_KUBERNETES_MANIFEST" for h in task["history"])
            assert (get(stack.sim, "apps", "deployments", "web") or {})["spec"]["paused"] is True
            ok(await orca.run("resumeRolloutManifest", target))
            assert not (get(stack.sim, "apps", "deployments", "web") or {})["spec"].get("paused")
            before = get(stack.sim, "apps", "deployments", "web") or {}
            ok(await orca.run("rollingRestartManifest", target))
            after = get(stack.sim, "apps", "deployments", "web") or {}
            annotations = after["spec"]["template"]["metadata"].get("annotations", {})
            assert "kubectl.kubernetes.io/restartedAt" in annotations
            assert after["metadata"]["generation"] > before["metadata"]["generation"]
            task = ok(
                await orca.run(
                    "deleteManifest",
                    {
                        "account": "k1",
                        "location": "default",
                        "kinds": ["deployment"],
                        "labelSelectors": {
                            "selectors": [
                                {
                                    "kind": "EQUALS",
                                    "key": "app.kubernetes.io/managed-by",
                                    "values": ["spinnaker"],
                                }
                            ]
                        },
                        "options": {"cascading": "false", "gracePeriodSeconds": "0"},
                    },
                )
            )
            assert task["resultObjects"][0]["manifestNamesByNamespace"] == {
                "default": ["deployment web"]
            }
            await wait_until(
                lambda: get(stack.sim, "apps", "deployments", "web") is None,
                what="the deployment is gone from kubesim",
            )


async def test_run_job_and_its_refusal(tmp_path: Path) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "migrate-", "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "m", "image": "migrate:1"}],
                }
            }
        },
    }
    with trio.fail_after(60):
        async with open_orca(tmp_path) as (stack, orca):
            task = ok(
                await orca.run(
                    "runJob",
                    {"account": "k1", "manifest": job, "application": "shop", "namespace": ""},
                )
            )
            assert any(h["phase"] == "RUN_KUBERNETES_JOB" for h in task["history"])
            names = task["resultObjects"][0]["deployedNamesByLocation"]["default"]
            assert len(names) == 1
            assert names[0].startswith("job migrate-")  # generateName: the API server names it
            assert stack.sim.get("batch", "v1", "jobs", "default", names[0].split()[1])
            exc = exception_of(
                await orca.run("runJob", {"account": "k1", "manifest": deployment("nojob")})
            )
            assert "Job" in exc["message"]
            assert get(stack.sim, "apps", "deployments", "nojob") is None


async def test_kubernetes_refusals_fail_the_task_with_the_api_servers_message(
    tmp_path: Path,
) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path) as (stack, orca):
            bad = deployment("bad")
            bad["spec"]["selector"] = {"matchLabels": {"app": "other"}}
            exc = exception_of(
                await orca.run("deployManifest", {"account": "k1", "manifests": [bad]})
            )
            assert "is invalid" in exc["message"]
            assert "selector" in exc["message"]
            assert "Traceback" not in exc["message"]
            assert get(stack.sim, "apps", "deployments", "bad") is None
            # Forbidden kind: an account whose user may not write Secrets.
            stack.kube.add_user("nosecrets", grants={"*": kubesim.ALL_VERBS, "secrets": ()})
            limited = tmp_path / "limited.kubeconfig"
            stack.kube.kubeconfig(limited, user="nosecrets")
            stack.write_config(
                [
                    {"name": "k1", "kubeConfigFile": str(stack.kubeconfig)},
                    {"name": "k2", "kubeConfigFile": str(limited)},
                ]
            )
            await wait_until(
                lambda: stack.server.state.sessions.primary_session("k2") is not None,
                what="k2 has a PRIMARY agent",
            )
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s", "namespace": "default"},
                "stringData": {"a": "b"},
            }
            exc = exception_of(
                await orca.run("deployManifest", {"account": "k2", "manifests": [secret]})
            )
            assert "forbidden" in exc["message"].lower()
            unknown = await orca.http.post(
                "/kubernetes/ops", json=[{"deployManifest": {"account": "k9", "manifests": []}}]
            )
            assert unknown.status_code == 400
            assert unknown.json()["message"].startswith("credentials not found (name: k9")
            op = await orca.http.post("/kubernetes/ops", json=[{"fooManifest": {}}])
            assert op.status_code == 400


async def test_one_request_id_runs_once(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path) as (stack, orca):
            manifest = replica_set()
            body = [{"deployManifest": {"account": "k1", "manifests": [manifest]}}]
            ids = set()
            async with trio.open_nursery() as nursery:

                async def post() -> None:
                    answer = await orca.http.post("/kubernetes/ops?clientRequestId=same", json=body)
                    ids.add(answer.json()["id"])

                for _ in range(5):
                    nursery.start_soon(post)
            assert len(ids) == 1
            ok(await orca.wait("deployManifest", ids.pop()))
            replica_sets = stack.sim.list("apps", "v1", "replicasets", "default")
            names = [rs["metadata"]["name"] for rs in replica_sets]
            assert names == ["api-v000"]  # versioned: a second run would have made api-v001


async def test_agent_session_lost_mid_operation_never_applies_twice(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path) as (stack, orca):
            stack.kube.faults.slow(1.0)  # every API call takes a second: the deploy is mid-way
            task_id = await orca.submit(
                "deployManifest", {"account": "k1", "manifests": [replica_set()]}
            )
            state = stack.server.state
            await wait_until(
                lambda: state.operations.in_flight > 0,  # type: ignore[attr-defined]
                what="the deploy is in flight",
            )
            agent_id = state.sessions.primary_session("k1").agent_id  # type: ignore[union-attr]
            assert await state.disconnect_agent(agent_id) == 1
            started = trio.current_time()
            exc = exception_of(await orca.wait("deployManifest", task_id))
            assert trio.current_time() - started < 5
            assert exc["cause"] == "AgentDisconnected"
            assert "may or may not have been applied" in exc["message"]
            stack.kube.faults.slow(0)
            # The agent reconnects; nothing is resent, so at most one version exists.
            await wait_until(
                lambda: state.sessions.primary_session("k1") is not None, what="k1 reconnected"
            )
            # The agent's run of the cut operation ends (it may still create api-v000).
            await wait_until(
                lambda: (
                    bool(stack.agent.status.operations)
                    and all(op.finished_at is not None for op in stack.agent.status.operations)
                ),
                what="the agent finished the operation it had",
            )
            items = stack.sim.list("apps", "v1", "replicasets", "default")
            assert [rs["metadata"]["name"] for rs in items] in ([], ["api-v000"])
            op = (await orca.http.get(f"/armory/agent/operations/{task_id}-0")).json()
            assert [h["state"] for h in op["history"]][:2] == ["RECEIVED", "FAILED"]
            assert op["history"][1]["message"].startswith("failed: sent to agent ")


async def test_pod_logs_route_reaches_the_agent(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path) as (_stack, orca):
            missing = await orca.http.get("/manifests/k1/default/pod%20nope/logs?tailLines=5")
            assert missing.status_code == 404
            assert missing.json()["message"] == 'pods "nope" not found'
            op = (await orca.http.get("/armory/agent/operations?account=k1")).json()[0]
            assert op["type"] == "podLogs"
            assert op["payload"] == {
                "account": "k1",
                "namespace": "default",
                "kind": "Pod",
                "name": "nope",
                "tailLines": 5,
            }
            bad = await orca.http.get("/manifests/k1/default/deployment%20web/logs")
            assert bad.status_code == 400
