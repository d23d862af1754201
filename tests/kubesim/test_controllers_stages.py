"""What Spinnaker's stages look at, on the sans-I/O cluster: rollouts that hang, fail their
progress deadline or are paused, Jobs that fail, and the Events the controllers record."""

from __future__ import annotations

from typing import Any

import kubesim

from ..agent.operations_harness import job, workload


def _deployment(name: str, outcome: str = "", replicas: int = 2) -> dict[str, Any]:
    return workload(
        "Deployment", name, image=f"{name}:1", replicas=replicas, container="app",
        namespace="default", outcome=outcome,
    )  # fmt: skip


def _job(name: str, outcome: str = "", **spec: Any) -> dict[str, Any]:
    return job(name, namespace="default", outcome=outcome, **spec)


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def _events(sim: kubesim.Cluster, kind: str, name: str) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"])
        for e in sim.list("", "v1", "events", "default")
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
    ]


def test_a_healthy_rollout_is_available_and_records_its_scaling() -> None:
    sim = kubesim.Cluster()
    sim.create(_deployment("web"))
    dep = sim.get("apps", "v1", "deployments", "default", "web")
    cond = _conditions(dep)
    assert cond["Available"]["status"] == "True"
    assert cond["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert dep["status"]["readyReplicas"] == 2
    rs = sim.list("apps", "v1", "replicasets", "default")[0]["metadata"]["name"]
    assert _events(sim, "Deployment", "web") == [
        ("Normal", "ScalingReplicaSet", f"Scaled up replica set {rs} from 0 to 2")
    ]
    created = _events(sim, "ReplicaSet", rs)
    assert [r for _, r, _ in created] == ["SuccessfulCreate", "SuccessfulCreate"]
    (event,) = [
        e for e in sim.list("", "v1", "events", "default") if e["reason"] == "ScalingReplicaSet"
    ]
    assert event["involvedObject"]["uid"] == dep["metadata"]["uid"]
    assert event["source"] == {"component": "deployment-controller"}


def test_unready_pods_leave_the_rollout_unavailable() -> None:
    sim = kubesim.Cluster()
    sim.create(_deployment("web", "unready"))
    dep = sim.get("apps", "v1", "deployments", "default", "web")
    cond = _conditions(dep)
    assert cond["Available"]["status"] == "False"
    assert cond["Available"]["reason"] == "MinimumReplicasUnavailable"
    assert cond["Progressing"]["reason"] == "ReplicaSetUpdated"
    assert "readyReplicas" not in dep["status"]
    assert dep["status"]["unavailableReplicas"] == 2
    pods = sim.list("", "v1", "pods", "default")
    assert len(pods) == 2
    assert all(not p["status"]["containerStatuses"][0]["ready"] for p in pods)


def test_a_rollout_past_its_deadline_reports_progress_deadline_exceeded() -> None:
    sim = kubesim.Cluster()
    sim.create(_deployment("web", "deadline-exceeded"))
    dep = sim.get("apps", "v1", "deployments", "default", "web")
    progressing = _conditions(dep)["Progressing"]
    assert progressing["status"] == "False"
    assert progressing["reason"] == "ProgressDeadlineExceeded"
    assert progressing["message"].endswith("has timed out progressing.")


def test_a_paused_deployment_says_so_and_resuming_rolls_it_out() -> None:
    sim = kubesim.Cluster()
    sim.create(_deployment("web"))
    sim.patch("apps", "v1", "deployments", "default", "web", {"spec": {"paused": True}})
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "web:2"}]}}}}
    sim.patch("apps", "v1", "deployments", "default", "web", patch)
    dep = sim.get("apps", "v1", "deployments", "default", "web")
    progressing = _conditions(dep)["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("Unknown", "DeploymentPaused")
    assert progressing["message"] == "Deployment is paused"
    assert len(sim.list("apps", "v1", "replicasets", "default")) == 1  # paused: no new RS
    sim.patch("apps", "v1", "deployments", "default", "web", {"spec": {"paused": False}})
    dep = sim.get("apps", "v1", "deployments", "default", "web")
    assert _conditions(dep)["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert len(sim.list("apps", "v1", "replicasets", "default")) == 2


def _one_pod_unready(sim: kubesim.Cluster) -> dict[str, Any]:
    pod = sim.list("", "v1", "pods", "default")[0]
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition["status"] = "False"
    sim.commit(sim.resolve("", "v1", "pods"), pod, added=False)  # as the kubelet writes it
    sim.reconcile()
    return sim.get("apps", "v1", "deployments", "default", "web")


def test_a_recreate_deployment_short_of_one_pod_is_unavailable() -> None:
    # A rolling update may run 25 % short and stay Available; Recreate has no such room.
    results = {}
    for strategy in ("RollingUpdate", "Recreate"):
        sim = kubesim.Cluster()
        dep = _deployment("web", replicas=4)
        dep["spec"]["strategy"] = {"type": strategy}
        sim.create(dep)
        live = _one_pod_unready(sim)
        assert live["status"]["readyReplicas"] == 3
        results[strategy] = _conditions(live)["Available"]["status"]
    assert results == {"RollingUpdate": "True", "Recreate": "False"}


def test_a_job_succeeds_with_a_succeeded_pod_and_an_event() -> None:
    sim = kubesim.Cluster()
    sim.create(_job("migrate"))
    job = sim.get("batch", "v1", "jobs", "default", "migrate")
    assert job["status"]["succeeded"] == 1
    assert list(_conditions(job)) == ["SuccessCriteriaMet", "Complete"]
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    (pod,) = sim.list("", "v1", "pods", "default")
    assert pod["metadata"]["labels"]["job-name"] == "migrate"
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert sorted(r for _, r, _ in _events(sim, "Job", "migrate")) == [
        "Completed",
        "SuccessfulCreate",
    ]


def test_a_jobs_defaults_are_in_the_create_response() -> None:
    sim = kubesim.Cluster()
    created = sim.create(_job("migrate"))
    uid = created["metadata"]["uid"]
    spec = created["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == "migrate"
    assert labels["controller-uid"] == uid
    assert sim.get("batch", "v1", "jobs", "default", "migrate")["spec"] == spec  # no later write


def test_a_job_given_only_parallelism_keeps_completions_unset() -> None:
    sim = kubesim.Cluster()
    created = sim.create(_job("queue", parallelism=2))
    job = sim.get("batch", "v1", "jobs", "default", "queue")
    assert "completions" not in created["spec"]
    assert "completions" not in job["spec"]
    assert created["spec"]["parallelism"] == 2
    assert list(_conditions(job)) == ["SuccessCriteriaMet", "Complete"]


def test_a_failing_job_retries_to_its_backoff_limit_then_fails() -> None:
    sim = kubesim.Cluster()
    sim.create(_job("migrate", "fail", backoffLimit=2))
    job = sim.get("batch", "v1", "jobs", "default", "migrate")
    assert job["status"]["failed"] == 3
    failed = _conditions(job)["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "BackoffLimitExceeded")
    assert failed["message"] == "Job has reached the specified backoff limit"
    pods = sim.list("", "v1", "pods", "default")
    assert [p["status"]["phase"] for p in pods] == ["Failed"] * 3
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (1, "Error")
    warning = ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert warning in _events(sim, "Job", "migrate")  # listed by name, not in order


def test_a_running_job_stays_active() -> None:
    sim = kubesim.Cluster()
    sim.create(_job("serve", "running"))
    job = sim.get("batch", "v1", "jobs", "default", "serve")
    assert job["status"]["active"] == 1
    assert "conditions" not in job["status"]
    (pod,) = sim.list("", "v1", "pods", "default")
    assert pod["status"]["phase"] == "Running"


def _set(kind: str, name: str, image: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": image}]},
        },
    }
    if kind == "StatefulSet":
        spec.update(replicas=1, serviceName=name)
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def _revisions(sim: kubesim.Cluster) -> dict[str, tuple[int, str]]:
    return {
        r["metadata"]["name"]: (
            r["revision"],
            r["data"]["spec"]["template"]["spec"]["containers"][0]["image"],
        )
        for r in sim.list("apps", "v1", "controllerrevisions", "default")
    }


def test_statefulsets_and_daemonsets_keep_their_history_in_controller_revisions() -> None:
    sim = kubesim.Cluster()
    for kind, plural in (("StatefulSet", "statefulsets"), ("DaemonSet", "daemonsets")):
        sim.create({**_set(kind, "db", "db:1"), "metadata": {"name": "db", "namespace": "default"}})
        for image in ("db:2", "db:1"):  # roll forward, then back to the first template
            patch = {
                "spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
            }
            sim.patch("apps", "v1", plural, "default", "db", patch)
        revisions = _revisions(sim)
        assert sorted(revisions.values()) == [(2, "db:2"), (3, "db:1")]  # db:1 moved to 3
        (cr,) = [
            r
            for r in sim.list("apps", "v1", "controllerrevisions", "default")
            if r["revision"] == 3
        ]
        assert cr["metadata"]["ownerReferences"][0]["kind"] == kind
        assert cr["data"]["spec"]["template"]["$patch"] == "replace"
        assert cr["metadata"]["labels"]["app"] == "db"
        if kind == "StatefulSet":
            status = sim.get("apps", "v1", plural, "default", "db")["status"]
            assert status["updateRevision"] == cr["metadata"]["name"]
        sim.delete("apps", "v1", plural, "default", "db")
        assert sim.list("apps", "v1", "controllerrevisions", "default") == []


def test_pinned_statuses_stay_as_the_test_set_them() -> None:
    sim = kubesim.Cluster()
    sim.create(_deployment("web"))
    (rs,) = sim.list("apps", "v1", "replicasets", "default")
    first, second = sim.list("", "v1", "pods", "default")
    pending = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    sim.pin_status("", "v1", "pods", "default", first["metadata"]["name"], pending)
    counts = {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1}
    rs_name = rs["metadata"]["name"]
    sim.pin_status("apps", "v1", "replicasets", "default", rs_name, counts)
    # A change that runs every controller again (a scale) leaves the pinned statuses alone.
    sim.patch("apps", "v1", "deployments", "default", "web", {"spec": {"replicas": 3}})
    assert sim.get("", "v1", "pods", "default", first["metadata"]["name"])["status"] == pending
    assert sim.get("", "v1", "pods", "default", second["metadata"]["name"])["status"]["phase"] == (
        "Running"
    )
    assert sim.get("apps", "v1", "replicasets", "default", rs_name)["status"] == counts
    assert len(sim.list("", "v1", "pods", "default")) == 3  # its pods are still managed


def test_a_pinned_job_runs_nothing_and_pending_pods_never_start() -> None:
    sim = kubesim.Cluster()
    sim.create(_job("stuck", "pending"))
    (pod,) = sim.list("", "v1", "pods", "default")
    assert pod["status"]["phase"] == "Pending"
    assert "containerStatuses" not in pod["status"]
    sim.create(_job("pinned"))
    failed = {"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                           "reason": "BackoffLimitExceeded"}]}  # fmt: skip
    sim.pin_status("batch", "v1", "jobs", "default", "pinned", failed)
    job = sim.get("batch", "v1", "jobs", "default", "pinned")
    assert job["status"] == failed
    assert job["metadata"]["annotations"]["kubesim.io/pin-status"] == "true"


def test_replica_sets_carry_their_deployments_annotations() -> None:
    sim = kubesim.Cluster()
    notes = {"moniker.spinnaker.io/cluster": "deployment web",
             "kubectl.kubernetes.io/last-applied-configuration": "{}"}  # fmt: skip
    deployment = _deployment("web")
    deployment["metadata"]["annotations"] = notes
    sim.create(deployment)
    (rs,) = sim.list("apps", "v1", "replicasets", "default")
    annotations = rs["metadata"]["annotations"]
    assert annotations["moniker.spinnaker.io/cluster"] == "deployment web"
    assert "kubectl.kubernetes.io/last-applied-configuration" not in annotations
    assert annotations["deployment.kubernetes.io/revision"] == "1"
