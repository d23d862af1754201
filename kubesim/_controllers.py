"""Controllers, lite: Deployments own ReplicaSets, ReplicaSets and StatefulSets own Pods,
and a kubelet-lite makes new Pods Running. Synchronous: ``_reconcile.reconcile`` runs after each
write until nothing is dirty, so a deploy, a scale, a rollback or a restart is visible as the
events a real cluster would emit (RS created, pods added, statuses updated), in order.

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
from kubesim._meta import new_uid, now_rfc3339
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
    "owned_by",
    "pod_status",
    "replicaset",
    "template_hash",
]

REVISION = "deployment.kubernetes.io/revision"
HASH_LABEL = "pod-template-hash"
MANAGER = "kube-controller-manager"


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


def pod_status(spec: dict[str, Any], now: str, ip: str) -> dict[str, Any]:
    """A Running, Ready pod status for ``spec``, as a kubelet would report it."""
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
        for t in (
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        )
    ]
    containers = [
        {
            "name": c.get("name", "app"),
            "ready": True,
            "restartCount": 0,
            "started": True,
            "image": c.get("image", ""),
            "imageID": f"docker.io/library/{c.get('image', 'app')}@sha256:{_hex64()}",
            "containerID": f"containerd://{_hex64()}",
            "state": {"running": {"startedAt": now}},
        }
        for c in spec.get("containers") or []
    ]
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


def _owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


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


def kubelet(cluster: Cluster, namespace: str, name: str) -> None:
    pods = cluster.resolve("", "v1", "pods")
    pod = get_live(cluster, pods, namespace, name)
    if pod is None or (pod.get("status") or {}).get("phase") == "Running":
        return
    new = msgspec.json.decode(msgspec.json.encode(pod))
    new.setdefault("spec", {}).setdefault("nodeName", "kubesim-node-1")
    new["status"] = pod_status(new["spec"], now(), _pod_ip(cluster))
    commit_if_changed(cluster, pods, pod, new)


def new_pod(cluster: Cluster, owner: dict[str, Any], name: str, template: dict[str, Any],
             extra_labels: dict[str, str]) -> None:  # fmt: skip
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
            "ownerReferences": [_owner_ref(owner)],
        },
        "spec": spec,
        "status": pod_status(spec, stamp, _pod_ip(cluster)),
    }
    if tmeta.get("annotations"):
        pod["metadata"]["annotations"] = dict(tmeta["annotations"])
    cluster.commit(pods, pod, added=True)


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
        new_pod(cluster, rs, f"{name}-{secrets.token_hex(3)[:5]}", template, {})
    if len(pods) > desired:
        for victim in sorted(pods, key=lambda s: s.rv, reverse=True)[: len(pods) - desired]:
            delete(cluster, pods_type, namespace, victim.name, grace_period=0)
    count = len(owned_by(cluster, pods_type, namespace, uid, prefix=f"{name}-"))
    new = msgspec.json.decode(msgspec.json.encode(rs))
    new["status"] = {
        "replicas": count,
        "fullyLabeledReplicas": count,
        "readyReplicas": count,
        "availableReplicas": count,
        "observedGeneration": rs["metadata"].get("generation", 1),
    }
    if count == 0:
        for field in ("readyReplicas", "availableReplicas", "fullyLabeledReplicas"):
            new["status"].pop(field)
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
                fresh["spec"]["replicas"] = want
                fresh["metadata"].setdefault("annotations", {})[
                    "deployment.kubernetes.io/desired-replicas"
                ] = str(replicas)
                fresh["metadata"]["generation"] = fresh["metadata"].get("generation", 1) + 1
                cluster.commit(rs_type, fresh, added=False)
            replicaset(cluster, namespace, rs["metadata"]["name"])
        _trim_history(cluster, dep, current["metadata"]["uid"])
    _deployment_status(cluster, dep, current)


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
                REVISION: str(revision),
                "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                "deployment.kubernetes.io/max-replicas": str(spec.get("replicas", 1) + 1),
            },
            "ownerReferences": [_owner_ref(dep)],
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

    def condition(kind: str, reason: str, message: str) -> dict[str, Any]:
        previous = old_conditions.get(kind)
        changed = previous is None or previous.get("reason") != reason
        return {
            "type": kind,
            "status": "True",
            "lastUpdateTime": stamp if changed else previous.get("lastUpdateTime", stamp),  # type: ignore[union-attr]
            "lastTransitionTime": previous.get("lastTransitionTime", stamp) if previous else stamp,
            "reason": reason,
            "message": message,
        }

    rs_name = current["metadata"]["name"] if current else ""
    status: dict[str, Any] = {
        "observedGeneration": fresh["metadata"].get("generation", 1),
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": [
            condition(
                "Available", "MinimumReplicasAvailable", "Deployment has minimum availability."
            ),
            condition(
                "Progressing",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.',
            ),
        ],
    }
    if want - ready > 0:
        status["unavailableReplicas"] = want - ready
    for field in ("readyReplicas", "availableReplicas", "updatedReplicas", "replicas"):
        if status[field] == 0:
            status.pop(field)
    new["status"] = status
    commit_if_changed(cluster, d_type, fresh, new)
