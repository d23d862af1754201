"""deployManifest, cleanupArtifacts and runJob through the executor against kubesim."""

from __future__ import annotations

from pathlib import Path

import trio

import kubesim
from tests._widgets import widget_crd
from tests.agent.operations_harness import (
    assert_ok,
    deployment,
    job,
    open_ops_bench,
    replica_set,
)


def _names(sim: kubesim.Cluster, group: str, plural: str, namespace: str = "default") -> set[str]:
    return {o["metadata"]["name"] for o in sim.list(group, "v1", plural, namespace)}


async def test_a_versioned_replicaset_deployed_twice_is_v000_then_v001(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            moniker = {"app": "shop", "cluster": "replicaSet web"}
            first = await bench.run(
                "deployManifest",
                {"namespace": "default", "manifests": [replica_set()], "moniker": moniker},
            )
            second = await bench.run(
                "deployManifest",
                {
                    "namespace": "default",
                    "manifests": [replica_set(image="nginx:2")],
                    "moniker": moniker,
                },
            )
            live = bench.sim.get("apps", "v1", "replicasets", "default", "web-v001")
    assert_ok(first, second)
    assert first.result["manifestNamesByNamespace"] == {"default": ["replicaSet web-v000"]}
    assert second.result["manifestNamesByNamespace"] == {"default": ["replicaSet web-v001"]}
    artifact = second.result["createdArtifacts"][0]
    assert artifact == {
        "type": "kubernetes/replicaSet",
        "customKind": False,
        "name": "web",
        "version": "v001",
        "location": "default",
        "reference": "web-v001",
        "metadata": {"account": "k1"},
    }
    notes = live["metadata"]["annotations"]
    assert notes["moniker.spinnaker.io/application"] == "shop"
    assert notes["moniker.spinnaker.io/sequence"] == "1"
    assert notes["artifact.spinnaker.io/version"] == "v001"
    assert "kubectl.kubernetes.io/last-applied-configuration" in notes
    labels = live["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "spinnaker"
    assert labels["app.kubernetes.io/name"] == "shop"
    assert labels["moniker.spinnaker.io/sequence"] == "1"
    template_labels = live["spec"]["template"]["metadata"]["labels"]
    assert template_labels["app.kubernetes.io/managed-by"] == "spinnaker"
    assert second.result["manifests"][0]["metadata"]["name"] == "web-v001"
    assert second.body["objects"][0]["metadata"]["uid"] == live["metadata"]["uid"]
    assert [p["phase"] for p in second.body["phases"]] == ["DEPLOY_KUBERNETES_MANIFEST"] * 3


async def test_cleanup_artifacts_keeps_max_version_history(tmp_path: Path) -> None:
    rs = replica_set(**{"strategy.spinnaker.io/max-version-history": "1"})
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            for image in ("nginx:1", "nginx:2"):
                rs["spec"]["template"]["spec"]["containers"][0]["image"] = image
                deployed = await bench.run(
                    "deployManifest",
                    {"namespace": "default", "manifests": [rs], "moniker": {"app": "shop"}},
                )
                assert deployed.ok, deployed.answer
            cleaned = await bench.run(
                "cleanupArtifacts", {"manifests": deployed.result["manifests"]}
            )
            left = _names(bench.sim, "apps", "replicasets")
    assert cleaned.ok, cleaned.answer
    assert left == {"web-v001"}
    assert cleaned.result["manifestNamesByNamespace"] == {"default": ["replicaSet web-v000"]}
    assert "manifests" not in cleaned.result
    assert cleaned.body["deleted"] == [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "default", "name": "web-v000"}
    ]


async def test_an_unversioned_deployment_is_applied_in_place(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            first = await bench.run(
                "deployManifest",
                {"namespace": "default", "manifests": [deployment()], "moniker": {"app": "api"}},
            )
            changed = deployment(image="nginx:2")
            changed["metadata"]["labels"] = {"team": "a"}
            second = await bench.run(
                "deployManifest",
                {"namespace": "default", "manifests": [changed], "moniker": {"app": "api"}},
            )
            # Drop the label from the manifest: client-side apply removes what it had applied.
            third = await bench.run(
                "deployManifest",
                {
                    "namespace": "default",
                    "manifests": [deployment(image="nginx:3")],
                    "moniker": {"app": "api"},
                },
            )
            live = bench.sim.get("apps", "v1", "deployments", "default", "api")
    assert_ok(first, second, third)
    assert third.result["manifestNamesByNamespace"] == {"default": ["deployment api"]}
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:3"
    assert "team" not in live["metadata"]["labels"]
    assert live["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "spinnaker"


async def test_order_namespace_override_and_artifact_binding(tmp_path: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cfg"},
        "data": {"a": "1"},
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    image = {"type": "docker/image", "name": "registry.io/api", "reference": "registry.io/api:2.0"}
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            ran = await bench.run(
                "deployManifest",
                {
                    "namespace": "default",
                    "namespaceOverride": "team",
                    "manifests": [deployment(image="registry.io/api"), config, namespace],
                    "requiredArtifacts": [image],
                    "moniker": {"app": "api"},
                },
            )
            live = bench.sim.get("apps", "v1", "deployments", "team", "api")
            bad = await bench.run(
                "deployManifest",
                {
                    "namespace": "default",
                    "manifests": [deployment(name="x", image="other")],
                    "requiredArtifacts": [image],
                },
            )
    assert ran.ok, ran.answer
    kinds = [m["kind"] for m in ran.result["manifests"]]
    assert kinds == ["Namespace", "ConfigMap", "Deployment"]
    names = ran.result["manifestNamesByNamespace"]["team"]
    assert names == ["configMap cfg-v000", "deployment api"]
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.io/api:2.0"
    assert ran.result["boundArtifacts"] == [image]
    assert not bad.ok
    assert bad.answer.error_code == "Invalid"
    assert "registry.io/api:2.0" in bad.answer.error_message


async def test_replace_recreate_and_server_side_apply(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            recreate = deployment(name="re")
            recreate["metadata"]["annotations"] = {"strategy.spinnaker.io/recreate": "true"}
            first = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [recreate]}
            )
            uid = bench.sim.get("apps", "v1", "deployments", "default", "re")["metadata"]["uid"]
            again = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [recreate]}
            )
            new_uid = bench.sim.get("apps", "v1", "deployments", "default", "re")["metadata"]["uid"]
            ssa = deployment(name="ssa")
            ssa["metadata"]["annotations"] = {"strategy.spinnaker.io/server-side-apply": "true"}
            applied = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [ssa]}
            )
            live = bench.sim.get("apps", "v1", "deployments", "default", "ssa")
            replace = deployment(name="rp")
            replace["metadata"]["annotations"] = {"strategy.spinnaker.io/replace": "true"}
            await bench.run("deployManifest", {"namespace": "default", "manifests": [replace]})
            replace["spec"]["replicas"] = 3
            replaced = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [replace]}
            )
            rp = bench.sim.get("apps", "v1", "deployments", "default", "rp")
    assert_ok(first, again, applied, replaced)
    assert uid != new_uid
    managers = {entry["manager"] for entry in live["metadata"].get("managedFields") or ()}
    assert "spinnaker" in managers
    assert "kubectl.kubernetes.io/last-applied-configuration" not in live["metadata"]["annotations"]
    assert rp["spec"]["replicas"] == 3


async def test_invalid_manifest_fails_with_the_api_server_message(tmp_path: Path) -> None:
    broken = deployment(name="broken")
    broken["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            ran = await bench.run("deployManifest", {"namespace": "default", "manifests": [broken]})
    assert not ran.ok
    assert ran.answer.error_code == "KubernetesError 422"
    assert "selector" in ran.answer.error_message
    assert "Traceback" not in ran.answer.error_message
    assert ran.body["phases"][-1]["status"].startswith("deployManifest failed: ")


async def test_a_forbidden_kind_fails_with_the_403_message(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, user="viewer") as bench:
            ran = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [deployment()]}
            )
            allowed = await bench.run(
                "deployManifest",
                {
                    "namespace": "default",
                    "manifests": [
                        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok"}}
                    ],
                },
            )
    assert not ran.ok
    assert ran.answer.error_code == "KubernetesError 403"
    assert "forbidden" in ran.answer.error_message.lower()
    assert "deployments" in ran.answer.error_message
    assert allowed.ok, allowed.answer


async def test_run_job_keeps_the_name_recreates_it_and_refuses_other_kinds(
    tmp_path: Path,
) -> None:
    migrate = job("migrate")
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            one = await bench.run(
                "runJob", {"namespace": "default", "manifest": migrate, "application": "shop"}
            )
            first = bench.sim.get("batch", "v1", "jobs", "default", "migrate")
            first_uid = first["metadata"]["uid"]
            two = await bench.run(
                "runJob", {"namespace": "default", "manifest": migrate, "application": "shop"}
            )
            again = bench.sim.get("batch", "v1", "jobs", "default", "migrate")
            jobs = _names(bench.sim, "batch", "jobs")
            refused = await bench.run("runJob", {"namespace": "default", "manifest": deployment()})
    assert_ok(one, two)
    assert jobs == {"migrate"}  # the name as given, as current Clouddriver keeps it
    assert again["metadata"]["uid"] != first_uid  # recreated: a run is never an update
    assert one.result["deployedNamesByLocation"] == {"default": ["job migrate"]}
    assert not refused.ok
    assert refused.answer.error_message == "Only kind of Job is accepted for the Run Job operation."


async def test_run_job_with_generate_name_lets_the_api_server_name_each_run(
    tmp_path: Path,
) -> None:
    migrate = job("ignored")
    migrate["metadata"] = {"generateName": "migrate-"}
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            runs = [
                await bench.run("runJob", {"namespace": "default", "manifest": migrate})
                for _ in range(2)
            ]
            jobs = _names(bench.sim, "batch", "jobs")
    assert_ok(*runs)
    assert len(jobs) == 2
    assert all(name.startswith("migrate-") and len(name) > len("migrate-") for name in jobs)
    located = {r.result["deployedNamesByLocation"]["default"][0] for r in runs}
    assert located == {f"job {name}" for name in jobs}


async def test_source_capacity_traffic_secrets_and_a_crd_with_its_resources(
    tmp_path: Path,
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "front"},
        "spec": {"selector": {"lb": "front"}, "ports": [{"port": 80}]},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "stringData": {"password": "hunter2"},
    }
    crd = widget_crd()
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3},
    }
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            first = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [service, replica_set()]}
            )
            bench.sim.patch(
                "apps",
                "v1",
                "replicasets",
                "default",
                "web-v000",
                {"spec": {"replicas": 4}},
                content_type="application/merge-patch+json",
            )
            sized = replica_set(
                **{
                    "strategy.spinnaker.io/use-source-capacity": "true",
                    "traffic.spinnaker.io/load-balancers": '["service front"]',
                }
            )
            second = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [sized]}
            )
            v001 = bench.sim.get("apps", "v1", "replicasets", "default", "web-v001")
            secrets = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [secret]}
            )
            custom = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [widget, crd]}
            )
            live_widget = bench.sim.get("example.com", "v1", "widgets", "default", "w")
    assert_ok(first, second, secrets, custom)
    assert v001["spec"]["replicas"] == 4
    assert v001["spec"]["template"]["metadata"]["labels"]["lb"] == "front"
    reported = secrets.result["manifests"][0]
    assert "data" not in reported
    assert "stringData" not in reported
    assert "kubectl.kubernetes.io/last-applied-configuration" not in reported["metadata"].get(
        "annotations", {}
    )
    assert "hunter2" not in secrets.answer.result_json
    assert live_widget["spec"]["size"] == 3
    assert custom.result["manifestNamesByNamespace"][""] == [
        "customResourceDefinition widgets.example.com"
    ]
    assert custom.result["manifestNamesByNamespace"]["default"] == ["Widget.example.com w"]
    widget_artifact = custom.result["createdArtifacts"][1]
    assert widget_artifact["type"] == "kubernetes/Widget.example.com"
    assert widget_artifact["customKind"] is True


async def test_a_new_version_is_created_without_reading_it_first(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            first = await bench.run(
                "deployManifest",
                {"namespace": "default", "manifests": [replica_set()], "moniker": {"app": "shop"}},
            )
            bench.server.requests.reset()
            second = await bench.run(
                "deployManifest",
                {
                    "namespace": "default",
                    "manifests": [replica_set(image="nginx:2")],
                    "moniker": {"app": "shop"},
                },
            )
            counts = bench.server.requests.snapshot()
    assert_ok(first, second)
    # The list that picked -v001 already showed the name free: list + create, no get.
    assert counts == {"create replicasets.apps": 1, "list replicasets.apps": 1}
    assert "managedFields" not in second.body["objects"][0]["metadata"]


async def test_a_new_version_whose_name_is_taken_applies_over_it(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    # web-v000 exists but belongs to another artifact, so versioning does not count it and
    # picks web-v000: the create answers 409 and the deploy applies over it, as kubectl would.
    sim.create(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": "web-v000",
                "namespace": "default",
                "annotations": {"artifact.spinnaker.io/name": "other"},
            },
            "spec": replica_set()["spec"],
        }
    )
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, sim=sim) as bench:
            deployed = await bench.run(
                "deployManifest",
                {
                    "namespace": "default",
                    "manifests": [replica_set(image="nginx:2")],
                    "moniker": {"app": "shop"},
                },
            )
            live = bench.sim.get("apps", "v1", "replicasets", "default", "web-v000")
    assert_ok(deployed)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    assert live["metadata"]["annotations"]["artifact.spinnaker.io/name"] == "web"


async def test_cleanup_keeps_the_version_the_deploy_reused(tmp_path: Path) -> None:
    # cfg-v000 (a), v001 (b), v002 (c); redeploying a reuses v000, the oldest: cleanup with
    # max-version-history 2 deletes v001, not the version the new pods mount.
    notes = {"strategy.spinnaker.io/max-version-history": "2"}
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            for value in ("a", "b", "c", "a"):
                cm = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "cfg", "annotations": dict(notes)},
                    "data": {"v": value},
                }
                deployed = await bench.run(
                    "deployManifest",
                    {"namespace": "default", "manifests": [cm], "moniker": {"app": "shop"}},
                )
                assert deployed.ok, deployed.answer
            cleaned = await bench.run(
                "cleanupArtifacts", {"manifests": deployed.result["manifests"]}
            )
            left = _names(bench.sim, "", "configmaps")
    assert deployed.result["manifestNamesByNamespace"] == {"default": ["configMap cfg-v000"]}
    assert cleaned.ok, cleaned.answer
    assert left == {"cfg-v000", "cfg-v002"}
