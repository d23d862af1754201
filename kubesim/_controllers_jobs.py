"""The Job controller, lite: a Job runs pods until enough succeed or too many fail.

On first sight a Job gets what the API server's defaulting would have given it (a
``batch.kubernetes.io/controller-uid`` selector and the job labels on its template,
``completions``/``parallelism`` 1, ``backoffLimit`` 6). Then, synchronously: a pod is created,
and the kubelet-lite ends it at once as its template's ``kubesim.io/outcome`` says (absent:
exit 0, ``fail``: exit 1, ``running``: never ends); a pod held back by a missing ConfigMap or
Secret stays Pending (active) until the kubelet-lite starts it, and then ends. The Job
completes (conditions SuccessCriteriaMet + Complete) when ``completions`` pods succeeded, and
fails (FailureTarget + Failed, reason BackoffLimitExceeded) when more than ``backoffLimit``
pods failed, as a real controller does; so a failing Job leaves ``backoffLimit + 1`` Failed
pods behind.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import msgspec

from kubesim._controllers import (
    commit_if_changed,
    get_live,
    new_pod,
    now,
    outcome_of,
    owned_by,
    pinned,
)
from kubesim._events import WARNING, record_event

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = ["job"]

_COMPONENT = "job-controller"
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(obj))
    return copied


def _end_pod(cluster: Cluster, pod: dict[str, Any], outcome: str) -> None:
    """The kubelet-lite runs a Job's pod to its end: Succeeded (exit 0) or Failed (exit 1).
    A pod not Running (held back by a missing ConfigMap/Secret) is left as it is."""
    if outcome in ("running", "pending") or (pod.get("status") or {}).get("phase") != "Running":
        return
    pods_type = cluster.resolve("", "v1", "pods")
    failed = outcome == "fail"
    stamp = now()
    new = _copy(pod)
    status = new["status"]
    status["phase"] = "Failed" if failed else "Succeeded"
    for condition in status.get("conditions") or ():
        if condition["type"] in ("Ready", "ContainersReady"):
            condition.update(
                status="False", reason="PodFailed" if failed else "PodCompleted", message=None
            )
            condition.pop("message")
    for container in status.get("containerStatuses") or ():
        started = (container.get("state") or {}).get("running", {}).get("startedAt", stamp)
        container.update(ready=False, started=False)
        container["state"] = {
            "terminated": {
                "exitCode": 1 if failed else 0,
                "reason": "Error" if failed else "Completed",
                "startedAt": started,
                "finishedAt": stamp,
                "containerID": container.get("containerID", ""),
            }
        }
    commit_if_changed(cluster, pods_type, pod, new)


def job(cluster: Cluster, namespace: str, name: str) -> None:
    job_type = cluster.resolve("batch", "v1", "jobs")
    pods_type = cluster.resolve("", "v1", "pods")
    current = get_live(cluster, job_type, namespace, name)
    if current is None or pinned(current):
        return  # a pinned Job runs no pods: its state is the test's
    conditions = (current.get("status") or {}).get("conditions") or ()
    if any(c.get("type") in ("Complete", "Failed") for c in conditions):
        return  # a finished Job is never looked at again
    # The API server defaulted the Job at create (kubesim._writes._job_defaults); a Job
    # given only parallelism has no completions: one succeeded pod completes it.
    spec = current.get("spec") or {}
    completions = 1 if spec.get("completions") is None else spec["completions"]
    parallelism = spec.get("parallelism", 1)
    backoff_limit = spec.get("backoffLimit", 6)
    template = spec.get("template") or {}
    outcome = outcome_of(template)
    uid = current["metadata"]["uid"]
    started = (current.get("status") or {}).get("startTime") or now()
    # A pod the kubelet-lite started late (its ConfigMap/Secret appeared) runs to its end now.
    for stored in owned_by(cluster, pods_type, namespace, uid, prefix=f"{name}-"):
        _end_pod(cluster, stored.decode(), outcome)
    while True:
        pods = [s.decode() for s in owned_by(cluster, pods_type, namespace, uid, prefix=f"{name}-")]
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
        active = len(pods) - succeeded - failed
        done = succeeded >= completions or failed > backoff_limit
        if done or active >= parallelism or spec.get("suspend"):
            break
        pod = new_pod(cluster, current, f"{name}-{secrets.token_hex(3)[:5]}", template, {})
        record_event(
            cluster, current, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}",
            component=_COMPONENT,
        )  # fmt: skip
        _end_pod(
            cluster,
            get_live(cluster, pods_type, namespace, pod["metadata"]["name"]) or pod,
            outcome,
        )
    stamp = now()
    status: dict[str, Any] = {
        "startTime": started,
        "active": active,
        "succeeded": succeeded,
        "failed": failed,
        "ready": sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"),
        "terminating": 0,
        "uncountedTerminatedPods": {},
    }
    if succeeded >= completions:
        status["completionTime"] = stamp
        status["conditions"] = [
            {"type": t, "status": "True", "lastProbeTime": stamp, "lastTransitionTime": stamp}
            for t in ("SuccessCriteriaMet", "Complete")
        ]
        record_event(cluster, current, "Completed", "Job completed", component=_COMPONENT)
    elif failed > backoff_limit:
        status["conditions"] = [
            {
                "type": t,
                "status": "True",
                "lastProbeTime": stamp,
                "lastTransitionTime": stamp,
                "reason": "BackoffLimitExceeded",
                "message": BACKOFF_MESSAGE,
            }
            for t in ("FailureTarget", "Failed")
        ]
        record_event(
            cluster, current, "BackoffLimitExceeded", BACKOFF_MESSAGE,
            component=_COMPONENT, type_=WARNING,
        )  # fmt: skip
    for field in ("active", "succeeded", "failed"):
        if status[field] == 0:
            status.pop(field)
    new = _copy(current)
    new["status"] = status
    commit_if_changed(cluster, job_type, current, new)
