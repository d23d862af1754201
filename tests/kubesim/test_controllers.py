"""The lite controllers and deletion cascades, on the sans-I/O cluster (no network)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import kubesim
from kubesim._watch import WatchCursor, WatchOptions


def _workload(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    labels = {"app": name}
    group = "batch/v1" if kind == "Job" else "apps/v1"
    template: dict[str, Any] = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "app", "image": f"{name}:1"}]},
    }
    if kind == "Job":
        template["spec"]["restartPolicy"] = "Never"
        body: dict[str, Any] = {"template": template, **spec}
    else:
        body = {"selector": {"matchLabels": labels}, "template": template, **spec}
    meta = {"name": name, "namespace": "default"}
    return {"apiVersion": group, "kind": kind, "metadata": meta, "spec": body}


def test_statefulset_daemonset_and_job_report_done() -> None:
    sim = kubesim.Cluster()
    sim.create(_workload("StatefulSet", "db", replicas=3, serviceName="db"))
    sim.create(_workload("DaemonSet", "agent"))
    sim.create(_workload("Job", "migrate", completions=2))
    pods = sorted(p["metadata"]["name"] for p in sim.list("", "v1", "pods", "default"))
    assert [p for p in pods if p.startswith("db-")] == ["db-0", "db-1", "db-2"]
    assert len([p for p in pods if p.startswith("agent-")]) == 1
    sts = sim.get("apps", "v1", "statefulsets", "default", "db")["status"]
    assert sts["readyReplicas"] == 3
    assert sts["currentRevision"] == sts["updateRevision"]
    ds = sim.get("apps", "v1", "daemonsets", "default", "agent")["status"]
    assert ds["numberReady"] == ds["desiredNumberScheduled"] == 1
    job = sim.get("batch", "v1", "jobs", "default", "migrate")["status"]
    assert job["succeeded"] == 2
    assert [c["type"] for c in job["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    sim.patch("apps", "v1", "statefulsets", "default", "db", {"spec": {"replicas": 1}})
    left = [p["metadata"]["name"] for p in sim.list("", "v1", "pods", "default")]
    assert [p for p in left if p.startswith("db-")] == ["db-0"]


def test_foreground_deletion_marks_the_owner_first() -> None:
    sim = kubesim.Cluster()
    sim.create(_workload("Deployment", "web", replicas=1))
    rtype = sim.resolve("apps", "v1", "deployments")
    cursor = WatchCursor(sim, rtype, WatchOptions(resource_version=str(sim.resource_version)))
    sim.delete("apps", "v1", "deployments", "default", "web", propagation_policy="Foreground")
    events = [msgspec.json.decode(line) for line in cursor.take(1 << 20).splitlines()]
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    assert events[0]["object"]["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert sim.list("apps", "v1", "replicasets", "default") == []
    assert sim.list("", "v1", "pods", "default") == []


def test_finalizers_hold_an_object_until_removed() -> None:
    sim = kubesim.Cluster()
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": "default", "finalizers": ["example.com/x"]},
    }
    sim.create(cm)
    marked = sim.delete("", "v1", "configmaps", "default", "held")
    assert marked["metadata"]["deletionTimestamp"]
    assert sim.get("", "v1", "configmaps", "default", "held")["metadata"]["finalizers"]
    sim.patch("", "v1", "configmaps", "default", "held", {"metadata": {"finalizers": None}})
    with pytest.raises(kubesim.ApiError) as gone:
        sim.get("", "v1", "configmaps", "default", "held")
    assert gone.value.code == 404


def test_service_gets_a_cluster_ip() -> None:
    sim = kubesim.Cluster()
    svc = sim.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        }
    )
    assert svc["spec"]["clusterIP"].startswith("10.96.")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
