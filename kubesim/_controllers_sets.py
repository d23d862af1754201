"""Controllers, lite, for the set-like kinds: StatefulSets own ordinal pods, DaemonSets run
one pod on the simulated node (Jobs: _controllers_jobs.py). Enough for a Clouddriver-style
stable check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from kubesim._controllers import (
    commit_if_changed,
    get_live,
    new_pod,
    owned_by,
    pod_ready,
)
from kubesim._deletes import delete
from kubesim._revisions import sync_revision

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = ["daemonset", "statefulset"]


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(obj))
    return copied


def _ready(cluster: Cluster, namespace: str, uid: str, name: str) -> int:
    """How many of the set's pods are Ready (not those a missing ConfigMap holds back)."""
    pods_type = cluster.resolve("", "v1", "pods")
    return sum(
        1 for s in owned_by(cluster, pods_type, namespace, uid, prefix=f"{name}-")
        if pod_ready(s.decode())
    )  # fmt: skip


def statefulset(cluster: Cluster, namespace: str, name: str) -> None:
    sts_type = cluster.resolve("apps", "v1", "statefulsets")
    pods_type = cluster.resolve("", "v1", "pods")
    sts = get_live(cluster, sts_type, namespace, name)
    if sts is None:
        return
    spec = sts.get("spec") or {}
    desired = spec.get("replicas", 1)
    template = spec.get("template") or {}
    revision, _ = sync_revision(cluster, sts)
    uid = sts["metadata"]["uid"]
    existing = {s.name for s in owned_by(cluster, pods_type, namespace, uid, prefix=f"{name}-")}
    for index in range(desired):
        pod_name = f"{name}-{index}"
        if pod_name not in existing:
            labels = {
                "controller-revision-hash": revision,
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(index),
            }
            new_pod(cluster, sts, pod_name, template, labels)
    for pod_name in sorted(existing):
        suffix = pod_name[len(name) + 1 :]
        if suffix.isdigit() and int(suffix) >= desired:
            delete(cluster, pods_type, namespace, pod_name, grace_period=0)
    count = min(desired, len(existing | {f"{name}-{i}" for i in range(desired)}))
    ready = _ready(cluster, namespace, uid, name)
    new = _copy(sts)
    new["status"] = {
        "observedGeneration": sts["metadata"].get("generation", 1),
        "replicas": count,
        "readyReplicas": ready,
        "currentReplicas": count,
        "updatedReplicas": count,
        "availableReplicas": ready,
        "currentRevision": revision,
        "updateRevision": revision,
        "collisionCount": 0,
    }
    commit_if_changed(cluster, sts_type, sts, new)


def daemonset(cluster: Cluster, namespace: str, name: str) -> None:
    """One pod on the one simulated node, and the status a rolled-out DaemonSet reports."""
    ds_type = cluster.resolve("apps", "v1", "daemonsets")
    pods_type = cluster.resolve("", "v1", "pods")
    ds = get_live(cluster, ds_type, namespace, name)
    if ds is None:
        return
    template = (ds.get("spec") or {}).get("template") or {}
    _, digest = sync_revision(cluster, ds)
    uid = ds["metadata"]["uid"]
    pods = owned_by(cluster, pods_type, namespace, uid, prefix=f"{name}-")
    current = [p for p in pods if p.labels.get("controller-revision-hash") == digest]
    for stale in pods:
        if stale not in current:
            delete(cluster, pods_type, namespace, stale.name, grace_period=0)
    if not current:
        labels = {"controller-revision-hash": digest, "pod-template-generation": "1"}
        new_pod(cluster, ds, f"{name}-{digest[:5]}", template, labels)
    ready = _ready(cluster, namespace, uid, name)
    new = _copy(ds)
    new["status"] = {
        "currentNumberScheduled": 1,
        "desiredNumberScheduled": 1,
        "numberAvailable": ready,
        "numberMisscheduled": 0,
        "numberReady": ready,
        "observedGeneration": ds["metadata"].get("generation", 1),
        "updatedNumberScheduled": 1,
    }
    commit_if_changed(cluster, ds_type, ds, new)
