"""Red/Black, Blue/Green and Highlander end to end, driven as Orca drives them, on kubesim (TLS).

The client below plays Orca's Deploy (Manifest) stage with traffic management
(``DeployManifestTask`` posts the stage context plus flat ``services``/``enableTraffic``/
``strategy``; ``DeployManifestStage#afterStages`` lists the cluster's ReplicaSets through
``/manifests/{account}/{ns}/replicaSet/cluster/{app}/{cluster}`` and appends, per old one,
Disable (Manifest) and/or Delete (Manifest) stages), then the stand-alone stages a pipeline or
Deck adds (Scale with a dynamic target, Enable/Disable on a named server group). After each
strategy the test reads kubesim: which pods the Service selects (computed from the pods'
labels), and what became of v000.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import trio

import kubesim
from kubesim import ApiError

from ..agent.operations_harness import workload
from .harness import open_orca, wait_until
from .ops_client import OrcaClient

LB_KEY = "traffic.spinnaker.io/load-balancers"
CLUSTER_KEY = "moniker.spinnaker.io/cluster"
NOISE = {"app": "shop", "cloudProvider": "kubernetes"}


def front_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "front", "namespace": "default"},
        "spec": {"selector": {"serving": "front"}, "ports": [{"port": 80}]},
    }


def web(image: str, outcome: str = "") -> dict[str, Any]:
    """The ReplicaSet ``web``; ``outcome`` steers kubesim's pods (``unready``: never Ready)."""
    return workload(
        "ReplicaSet",
        "web",
        image=image,
        replicas=2,
        container="web",
        namespace="default",
        outcome=outcome,
    )


def assert_succeeded(task: dict[str, Any]) -> None:
    assert task["status"]["failed"] is False, task["resultObjects"] or task["history"][-3:]
    assert task["status"]["completed"] is True


# -- what Orca does ----------------------------------------------------------------------------


async def deploy_stage(orca: OrcaClient, image: str, strategy: str, outcome: str = "") -> list[str]:
    """Deploy (Manifest) with traffic management; returns the operations Orca appended after
    it (``"<stage> <manifestName>"``), having run them as Orca's appended stages would. A
    version whose pods never become ready (``outcome="unready"``) is not waited for: its
    WaitForManifestStableTask would time out, and the pipeline goes on (its stage set to
    ignore the failure, or a later run of it)."""
    context: dict[str, Any] = {
        **NOISE,
        "account": "k1",
        "source": "text",
        "manifests": [web(image, outcome)],
        "moniker": {"app": "shop"},
        "trafficManagement": {
            "enabled": True,
            "options": {"enableTraffic": True, "services": ["service front"], "strategy": strategy},
        },
    }
    # DeployManifestTask#getOperation: the context plus the flat keys, the enum by its name.
    flat_strategy = {"redblack": "RED_BLACK", "bluegreen": "BLUE_GREEN"}.get(strategy, "HIGHLANDER")
    context |= {"services": ["service front"], "enableTraffic": True, "strategy": flat_strategy}
    task = await orca.run("deployManifest", context)
    assert_succeeded(task)
    deployed = task["resultObjects"][0]["manifests"]
    appended: list[str] = []
    for manifest in deployed:
        if manifest["kind"].lower() != "replicaset":
            continue
        meta = manifest["metadata"]
        new_name = f"replicaSet {meta['name']}"
        if not outcome:
            await orca.wait_stable("k1", meta["namespace"], new_name)  # WaitForManifestStableTask
        cluster = meta["annotations"][CLUSTER_KEY]
        listing = await orca.http.get(
            f"/manifests/k1/{meta['namespace']}/replicaSet/cluster/shop/{quote(cluster)}"
        )
        assert listing.status_code == 200, listing.text
        old = [
            f"{m['kind']} {m['name']}"
            for m in listing.json()
            if f"{m['kind']} {m['name']}" != new_name
        ]
        for name in old:
            if strategy == "highlander":
                appended.append(f"disableManifest {name}")
            elif await neither_stable_nor_failed(orca, meta["namespace"], name):
                appended.append(f"deleteManifest {name}")
            else:
                appended.append(f"disableManifest {name}")
        if strategy == "highlander":
            appended += [f"deleteManifest {name}" for name in old]
    for step in appended:
        stage, name = step.split(" ", 1)
        await appended_stage(orca, stage, name)
    return appended


async def neither_stable_nor_failed(orca: OrcaClient, namespace: str, name: str) -> bool:
    """ManifestOperationsHelper#previousDeploymentNeitherStableNorFailed."""
    answer = await orca.http.get(
        f"/manifests/k1/{namespace}/{quote(name)}", params={"includeEvents": "false"}
    )
    body = answer.json()
    status = body["manifest"].get("status") or {}
    if status.get("readyReplicas", 0) > 0 and status.get("availableReplicas", 0) > 0:
        return False
    return not body["status"]["stable"]["state"] and not body["status"]["failed"]["state"]


async def appended_stage(orca: OrcaClient, stage: str, name: str) -> None:
    """An appended Disable/Delete stage: context {account, app, cloudProvider, manifestName,
    location}; no criteria, so ResolveTargetManifestTask is skipped."""
    context = {**NOISE, "account": "k1", "manifestName": name, "location": "default"}
    assert_succeeded(await orca.run(stage, context))
    if stage == "disableManifest":
        await orca.wait_stable("k1", "default", name)


async def dynamic_target(orca: OrcaClient, criteria: str) -> str:
    """ResolveTargetManifestTask: the manifestName ``kind + " " + name``."""
    answer = await orca.http.get(
        f"/manifests/k1/default/replicaSet/cluster/shop/{quote('replicaSet web')}"
        f"/dynamic/{criteria}"
    )
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["namespace"] == "default"
    return f"{found['kind']} {found['name']}"


# -- what the cluster shows --------------------------------------------------------------------


def replica_set(sim: kubesim.Cluster, name: str) -> dict[str, Any] | None:
    try:
        return sim.get("apps", "v1", "replicasets", "default", name)
    except ApiError:
        return None


def owner_of(pod: dict[str, Any]) -> str:
    refs = pod["metadata"].get("ownerReferences") or [{"name": "?"}]
    return str(refs[0]["name"])


def selected_by_front(sim: kubesim.Cluster) -> list[str]:
    """The owners of the pods the Service's selector matches (label subset), one per pod."""
    selector = sim.get("", "v1", "services", "default", "front")["spec"]["selector"]
    return sorted(
        owner_of(pod)
        for pod in sim.list("", "v1", "pods", "default")
        if selector.items() <= (pod["metadata"].get("labels") or {}).items()
    )


def pods_of(sim: kubesim.Cluster, owner: str) -> list[dict[str, Any]]:
    return [p for p in sim.list("", "v1", "pods", "default") if owner_of(p) == owner]


def serving(obj: dict[str, Any] | None) -> bool:
    assert obj is not None
    return "serving" in obj["spec"]["template"]["metadata"]["labels"]


async def first_two_versions(orca: OrcaClient, sim: kubesim.Cluster, strategy: str) -> None:
    """The Service, then v000 (nothing old: nothing appended), then v001."""
    service = {**NOISE, "account": "k1", "source": "text", "manifests": [front_service()]}
    assert_succeeded(await orca.run("deployManifest", {**service, "moniker": {"app": "shop"}}))
    assert await deploy_stage(orca, "web:1", strategy) == []
    v000 = replica_set(sim, "web-v000")
    assert v000 is not None
    assert v000["metadata"]["annotations"][LB_KEY] == '["service front"]'
    assert selected_by_front(sim) == ["web-v000", "web-v000"]


@pytest.mark.parametrize("strategy", ["redblack", "bluegreen", "highlander"])
async def test_a_strategy_moves_the_traffic_to_v001(tmp_path: Path, strategy: str) -> None:
    with trio.fail_after(90):
        async with open_orca(tmp_path, kube_tls=True) as (stack, orca):
            sim = stack.sim
            await first_two_versions(orca, sim, strategy)
            appended = await deploy_stage(orca, "web:2", strategy)
            if strategy == "highlander":
                assert appended == [
                    "disableManifest replicaSet web-v000",
                    "deleteManifest replicaSet web-v000",
                ]
            else:
                assert appended == ["disableManifest replicaSet web-v000"]
            assert selected_by_front(sim) == ["web-v001", "web-v001"]
            assert serving(replica_set(sim, "web-v001"))
            if strategy == "highlander":
                await wait_until(
                    lambda: replica_set(sim, "web-v000") is None and not pods_of(sim, "web-v000"),
                    what="v000 and its pods are deleted",
                )
                return
            # Red/Black and Blue/Green keep v000, full size, out of the Service.
            v000 = replica_set(sim, "web-v000")
            assert not serving(v000)
            assert len(pods_of(sim, "web-v000")) == 2
            assert all("serving" not in p["metadata"]["labels"] for p in pods_of(sim, "web-v000"))
            # The dynamic targets a pipeline's next stages resolve.
            assert await dynamic_target(orca, "newest") == "replicaSet web-v001"
            assert await dynamic_target(orca, "second_newest") == "replicaSet web-v000"
            assert await dynamic_target(orca, "oldest") == "replicaSet web-v000"
            if strategy == "redblack":
                # A Scale (Manifest) stage, target "second newest", scales the old one down.
                target = await dynamic_target(orca, "second_newest")
                scale = {**NOISE, "account": "k1", "manifestName": target, "location": "default"}
                assert_succeeded(await orca.run("scaleManifest", {**scale, "replicas": 0}))
                await wait_until(lambda: not pods_of(sim, "web-v000"), what="v000 scaled to 0")
                assert await dynamic_target(orca, "smallest") == "replicaSet web-v000"
                assert selected_by_front(sim) == ["web-v001", "web-v001"]
                return
            # Blue/Green: Deck's rollback, Enable on v000 then Disable on v001, by name.
            for stage, name in (("enableManifest", "web-v000"), ("disableManifest", "web-v001")):
                action = {
                    **NOISE,
                    "account": "k1",
                    "manifestName": f"replicaSet {name}",
                    "location": "default",
                    "reason": "rollback",
                }
                assert_succeeded(await orca.run(stage, action))
            assert selected_by_front(sim) == ["web-v000", "web-v000"]
            assert not serving(replica_set(sim, "web-v001"))
            assert len(pods_of(sim, "web-v001")) == 2


@pytest.mark.parametrize("strategy", ["redblack", "bluegreen"])
async def test_a_stuck_v000_is_deleted_not_disabled(tmp_path: Path, strategy: str) -> None:
    """DeployManifestStage#deleteOrDisableOldManifest: an old version neither stable nor failed
    (ManifestOperationsHelper#previousDeploymentNeitherStableNorFailed, here a rollout whose
    pods never become ready) gets a Delete (Manifest) stage instead of a Disable."""
    with trio.fail_after(90):
        async with open_orca(tmp_path, kube_tls=True) as (stack, orca):
            sim = stack.sim
            service = {**NOISE, "account": "k1", "source": "text", "manifests": [front_service()]}
            assert_succeeded(
                await orca.run("deployManifest", {**service, "moniker": {"app": "shop"}})
            )
            assert await deploy_stage(orca, "web:1", strategy, outcome="unready") == []
            await wait_until(
                lambda: len(pods_of(sim, "web-v000")) == 2, what="v000's two (unready) pods"
            )
            body = (await orca.http.get("/manifests/k1/default/replicaSet%20web-v000")).json()
            assert body["status"]["stable"]["state"] is False
            assert body["status"]["failed"]["state"] is False
            assert not body["manifest"]["status"].get("readyReplicas")
            assert await neither_stable_nor_failed(orca, "default", "replicaSet web-v000")

            assert await deploy_stage(orca, "web:2", strategy) == [
                "deleteManifest replicaSet web-v000"
            ]
            await wait_until(
                lambda: replica_set(sim, "web-v000") is None and not pods_of(sim, "web-v000"),
                what="v000 and its pods are deleted",
            )
            assert selected_by_front(sim) == ["web-v001", "web-v001"]
            assert serving(replica_set(sim, "web-v001"))
            assert await dynamic_target(orca, "newest") == "replicaSet web-v001"


async def test_disable_refusals_fail_the_task_with_clouddrivers_message(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path, kube_tls=True) as (_, orca):
            context = {
                **NOISE,
                "account": "k1",
                "manifestName": "replicaSet nothing-v000",
                "location": "default",
            }
            task = await orca.run("disableManifest", context)
    assert task["status"]["failed"] is True
    assert any(
        "Could not find kubernetes manifest: KubernetesCoordinates(kind=replicaSet, "
        "namespace=default, name=nothing-v000)" in str(h["status"])
        for h in task["history"]
    ), task["history"]
