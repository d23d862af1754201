"""The kubelet-lite holds back a pod whose ConfigMap or Secret is missing, as a real kubelet
does (CreateContainerConfigError for env/envFrom, ContainerCreating + FailedMount for volumes),
and starts it once the object is written; on the sans-I/O cluster (no network)."""

from __future__ import annotations

from typing import Any

import kubesim


def _pod_spec(**container: Any) -> dict[str, Any]:
    return {"containers": [{"name": "app", "image": "web:1", **container}]}


def _workload(kind: str, name: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    labels = {"app": name}
    template = {"metadata": {"labels": labels}, "spec": spec}
    if kind == "Job":
        spec["restartPolicy"] = "Never"
        body: dict[str, Any] = {"template": template, **extra}
    else:
        body = {"selector": {"matchLabels": labels}, "template": template, **extra}
    return {
        "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": body,
    }


def _config(kind: str, name: str, namespace: str = "default", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def _pods(sim: kubesim.Cluster, prefix: str) -> list[dict[str, Any]]:
    return [
        p for p in sim.list("", "v1", "pods", "default") if p["metadata"]["name"].startswith(prefix)
    ]


def _waiting(pod: dict[str, Any], key: str = "containerStatuses") -> list[dict[str, Any]]:
    return [c["state"].get("waiting") for c in pod["status"].get(key) or ()]


def _events(sim: kubesim.Cluster, pod: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"])
        for e in sim.list("", "v1", "events", "default")
        if e["involvedObject"]["name"] == pod["metadata"]["name"]
    ]


def test_envfrom_a_missing_config_map_holds_pods_until_it_is_created() -> None:
    sim = kubesim.Cluster()
    spec = _pod_spec(envFrom=[{"configMapRef": {"name": "web-config"}}])
    sim.create(_workload("Deployment", "web", spec, replicas=2))
    sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    sim.create(_config("ConfigMap", "web-config", "other"))  # another namespace: no help
    pods = _pods(sim, "web-")
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Pending"
        assert _waiting(pod) == [
            {"reason": "CreateContainerConfigError", "message": 'configmap "web-config" not found'}
        ]
        assert ("Warning", "Failed", 'Error: configmap "web-config" not found') in _events(sim, pod)
    deployment = sim.get("apps", "v1", "deployments", "default", "web")
    assert deployment["status"].get("availableReplicas", 0) == 0

    sim.create(_config("ConfigMap", "web-config", A="1"))
    pods = _pods(sim, "web-")
    assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]
    assert all(c["ready"] for p in pods for c in p["status"]["containerStatuses"])
    deployment = sim.get("apps", "v1", "deployments", "default", "web")
    assert deployment["status"]["availableReplicas"] == 2


def test_a_missing_key_or_secret_in_env_is_a_config_error_unless_optional() -> None:
    sim = kubesim.Cluster()
    sim.create(_config("ConfigMap", "settings", A="1"))
    key_ref = {"configMapKeyRef": {"name": "settings", "key": "B"}}
    sim.create(
        _workload("ReplicaSet", "keys", _pod_spec(env=[{"name": "B", "valueFrom": key_ref}]))
    )
    secret_ref = {"secretKeyRef": {"name": "creds", "key": "pw"}}
    sim.create(
        _workload("ReplicaSet", "creds", _pod_spec(env=[{"name": "PW", "valueFrom": secret_ref}]))
    )
    optional = {"secretRef": {"name": "absent", "optional": True}}
    sim.create(_workload("ReplicaSet", "fine", _pod_spec(envFrom=[optional])))
    (keys,) = _pods(sim, "keys-")
    assert _waiting(keys) == [
        {
            "reason": "CreateContainerConfigError",
            "message": "couldn't find key B in ConfigMap default/settings",
        }
    ]
    (creds,) = _pods(sim, "creds-")
    assert _waiting(creds)[0]["message"] == 'secret "creds" not found'
    (fine,) = _pods(sim, "fine-")
    assert fine["status"]["phase"] == "Running"
    sim.create(_config("Secret", "creds", pw="cHc="))
    assert _pods(sim, "creds-")[0]["status"]["phase"] == "Running"


def test_a_missing_volume_source_leaves_containers_creating_with_failed_mount() -> None:
    sim = kubesim.Cluster()
    volumes = [
        {"name": "tls", "secret": {"secretName": "web-tls"}},
        {"name": "all", "projected": {"sources": [{"configMap": {"name": "extra"}}]}},
    ]
    spec = {**_pod_spec(), "volumes": volumes}
    sim.create(_workload("ReplicaSet", "web", spec))
    (pod,) = _pods(sim, "web-")
    assert pod["status"]["phase"] == "Pending"
    assert "podIP" not in pod["status"]
    assert _waiting(pod) == [{"reason": "ContainerCreating"}]
    message = 'MountVolume.SetUp failed for volume "tls" : secret "web-tls" not found'
    assert ("Warning", "FailedMount", message) in _events(sim, pod)
    sim.create(_config("Secret", "web-tls"))
    (pod,) = _pods(sim, "web-")
    assert pod["status"]["phase"] == "Pending"  # the projected ConfigMap is still missing
    message = 'MountVolume.SetUp failed for volume "all" : configmap "extra" not found'
    assert ("Warning", "FailedMount", message) in _events(sim, pod)
    sim.create(_config("ConfigMap", "extra"))
    assert _pods(sim, "web-")[0]["status"]["phase"] == "Running"


def test_an_init_container_config_error_keeps_the_app_containers_initializing() -> None:
    sim = kubesim.Cluster()
    init = {"name": "setup", "image": "busybox", "envFrom": [{"secretRef": {"name": "s"}}]}
    spec = {**_pod_spec(), "initContainers": [init]}
    sim.create(_workload("ReplicaSet", "web", spec))
    (pod,) = _pods(sim, "web-")
    assert _waiting(pod, "initContainerStatuses")[0]["reason"] == "CreateContainerConfigError"
    assert _waiting(pod) == [{"reason": "PodInitializing"}]
    initialized = [c for c in pod["status"]["conditions"] if c["type"] == "Initialized"]
    assert initialized[0]["status"] == "False"


def test_held_back_job_and_set_pods_are_not_done_or_ready_until_their_config_exists() -> None:
    sim = kubesim.Cluster()
    env = _pod_spec(envFrom=[{"configMapRef": {"name": "cfg"}}])
    sim.create(_workload("Job", "migrate", env))
    sim.create(
        _workload(
            "StatefulSet",
            "db",
            _pod_spec(envFrom=[{"configMapRef": {"name": "cfg"}}]),
            replicas=2,
            serviceName="db",
        )
    )
    job = sim.get("batch", "v1", "jobs", "default", "migrate")["status"]
    assert job["active"] == 1
    assert "conditions" not in job
    sts = sim.get("apps", "v1", "statefulsets", "default", "db")["status"]
    assert sts["readyReplicas"] == 0
    sim.create(_config("ConfigMap", "cfg"))
    job = sim.get("batch", "v1", "jobs", "default", "migrate")["status"]
    assert job["succeeded"] == 1
    assert [c["type"] for c in job["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert sim.get("apps", "v1", "statefulsets", "default", "db")["status"]["readyReplicas"] == 2
