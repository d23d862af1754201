"""disableManifest / enableManifest through the executor against kubesim, and their patches.

What is checked is Clouddriver's behaviour: the load balancers come from the description or
the target's ``traffic.spinnaker.io/load-balancers``; the target's template labels are
patched first, then (a ReplicaSet only) its live pods; a Deployment is patched alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

import kubesim
from agent.operations._traffic import attach_patch, detach_patch, selector_string
from tests.agent.operations_harness import assert_ok, deployment, open_ops_bench, replica_set

LB = "traffic.spinnaker.io/load-balancers"


def service(name: str = "front", selector: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"lb": name} if selector is None else selector,
            "ports": [{"port": 80}],
        },
    }


def pods_of(sim: kubesim.Cluster, owner: str) -> list[dict[str, Any]]:
    return [
        p
        for p in sim.list("", "v1", "pods", "default")
        if any(r["name"] == owner for r in p["metadata"].get("ownerReferences") or ())
    ]


def template_labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["spec"]["template"]["metadata"]["labels"])


# -- the patches, sans I/O --------------------------------------------------------------------


def test_detach_removes_only_present_keys_escaping_the_pointer() -> None:
    target = {"spec": {"template": {"metadata": {"labels": {"a/b": "1", "c~d": "2", "x": "3"}}}}}
    selector = {"a/b": "1", "c~d": "2", "absent": "4"}
    assert detach_patch(selector, target) == [
        {"op": "remove", "path": "/spec/template/metadata/labels/a~1b"},
        {"op": "remove", "path": "/spec/template/metadata/labels/c~0d"},
    ]
    pod = {"metadata": {"labels": {"x": "3"}}}
    assert detach_patch({"x": "9"}, pod) == [{"op": "remove", "path": "/metadata/labels/x"}]


def test_attach_replaces_present_keys_adds_the_others_and_creates_a_missing_map() -> None:
    target = {"spec": {"template": {"metadata": {"labels": {"lb": "old"}}}}}
    assert attach_patch({"lb": "front", "tier": "web"}, target) == [
        {"op": "replace", "path": "/spec/template/metadata/labels/lb", "value": "front"},
        {"op": "add", "path": "/spec/template/metadata/labels/tier", "value": "web"},
    ]
    bare_pod: dict[str, Any] = {"metadata": {"name": "p"}}
    assert attach_patch({"lb": "front"}, bare_pod) == [
        {"op": "add", "path": "/metadata/labels", "value": {"lb": "front"}}
    ]
    no_meta: dict[str, Any] = {"spec": {"template": {"spec": {}}}}
    assert attach_patch({"lb": "f"}, no_meta) == [
        {"op": "add", "path": "/spec/template/metadata", "value": {}},
        {"op": "add", "path": "/spec/template/metadata/labels", "value": {"lb": "f"}},
    ]
    assert attach_patch({}, target) == []


def test_selector_string_reads_match_labels_and_expressions() -> None:
    selector = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "env", "operator": "NotIn", "values": ["dev"]},
            {"key": "x", "operator": "Exists"},
            {"key": "y", "operator": "DoesNotExist"},
        ],
    }
    assert selector_string(selector) == "app=web,tier in (a,b),env notin (dev),x,!y"
    assert selector_string(None) == ""


# -- against kubesim --------------------------------------------------------------------------


async def test_disable_then_enable_a_replicaset_patches_template_then_pods(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            rs = replica_set(**{LB: '["service front"]'})
            rs["spec"]["replicas"] = 2
            deployed = await bench.run(
                "deployManifest",
                {"namespace": "default", "manifests": [service(), rs], "enableTraffic": True},
            )
            assert_ok(deployed)
            sim = bench.sim
            live = sim.get("apps", "v1", "replicasets", "default", "web-v000")
            assert template_labels(live)["lb"] == "front"
            assert [p["metadata"]["labels"]["lb"] for p in pods_of(sim, "web-v000")] == [
                "front",
                "front",
            ]
            target = {"kind": "ReplicaSet", "name": "web-v000", "namespace": "default"}
            target["manifestName"] = "replicaSet web-v000"

            disabled = await bench.run("disableManifest", target)
            assert_ok(disabled)
            live = sim.get("apps", "v1", "replicasets", "default", "web-v000")
            assert "lb" not in template_labels(live)
            assert template_labels(live)["app"] == "web"  # the RS's own selector stays
            pods = pods_of(sim, "web-v000")
            assert len(pods) == 2
            assert all("lb" not in p["metadata"]["labels"] for p in pods)
            statuses = [p["status"] for p in disabled.body["phases"]]
            assert statuses == [
                "Starting disable operation in account k1...",
                "Getting load balancer list to disable...",
                "Using annotated list [service front]",
                "Patching target for 'service front'",
                "Patching pods for 'service front'",
                "Disable operation for KubernetesCoordinates(kind=replicaSet, "
                "namespace=default, name=web-v000) succeeded",
            ]
            assert {p["phase"] for p in disabled.body["phases"]} == {"DISABLE_MANIFEST"}
            assert disabled.result is None
            # The target first, then its pods: what the server's cache is given.
            assert [o["kind"] for o in disabled.body["objects"]] == ["ReplicaSet", "Pod", "Pod"]

            again = await bench.run("disableManifest", target)  # nothing left to remove
            assert_ok(again)
            assert again.body["objects"] == []

            enabled = await bench.run("enableManifest", target)
            assert_ok(enabled)
            live = sim.get("apps", "v1", "replicasets", "default", "web-v000")
            assert template_labels(live)["lb"] == "front"
            assert all(p["metadata"]["labels"]["lb"] == "front" for p in pods_of(sim, "web-v000"))
            assert {p["phase"] for p in enabled.body["phases"]} == {"ENABLE_MANIFEST"}


async def test_a_deployment_gets_only_its_template_patched(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            dep = deployment()
            dep["metadata"]["annotations"] = {LB: '["service front"]'}
            assert_ok(
                await bench.run(
                    "deployManifest", {"namespace": "default", "manifests": [service(), dep]}
                )
            )
            target = {"kind": "Deployment", "name": "api", "namespace": "default"}
            disabled = await bench.run("disableManifest", target)
            assert_ok(disabled)
            live = bench.sim.get("apps", "v1", "deployments", "default", "api")
    assert "lb" not in template_labels(live)
    assert [o["kind"] for o in disabled.body["objects"]] == ["Deployment"]
    assert not any("Patching pods" in p["status"] for p in disabled.body["phases"])


async def test_supplied_load_balancers_win_and_refusals_name_the_problem(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            plain = replica_set(name="plain")
            assert_ok(
                await bench.run(
                    "deployManifest",
                    {"namespace": "default", "manifests": [service("other"), plain]},
                )
            )
            base = {"kind": "ReplicaSet", "name": "plain-v000", "namespace": "default"}
            nothing = await bench.run("disableManifest", base)
            other = {**base, "loadBalancers": ["service other"]}
            supplied = await bench.run("enableManifest", other)
            live = bench.sim.get("apps", "v1", "replicasets", "default", "plain-v000")
            missing = await bench.run("disableManifest", {**base, "name": "gone-v000"})
            no_service = await bench.run("enableManifest", {**base, "loadBalancers": ["service x"]})
            ingress = await bench.run("enableManifest", {**base, "loadBalancers": ["ingress x"]})
            malformed = await bench.run("enableManifest", {**base, "loadBalancers": ["front"]})
    assert_ok(nothing, supplied)
    assert "Using annotated list []" in [p["status"] for p in nothing.body["phases"]]
    assert nothing.body["objects"] == []
    assert "Using supplied list [service other]" in [p["status"] for p in supplied.body["phases"]]
    assert template_labels(live)["lb"] == "other"
    assert (missing.ok, missing.answer.error_code) == (False, "KubernetesError 404")
    assert missing.answer.error_message == (
        "Could not find kubernetes manifest: KubernetesCoordinates(kind=replicaSet, "
        "namespace=default, name=gone-v000)"
    )
    assert no_service.answer.error_message == (
        "Could not find load balancer: KubernetesCoordinates(kind=service, namespace=default, "
        "name=x)."
    )
    assert ingress.answer.error_code == "Invalid"
    assert "No support for load balancing via ingress" in ingress.answer.error_message
    assert "must be specified in the form '{kind} {name}'" in malformed.answer.error_message


async def test_deploy_refuses_a_service_whose_selector_keys_the_workload_has(
    tmp_path: Path,
) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            clash = replica_set(**{LB: '["service front"]'})
            clash["spec"]["template"]["metadata"]["labels"]["lb"] = "mine"
            refused = await bench.run(
                "deployManifest", {"namespace": "default", "manifests": [service(), clash]}
            )
            empty = replica_set(name="e", **{LB: '["service bare"]'})
            no_selector = await bench.run(
                "deployManifest",
                {"namespace": "default", "manifests": [service("bare", selector={}), empty]},
            )
            replica_sets = bench.sim.list("apps", "v1", "replicasets", "default")
    assert refused.answer.error_code == "Invalid"
    assert "no label keys in common" in refused.answer.error_message
    assert "lb" in refused.answer.error_message
    assert "non-empty selector" in no_selector.answer.error_message
    assert replica_sets == []


async def test_services_without_traffic_then_enable_and_a_managed_replicaset(
    tmp_path: Path,
) -> None:
    """``services`` writes the annotation; ``enableTraffic: false`` leaves the labels off until
    enableManifest. A ReplicaSet a Deployment owns is patched like a bare one, with a note."""
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            quiet = await bench.run(
                "deployManifest",
                {
                    "namespace": "default",
                    "manifests": [service(), replica_set()],
                    "services": ["service front"],
                    "enableTraffic": False,
                },
            )
            sim = bench.sim
            before = sim.get("apps", "v1", "replicasets", "default", "web-v000")
            target = {"kind": "ReplicaSet", "name": "web-v000", "namespace": "default"}
            enabled = await bench.run("enableManifest", target)
            after = sim.get("apps", "v1", "replicasets", "default", "web-v000")
            assert_ok(
                await bench.run(
                    "deployManifest", {"namespace": "default", "manifests": [deployment()]}
                )
            )
            (managed,) = [
                rs
                for rs in sim.list("apps", "v1", "replicasets", "default")
                if rs["metadata"]["name"].startswith("api-")
            ]
            name = managed["metadata"]["name"]
            managed_run = await bench.run(
                "disableManifest",
                {
                    "kind": "ReplicaSet",
                    "name": name,
                    "namespace": "default",
                    "loadBalancers": ["service front"],
                },
            )
    assert_ok(quiet, enabled, managed_run)
    assert before["metadata"]["annotations"][LB] == '["service front"]'
    assert "lb" not in template_labels(before)
    assert template_labels(after)["lb"] == "front"
    assert all(p["metadata"]["labels"]["lb"] == "front" for p in pods_of(sim, "web-v000"))
    statuses = [p["status"] for p in managed_run.body["phases"]]
    assert (
        f"replicaSet {name} is managed by Deployment api: its controller may treat the "
        "patched template as drift" in statuses
    )


async def test_services_annotate_only_kinds_that_receive_traffic(tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {}}
    other = replica_set("other")
    other["metadata"]["annotations"] = {LB: '["service back"]'}
    same = replica_set("same")
    same["metadata"]["annotations"] = {LB: '["service front"]'}
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            d = {"namespace": "default", "services": ["service front"], "enableTraffic": False}
            ran = await bench.run("deployManifest", {**d, "manifests": [service(), cm, same]})
            refused = await bench.run("deployManifest", {**d, "manifests": [other]})
            sim = bench.sim
            svc = sim.get("", "v1", "services", "default", "front")
            config = sim.get("", "v1", "configmaps", "default", "cfg-v000")
            rs = sim.get("apps", "v1", "replicasets", "default", "same-v000")
            left = [r["metadata"]["name"] for r in sim.list("apps", "v1", "replicasets", "default")]
    assert_ok(ran)
    assert LB not in (svc["metadata"].get("annotations") or {})
    assert LB not in (config["metadata"].get("annotations") or {})
    assert rs["metadata"]["annotations"][LB] == '["service front"]'
    assert not refused.ok
    assert "already has traffic.spinnaker.io/load-balancers annotation set to" in str(
        refused.answer
    )
    assert "other-v000" not in left
