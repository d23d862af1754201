"""Controllers, lite: Deployments own ReplicaSets, ReplicaSets and StatefulSets own Pods,
and a kubelet-lite makes new Pods Running. Synchronous: ``_reconcile.reconcile`` runs after each
write until nothing is dirty, so a deploy, a scale, a rollback or a restart is visible as the
events a real cluster would emit (RS created, pods added, statuses updated), in order.

A test steers a rollout with the pod template annotation ``kubesim.io/outcome`` (OUTCOME):
``unready`` (pods run but never become Ready: the rollout hangs, Available=False),
``deadline-exceeded`` (the same, and the Deployment reports ProgressDeadlineExceeded at once,
as if ``progressDeadlineSeconds`` had passed), ``fail`` (containers crash: CrashLoopBackOff
for long-running pods, exit code 1 for a Job's pods), ``running`` (a Job's pods never end),
``pending`` (pods are never started: phase Pending, unschedulable).

A test pins any status with ``Cluster.pin_status``: the object gets the annotation
``kubesim.io/pin-status`` (PIN) and the status given, and the controllers never write the
status of an object that carries it (a pod's kubelet, a ReplicaSet's or a Job's controller),
so a pod in any phase, a ReplicaSet with any counts and a Job in any state are reachable.

Rollback the kubectl way works because a Deployment whose template equals an old
ReplicaSet's (pod-template-hash) adopts that ReplicaSet again and bumps its
``deployment.kubernetes.io/revision`` to the next number.
"""

from __future__ import annotations

import hashlib
import random
import secrets
from typing import TYPE_CHECKING, Any

import msgspec

from kubesim._deletes import delete
from kubesim._events import WARNING, record_event
from kubesim._meta import controller_ref, new_uid, now_rfc3339
from kubesim._podconfig import config_problem, pending_status
from kubesim._resources import ResourceType
from kubesim._store import Stored

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = [
    "commit_if_changed",
    "deployment",
    "get_live",
    "kubelet",
    "new_pod",
    "now",
    "outcome_of",
    "owned_by",
    "pinned",
    "pod_ready",
    "pod_status",
    "replicaset",
    "template_hash",
]

REVISION = "deployment.kubernetes.io/revision"
OUTCOME = "kubesim.io/outcome"
PIN = "kubesim.io/pin-status"
NOT_READY = frozenset({"unready", "deadline-exceeded", "fail"})
HASH_LABEL = "pod-template-hash"
MANAGER = "kube-controller-manager"
_RS_CONTROLLER = "replicaset-controller"
_DEPLOYMENT_CONTROLLER = "deployment-controller"


def template_hash(template: dict[str, Any]) -> str:
    """A stable short hash of a pod template (without its own hash label)."""
    template = msgspec.json.decode(msgspec.json.encode(template))
    labels = (template.get("metadata") or {}).get("labels") or {}
    labels.pop(HASH_LABEL, None)
    digest = hashlib.sha256(msgspec.json.encode(template, order="sorted")).hexdigest()
    return "".join("bcdfghjklmnpqrstvwxz2456789"[int(c, 16)] for c in digest[:10])


_ids = random.Random()  # simulated image and container IDs need no cryptographic randomness


def _hex64() -> str:
    return f"{_ids.getrandbits(256):064x}"


def pinned(obj: dict[str, Any]) -> bool:
    """Whether a test pinned the object's status (PIN): no controller writes it."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(PIN) == "true"


def outcome_of(template: dict[str, Any]) -> str:
    """The OUTCOME annotation of a pod template (or a pod), ``""`` when absent."""
    notes = (template.get("metadata") or {}).get("annotations") or {}
    return str(notes.get(OUTCOME) or "")


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _pending_status(now: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": now,
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu.",
            }
        ],
        "qosClass": "BestEffort",
    }


def pod_status(spec: dict[str, Any], now: str, ip: str, outcome: str = "") -> dict[str, Any]:
    """A Running pod status for ``spec``, as a kubelet would report it: Ready, or, for an
    ``outcome`` in NOT_READY, running unready (``fail``: crash-looping); ``pending``: never
    scheduled."""
    if outcome == "pending":
        return _pending_status(now)
    ready = outcome not in NOT_READY
    names = [c.get("name", "app") for c in spec.get("containers") or []]
    conditions = []
    for t in (
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ):
        condition: dict[str, Any] = {
            "type": t,
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if not ready and t in ("Ready", "ContainersReady"):
            condition["status"] = "False"
            condition["reason"] = "ContainersNotReady"
            condition["message"] = f"containers with unready status: [{' '.join(names)}]"
        conditions.append(condition)
    containers = []
    for c in spec.get("containers") or []:
        state: dict[str, Any] = {"running": {"startedAt": now}}
        extra: dict[str, Any] = {}
        if outcome == "fail":
            state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off 10s restarting failed container={c.get('name', 'app')}",
                }
            }
            extra["lastState"] = {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": now,
                    "finishedAt": now,
                }
            }
        containers.append(
            {
                "name": c.get("name", "app"),
                "ready": ready,
                "restartCount": 1 if outcome == "fail" else 0,
                "started": outcome != "fail",
                "image": c.get("image", ""),
                "imageID": f"docker.io/library/{c.get('image', 'app')}@sha256:{_hex64()}",
                "containerID": f"containerd://{_hex64()}",
                "state": state,
                **extra,
            }
        )
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": "10.0.0.10",
        "hostIPs": [{"ip": "10.0.0.10"}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "containerStatuses": containers,
        "qosClass": "BestEffort",
    }


def _pod_ip(cluster: Cluster) -> str:
    n = cluster.resource_version
    return f"10.244.{(n >> 8) & 255}.{n & 255}"


def now() -> str:
    return now_rfc3339()


def owned_by(cluster: Cluster, rtype: ResourceType, namespace: str, owner_uid: str,
           prefix: str = "") -> list[Stored]:  # fmt: skip
    """Objects of ``rtype`` in ``namespace`` (names starting with ``prefix``) owned by uid."""
    store = cluster.store(rtype)
    keys, lo, hi = store.key_range(namespace, (namespace, prefix) if prefix else None)
    needle = owner_uid.encode()
    found: list[Stored] = []
    for key in keys[lo:hi]:
        if prefix and not key[1].startswith(prefix):
            break
        stored = store.objects[key]
        if needle in stored.raw:
            refs = stored.decode()["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == owner_uid for r in refs):
                found.append(stored)
    return found


def commit_if_changed(cluster: Cluster, rtype: ResourceType, old: dict[str, Any],
                       new: dict[str, Any]) -> None:  # fmt: skip
    if old != new:
        cluster.commit(rtype, new, added=False)


def get_live(
    cluster: Cluster, rtype: ResourceType, namespace: str, name: str
) -> dict[str, Any] | None:
    stored = cluster.store(rtype).objects.get((namespace, name))
    if stored is None:
        return None
    obj = stored.decode()
    if obj["metadata"].get("deletionTimestamp"):
        return None
    return obj


_KUBELET = "kubelet"


def _waiting(status: dict[str, Any]) -> list[Any]:
    return [
        (c.get("state") or {}).get("waiting")
        for key in ("initContainerStatuses", "containerStatuses")
        for c in status.get(key) or ()
    ]


def kubelet(cluster: Cluster, namespace: str, name: str) -> None:
    """Start a new pod, or one held back by a missing ConfigMap/Secret (``_podconfig``)."""
    pods = cluster.resolve("", "v1", "pods")
    pod = get_live(cluster, pods, namespace, name)
    status = (pod or {}).get("status") or {}
    if pod is None or status.get("phase") == "Running":
        return
    if pinned(pod) or outcome_of(pod) == "pending":
        return
    new = msgspec.json.decode(msgspec.json.encode(pod))
    spec = new.setdefault("spec", {})
    spec.setdefault("nodeName", "kubesim-node-1")
    problem = config_problem(cluster, namespace, spec)
    if problem is None:
        new["status"] = pod_status(spec, now(), _pod_ip(cluster), outcome_of(pod))
    else:
        cluster.hold_pod(namespace, name)
        # Every retry that fails is an event (a real kubelet's repeat, aggregated there).
        record_event(
            cluster, pod, problem.event_reason, problem.event_message,
            component=_KUBELET, type_=WARNING,
        )  # fmt: skip
        fresh = pending_status(spec, status.get("startTime") or now(), _pod_ip(cluster), problem)
        if _waiting(fresh) == _waiting(status):
            return  # held back as it was: the pod itself has nothing new to say
        new["status"] = fresh
    commit_if_changed(cluster, pods, pod, new)


def new_pod(cluster: Cluster, owner: dict[str, Any], name: str, template: dict[str, Any],
             extra_labels: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """Create a pod of ``owner`` from ``template``, already running (the kubelet-lite's work
    done at once), or Pending when a ConfigMap/Secret it needs is missing; returns it as
    stored."""
    pods = cluster.resolve("", "v1", "pods")
    tmeta = template.get("metadata") or {}
    spec = msgspec.json.decode(msgspec.json.encode(template.get("spec") or {}))
    spec.setdefault("nodeName", "kubesim-node-1")
    spec.setdefault("restartPolicy", "Always")
    stamp = now()
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner["metadata"]["namespace"],
            "uid": new_uid(),
            "creationTimestamp": stamp,
            "labels": {**(tmeta.get("labels") or {}), **extra_labels},
            "ownerReferences": [controller_ref(owner)],
        },
        "spec": spec,
    }
    problem = config_problem(cluster, pod["metadata"]["namespace"], spec)
    if problem is None:
        pod["status"] = pod_status(spec, stamp, _pod_ip(cluster), outcome_of(template))
    else:
        pod["status"] = pending_status(spec, stamp, _pod_ip(cluster), problem)
    if tmeta.get("annotations"):
        pod["metadata"]["annotations"] = dict(tmeta["annotations"])
    cluster.commit(pods, pod, added=True)
    if problem is not None:
        cluster.hold_pod(pod["metadata"]["namespace"], name)
        record_event(
            cluster, pod, problem.event_reason, problem.event_message,
            component=_KUBELET, type_=WARNING,
        )  # fmt: skip
    return pod


def replicaset(cluster: Cluster, namespace: str, name: str) -> None:
    rs_type = cluster.resolve("apps", "v1", "replicasets")
    pods_type = cluster.resolve("", "v1", "pods")
    rs = get_live(cluster, rs_type, namespace, name)
    if rs is None:
        return
    desired = (rs.get("spec") or {}).get("replicas", 1)
    uid = rs["metadata"]["uid"]
    pods = owned_by(cluster, pods_type, namespace, uid, prefix=f"{name}-")
    template = (rs.get("spec") or {}).get("template") or {}
    for _ in range(desired - len(pods)):
        pod = new_pod(cluster, rs, f"{name}-{secrets.token_hex(3)[:5]}", template, {})
        record_event(
            cluster, rs, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}",
            component=_RS_CONTROLLER,
        )  # fmt: skip
    if len(pods) > desired:
        for victim in sorted(pods, key=lambda s: s.rv, reverse=True)[: len(pods) - desired]:
            delete(cluster, pods_type, namespace, victim.name, grace_period=0)
            record_event(
                cluster, rs, "SuccessfulDelete", f"Deleted pod: {victim.name}",
                component=_RS_CONTROLLER,
            )  # fmt: skip
    live = [s.decode() for s in owned_by(cluster, pods_type, namespace, uid, prefix=f"{name}-")]
    count = len(live)
    ready = sum(1 for pod in live if pod_ready(pod))
    new = msgspec.json.decode(msgspec.json.encode(rs))
    new["status"] = {
        "replicas": count,
        "fullyLabeledReplicas": count,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": rs["metadata"].get("generation", 1),
    }
    for field in ("readyReplicas", "availableReplicas", "fullyLabeledReplicas"):
        if new["status"][field] == 0:
            new["status"].pop(field)
    if pinned(rs):
        return  # its pods are managed; its status is the test's
    commit_if_changed(cluster, rs_type, rs, new)


def _revision(obj: dict[str, Any]) -> int:
    try:
        return int((obj["metadata"].get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def deployment(cluster: Cluster, namespace: str, name: str) -> None:
    d_type = cluster.resolve("apps", "v1", "deployments")
    rs_type = cluster.resolve("apps", "v1", "replicasets")
    dep = get_live(cluster, d_type, namespace, name)
    if dep is None:
        return
    spec = dep.get("spec") or {}
    replicas = spec.get("replicas", 1)
    template = spec.get("template") or {}
    digest = template_hash(template)
    owned = [s.decode() for s in owned_by(cluster, rs_type, namespace, dep["metadata"]["uid"])]
    newest = max((_revision(rs) for rs in owned), default=0)
    current = next(
        (rs for rs in owned if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == digest), None
    )
    if spec.get("paused"):
        current = current or (max(owned, key=_revision) if owned else None)
    elif current is None:
        current = _create_rs(cluster, dep, digest, newest + 1)
        owned.append(current)
    elif _revision(current) < newest:
        updated = msgspec.json.decode(msgspec.json.encode(current))
        updated["metadata"].setdefault("annotations", {})[REVISION] = str(newest + 1)
        cluster.commit(rs_type, updated, added=False)
    if current is not None and not spec.get("paused"):
        for rs in owned:
            want = replicas if rs["metadata"]["uid"] == current["metadata"]["uid"] else 0
            fresh = get_live(cluster, rs_type, namespace, rs["metadata"]["name"])
            if fresh is not None and (fresh.get("spec") or {}).get("replicas") != want:
                before = (fresh.get("spec") or {}).get("replicas", 1)
                way = "up" if want > before else "down"
                record_event(
                    cluster, dep, "ScalingReplicaSet",
                    f"Scaled {way} replica set {rs['metadata']['name']} from {before} to {want}",
                    component=_DEPLOYMENT_CONTROLLER,
                )  # fmt: skip
                fresh["spec"]["replicas"] = want
                fresh["metadata"].setdefault("annotations", {})[
                    "deployment.kubernetes.io/desired-replicas"
                ] = str(replicas)
                fresh["metadata"]["generation"] = fresh["metadata"].get("generation", 1) + 1
                cluster.commit(rs_type, fresh, added=False)
            replicaset(cluster, namespace, rs["metadata"]["name"])
        _trim_history(cluster, dep, current["metadata"]["uid"])
    _deployment_status(cluster, dep, current)


# What the Deployment controller does not copy from a Deployment's annotations to its
# ReplicaSets (deploymentutil's skipped annotations); the rest are copied, so a ReplicaSet
# carries its Deployment's moniker (Spinnaker's clusters rely on it).
_NOT_COPIED = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        REVISION,
        "deployment.kubernetes.io/revision-history",
        "deployment.kubernetes.io/desired-replicas",
        "deployment.kubernetes.io/max-replicas",
        "deprecated.deployment.rollback.to",
    }
)


def _create_rs(cluster: Cluster, dep: dict[str, Any], digest: str, revision: int) -> dict[str, Any]:
    rs_type = cluster.resolve("apps", "v1", "replicasets")
    spec = dep.get("spec") or {}
    template = msgspec.json.decode(msgspec.json.encode(spec.get("template") or {}))
    tmeta = template.setdefault("metadata", {})
    tmeta.setdefault("labels", {})[HASH_LABEL] = digest
    selector = msgspec.json.decode(msgspec.json.encode(spec.get("selector") or {}))
    selector.setdefault("matchLabels", {})[HASH_LABEL] = digest
    rs: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{dep['metadata']['name']}-{digest}",
            "namespace": dep["metadata"]["namespace"],
            "uid": new_uid(),
            "creationTimestamp": now(),
            "generation": 1,
            "labels": dict(tmeta["labels"]),
            "annotations": {
                **{
                    k: v
                    for k, v in (dep["metadata"].get("annotations") or {}).items()
                    if k not in _NOT_COPIED
                },
                REVISION: str(revision),
                "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                "deployment.kubernetes.io/max-replicas": str(spec.get("replicas", 1) + 1),
            },
            "ownerReferences": [controller_ref(dep)],
        },
        "spec": {"replicas": 0, "selector": selector, "template": template},
    }
    cluster.commit(rs_type, rs, added=True)
    return rs


def _trim_history(cluster: Cluster, dep: dict[str, Any], current_uid: str) -> None:
    rs_type = cluster.resolve("apps", "v1", "replicasets")
    limit = (dep.get("spec") or {}).get("revisionHistoryLimit", 10)
    old = [
        s.decode()
        for s in owned_by(cluster, rs_type, dep["metadata"]["namespace"], dep["metadata"]["uid"])
    ]
    old = [rs for rs in old if rs["metadata"]["uid"] != current_uid]
    old.sort(key=_revision)
    for rs in old[: max(0, len(old) - limit)]:
        delete(cluster, rs_type, rs["metadata"]["namespace"], rs["metadata"]["name"])


def _max_unavailable(spec: dict[str, Any], want: int) -> int:
    """The rolling update's maxUnavailable as a count (default 25 %, rounded down); 0 for
    Recreate (deploymentutil.MaxUnavailable: only a rolling update may run short, so a
    Recreate rollout, whose old pods all go first, is Available=False until all are ready)."""
    strategy = spec.get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate" or want == 0:
        return 0
    rolling = strategy.get("rollingUpdate") or {}
    value = rolling.get("maxUnavailable", "25%")
    if isinstance(value, str) and value.endswith("%"):
        try:
            return want * int(value[:-1]) // 100
        except ValueError:
            return 0
    return value if isinstance(value, int) else 0


def _deployment_status(
    cluster: Cluster, dep: dict[str, Any], current: dict[str, Any] | None
) -> None:
    d_type = cluster.resolve("apps", "v1", "deployments")
    rs_type = cluster.resolve("apps", "v1", "replicasets")
    fresh = get_live(cluster, d_type, dep["metadata"]["namespace"], dep["metadata"]["name"])
    if fresh is None:
        return
    owned = [
        s.decode()
        for s in owned_by(cluster, rs_type, dep["metadata"]["namespace"], dep["metadata"]["uid"])
    ]
    total = sum((rs.get("status") or {}).get("replicas", 0) for rs in owned)
    ready = sum((rs.get("status") or {}).get("readyReplicas", 0) for rs in owned)
    updated = 0
    new = msgspec.json.decode(msgspec.json.encode(fresh))
    if current is not None:
        cur = next(
            (rs for rs in owned if rs["metadata"]["uid"] == current["metadata"]["uid"]), None
        )
        updated = ((cur or {}).get("status") or {}).get("replicas", 0)
        new["metadata"].setdefault("annotations", {})[REVISION] = str(_revision(cur or current))
    want = (fresh.get("spec") or {}).get("replicas", 1)
    stamp = now()
    old_conditions = {c["type"]: c for c in (fresh.get("status") or {}).get("conditions", [])}

    def condition(kind: str, state: str, reason: str, message: str) -> dict[str, Any]:
        previous = old_conditions.get(kind)
        changed = previous is None or previous.get("reason") != reason
        flipped = previous is None or previous.get("status") != state
        return {
            "type": kind,
            "status": state,
            "lastUpdateTime": stamp if changed else previous.get("lastUpdateTime", stamp),  # type: ignore[union-attr]
            "lastTransitionTime": stamp if flipped else previous.get("lastTransitionTime", stamp),  # type: ignore[union-attr]
            "reason": reason,
            "message": message,
        }

    rs_name = current["metadata"]["name"] if current else ""
    spec = fresh.get("spec") or {}
    if ready >= want - _max_unavailable(spec, want):
        available = condition(
            "Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability."
        )
    else:
        available = condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        )
    complete = updated == want and ready == want and total == want
    if spec.get("paused"):
        progressing = condition(
            "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused"
        )
    elif complete:
        progressing = condition(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            f'ReplicaSet "{rs_name}" has successfully progressed.',
        )
    elif outcome_of(spec.get("template") or {}) == "deadline-exceeded":
        progressing = condition(
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            f'ReplicaSet "{rs_name}" has timed out progressing.',
        )
    else:
        progressing = condition(
            "Progressing", "True", "ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.'
        )
    status: dict[str, Any] = {
        "observedGeneration": fresh["metadata"].get("generation", 1),
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": [available, progressing],
    }
    if want - ready > 0:
        status["unavailableReplicas"] = want - ready
    for field in ("readyReplicas", "availableReplicas", "updatedReplicas", "replicas"):
        if status[field] == 0:
            status.pop(field)
    new["status"] = status
    commit_if_changed(cluster, d_type, fresh, new)
