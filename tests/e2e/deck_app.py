"""The small application the Deck views end-to-end test (test_deck_views.py) deploys into
kubesim: what Spinnaker would have deployed (moniker annotations, versioned ReplicaSets with
traffic annotations) and what it would find (objects named, not annotated)."""

from __future__ import annotations

from typing import Any

import kubesim

NS = "h4"
APP_KEY = "moniker.spinnaker.io/application"
CLUSTER_KEY = "moniker.spinnaker.io/cluster"
SEQUENCE_KEY = "moniker.spinnaker.io/sequence"
TRAFFIC_KEY = "traffic.spinnaker.io/load-balancers"
OUTCOME = "kubesim.io/outcome"


def notes(cluster: str, **extra: str) -> dict[str, str]:
    return {APP_KEY: "h4", CLUSTER_KEY: cluster, **extra}


def _meta(name: str, annotations: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, **more}
    if annotations is not None:
        meta["annotations"] = annotations
    return meta


def _pod_template(labels: dict[str, str], image: str, outcome: str = "") -> dict[str, Any]:
    template: dict[str, Any] = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "app", "image": image}]},
    }
    if outcome:
        template["metadata"]["annotations"] = {OUTCOME: outcome}
    return template


def deployment(image: str) -> dict[str, Any]:
    labels = {"app": "h4-web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta("h4-web", notes("deployment h4-web")),
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": _pod_template(labels, image)},
    }  # fmt: skip


def versioned(version: int, labels: dict[str, str], replicas: int) -> dict[str, Any]:
    name = f"h4-api-v{version:03d}"
    annotations = notes("replicaSet h4-api", **{SEQUENCE_KEY: str(version),
                                                TRAFFIC_KEY: '["service h4-api"]'})  # fmt: skip
    selector = {"version": f"v{version:03d}"}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": _meta(name, annotations, labels=dict(labels)),
        "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                 "template": _pod_template({**labels, **selector}, f"h4/api:{version}")},
    }  # fmt: skip


def service(name: str, selector: dict[str, str], annotated: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, notes(f"service {name}") if annotated else None),
        "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def ingress() -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _meta("h4-in", notes("ingress h4-in")),
        "spec": {"defaultBackend": {"service": {"name": "h4-web", "port": {"number": 80}}}},
    }


def job(name: str, outcome: str = "") -> dict[str, Any]:
    template = _pod_template({}, "h4/migrate:1", outcome)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, notes(f"job {name}")),
        "spec": {"backoffLimit": 1, "template": template},
    }


def network_policy() -> dict[str, Any]:
    """Not annotated: its application and cluster come from its name (Frigga)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("h4-db-access"),
        "spec": {
            "podSelector": {"matchLabels": {"app": "h4-db"}},
            "ingress": [{"ports": [{"protocol": "TCP", "port": 5432}]}],
        },
    }


def stateful_set() -> dict[str, Any]:
    """Not annotated: app h4, cluster h4-cache, sequence 2 from its name."""
    labels = {"app": "h4-cache"}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta("h4-cache-v002"),
        "spec": {"replicas": 1, "serviceName": "h4-cache", "selector": {"matchLabels": labels},
                 "template": _pod_template(labels, "h4/cache:2")},
    }  # fmt: skip


def deploy(sim: kubesim.Cluster) -> None:
    """Create the application, and pin the pod states the test expects."""
    sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    sim.create(deployment("h4/web:1"))
    sim.patch("apps", "v1", "deployments", NS, "h4-web",
              {"spec": {"template": {"spec": {"containers": [
                  {"name": "app", "image": "h4/web:2"}]}}}})  # fmt: skip
    sim.create(versioned(0, {"tier": "api"}, 1))  # the Service no longer selects it: disabled
    sim.create(versioned(1, {"tier": "api", "app": "h4-api"}, 2))
    sim.create(service("h4-api", {"app": "h4-api"}))
    sim.create(service("h4-web", {"app": "h4-web"}))
    sim.create(service("h4-cache", {"app": "h4-cache"}, annotated=False))
    sim.create(ingress())
    sim.create(job("h4-migrate"))
    sim.create(job("h4-migrate-bad", "fail"))
    sim.create(network_policy())
    sim.create(stateful_set())
    # Mixed states: one pod of the Deployment's new ReplicaSet never scheduled, one pod of
    # h4-api-v001 running with its container unready.
    web_pods = pods_of(sim, web_replica_sets(sim)[1])
    sim.pin_status(
        "",
        "v1",
        "pods",
        NS,
        web_pods[0]["metadata"]["name"],
        {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    )
    api_pods = pods_of(sim, "h4-api-v001")
    unready = dict(api_pods[0]["status"])
    unready["containerStatuses"] = [{**c, "ready": False} for c in unready["containerStatuses"]]
    sim.pin_status("", "v1", "pods", NS, api_pods[0]["metadata"]["name"], unready)  # fmt: skip


def web_replica_sets(sim: kubesim.Cluster) -> list[str]:
    """The Deployment's ReplicaSets, revision 1 first."""
    found = [rs for rs in sim.list("apps", "v1", "replicasets", NS)
             if rs["metadata"]["name"].startswith("h4-web-")]  # fmt: skip
    found.sort(
        key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"])
    )
    return [rs["metadata"]["name"] for rs in found]


def pods_of(sim: kubesim.Cluster, owner: str) -> list[dict[str, Any]]:
    """The pods whose controller is ``owner``, by name."""
    return sorted(
        (
            p
            for p in sim.list("", "v1", "pods", NS)
            if any(r.get("name") == owner for r in p["metadata"].get("ownerReferences") or ())
        ),
        key=lambda p: p["metadata"]["name"],
    )
