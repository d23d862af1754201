"""scale, patch, undo, pause/resume, rolling restart and delete through the executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

import kubesim
from tests.agent.operations_harness import (
    OpsBench,
    assert_ok,
    deployment,
    open_ops_bench,
    replica_set,
)


def _deployment(sim: kubesim.Cluster, name: str = "api") -> dict[str, Any]:
    return sim.get("apps", "v1", "deployments", "default", name)


async def _deploy(bench: OpsBench, manifest: dict[str, Any]) -> None:
    assert_ok(await bench.run("deployManifest", {"namespace": "default", "manifests": [manifest]}))


def _target(kind: str = "Deployment", name: str = "api", **extra: Any) -> dict[str, Any]:
    return {"namespace": "default", "kind": kind, "name": name, **extra}


async def test_scale_sets_replicas_through_the_scale_subresource(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            await _deploy(bench, deployment())
            scaled = await bench.run("scaleManifest", _target(replicas=3))
            replicas = _deployment(bench.sim)["spec"]["replicas"]
            refused = await bench.run(
                "scaleManifest",
                {"namespace": "default", "kind": "ConfigMap", "name": "x", "replicas": 1},
            )
    assert_ok(scaled)
    assert replicas == 3
    assert scaled.result is None
    assert scaled.body["objects"][0]["spec"]["replicas"] == 3
    assert scaled.body["phases"][0]["phase"] == "SCALE_KUBERNETES_MANIFEST"
    assert not refused.ok
    assert refused.answer.error_code == "Unsupported"
    assert "scaleManifest" in refused.answer.error_message
    assert "ConfigMap" in refused.answer.error_message


async def test_patch_strategic_merge_and_json(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            await _deploy(bench, deployment())
            strategic = await bench.run(
                "patchManifest",
                _target(
                    patchBody={
                        "spec": {
                            "template": {
                                "spec": {"containers": [{"name": "main", "image": "nginx:9"}]}
                            }
                        }
                    },
                    options={"mergeStrategy": "strategic"},
                ),
            )
            merge = await bench.run(
                "patchManifest",
                _target(
                    patchBody={"metadata": {"labels": {"tier": "web"}}},
                    options={"mergeStrategy": "merge"},
                ),
            )
            json_patch = await bench.run(
                "patchManifest",
                _target(
                    patchBody=[{"op": "replace", "path": "/spec/replicas", "value": 2}],
                    options={"mergeStrategy": "json"},
                ),
            )
            broken = await bench.run(
                "patchManifest",
                _target(
                    patchBody=[{"op": "replace", "path": "/spec/nothing/here", "value": 2}],
                    options={"mergeStrategy": "json"},
                ),
            )
            live = _deployment(bench.sim)
    assert_ok(strategic, merge, json_patch)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:9"
    assert live["metadata"]["labels"]["tier"] == "web"
    assert live["spec"]["replicas"] == 2
    assert strategic.result["manifests"] == [
        {"kind": "Deployment", "metadata": {"name": "api", "namespace": "default"}}
    ]
    assert strategic.result["manifestNamesByNamespace"] == {"default": ["deployment api"]}
    assert not broken.ok
    assert broken.answer.error_code.startswith("KubernetesError 4")


async def test_undo_rollout_restores_a_revision_template(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            for image in ("nginx:1", "nginx:2", "nginx:3"):
                await _deploy(bench, deployment(image=image))
            to_one = await bench.run("undoRolloutManifest", _target(revision=1))
            image_after_revision = _deployment(bench.sim)["spec"]["template"]["spec"]["containers"][
                0
            ]["image"]
            # Now revisions 2, 3, 4 (1 became 4): one back from the newest is nginx:3.
            back = await bench.run("undoRolloutManifest", _target(numRevisionsBack=1))
            image_after_back = _deployment(bench.sim)["spec"]["template"]["spec"]["containers"][0][
                "image"
            ]
            too_far = await bench.run("undoRolloutManifest", _target(numRevisionsBack=10))
            missing = await bench.run("undoRolloutManifest", _target(revision=42))
            sts = await bench.run("undoRolloutManifest", _target(kind="ConfigMap"))
    assert_ok(to_one, back)
    assert image_after_revision == "nginx:1"
    assert image_after_back == "nginx:3"
    assert not too_far.ok
    assert "only 3 revisions exist" in too_far.answer.error_message
    assert not missing.ok
    assert "revision 42" in missing.answer.error_message
    assert sts.answer.error_code == "Unsupported"
    assert "undoRolloutManifest" in sts.answer.error_message


async def test_pause_resume_and_rolling_restart(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            await _deploy(bench, deployment())
            paused = await bench.run("pauseRolloutManifest", _target())
            is_paused = _deployment(bench.sim)["spec"].get("paused")
            restart_paused = await bench.run("rollingRestartManifest", _target())
            resumed = await bench.run("resumeRolloutManifest", _target())
            is_resumed = _deployment(bench.sim)["spec"].get("paused")
            restarted = await bench.run("rollingRestartManifest", _target())
            notes = _deployment(bench.sim)["spec"]["template"]["metadata"]["annotations"]
            await _deploy(
                bench, replica_set(name="rs", **{"strategy.spinnaker.io/versioned": "false"})
            )
            not_rollable = await bench.run("pauseRolloutManifest", _target("ReplicaSet", "rs"))
    assert_ok(paused, resumed, restarted)
    assert is_paused is True
    assert is_resumed is False
    assert not restart_paused.ok
    assert "kubectl.kubernetes.io/restartedAt" in notes
    assert restarted.body["phases"][0]["phase"] == ("ROLLING_RESTART_KUBERNETES_MANIFEST")
    assert not not_rollable.ok
    assert "ReplicaSet" in not_rollable.answer.error_message
    assert "pauseRolloutManifest" in not_rollable.answer.error_message


async def test_delete_by_name_and_by_label_selector(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
                bench.sim.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": name,
                            "namespace": "default",
                            "labels": {"team": team},
                        },
                    }
                )
            await _deploy(bench, deployment())
            (api,) = bench.sim.list("apps", "v1", "deployments", "default")
            by_name = await bench.run(
                "deleteManifest", _target(options={"cascading": False, "gracePeriodSeconds": "0"})
            )
            again = await bench.run("deleteManifest", _target())
            by_label = await bench.run(
                "deleteManifest",
                {"namespace": "default", "kinds": ["configMap"], "labelSelectors": "team=x"},
            )
            left = {
                o["metadata"]["name"] for o in bench.sim.list("", "v1", "configmaps", "default")
            }
            deployments = bench.sim.list("apps", "v1", "deployments", "default")
            replica_sets = bench.sim.list("apps", "v1", "replicasets", "default")
    assert_ok(by_name, again, by_label)
    assert deployments == []
    assert len(replica_sets) == 1  # orphaned, not deleted (cascading false)
    assert by_name.result == {
        "manifestNamesByNamespace": {"default": ["deployment api"]},
        "manifests": [],  # Clouddriver's OperationResult has it, empty
        "createdArtifacts": [],
        "boundArtifacts": [],
    }
    # Which object of the name went (its uid, from the API server's answer): the server's
    # read-your-writes tells a later object of that name from it.
    assert by_name.body["deleted"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "namespace": "default",
            "name": "api",
            "uid": api["metadata"]["uid"],
        }
    ]
    assert again.body["deleted"] == []
    assert left >= {"c"}
    assert not left & {"a", "b"}
    assert sorted(by_label.result["manifestNamesByNamespace"]["default"]) == [
        "configMap a",
        "configMap b",
    ]


def _set_workload(kind: str, image: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "db"}},
        "template": {
            "metadata": {"labels": {"app": "db"}},
            "spec": {"containers": [{"name": "db", "image": image}]},
        },
    }
    if kind == "StatefulSet":
        spec.update(replicas=1, serviceName="db")
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "db"}, "spec": spec}


async def test_undo_rollout_of_statefulsets_and_daemonsets_reads_controller_revisions(
    tmp_path: Path,
) -> None:
    images: dict[str, list[str]] = {}
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            for kind, plural in (("StatefulSet", "statefulsets"), ("DaemonSet", "daemonsets")):
                for image in ("db:1", "db:2", "db:3"):
                    await _deploy(bench, _set_workload(kind, image))
                seen = []
                for payload in ({"numRevisionsBack": 1}, {"revision": 1}):
                    assert_ok(
                        await bench.run("undoRolloutManifest", _target(kind, "db", **payload))
                    )
                    live = bench.sim.get("apps", "v1", plural, "default", "db")
                    seen.append(live["spec"]["template"]["spec"]["containers"][0]["image"])
                images[kind] = seen
                too_far = await bench.run(
                    "undoRolloutManifest", _target(kind, "db", numRevisionsBack=9)
                )
                assert not too_far.ok
                assert "only 3 revisions exist" in too_far.answer.error_message
                bench.sim.delete("apps", "v1", plural, "default", "db")
    # db:2 one back from db:3; then revision 1 (db:1) by number.
    assert images == {"StatefulSet": ["db:2", "db:1"], "DaemonSet": ["db:2", "db:1"]}
