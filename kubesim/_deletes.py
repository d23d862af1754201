"""Deletion with the API server's rules (sans-I/O): preconditions, finalizers, graceful pods,
namespaces that take their contents along, and owner-reference garbage collection.

kubesim collects garbage at once, in the same call, so a test sees the whole cascade as soon
as the delete returns; the events (and their order) are those a real cluster would emit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kubesim import _status
from kubesim._errors import ApiError
from kubesim._meta import now_rfc3339
from kubesim._resources import ResourceType
from kubesim._store import Stored

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = ["delete"]


def _dependents(cluster: Cluster, owner_uid: str) -> list[tuple[ResourceType, Stored]]:
    found: list[tuple[ResourceType, Stored]] = []
    needle = owner_uid.encode()
    seen: set[tuple[str, str]] = set()
    for rtype in cluster.registry:
        if rtype.key in seen:
            continue
        seen.add(rtype.key)
        for stored in cluster.store(rtype).objects.values():
            if needle in stored.raw and b'"ownerReferences"' in stored.raw:
                refs = stored.decode()["metadata"].get("ownerReferences") or []
                if any(ref.get("uid") == owner_uid for ref in refs):
                    found.append((rtype, stored))
    return found


def delete(
    cluster: Cluster,
    rtype: ResourceType,
    namespace: str | None,
    name: str,
    *,
    propagation: str | None = None,
    grace_period: int | None = None,
    preconditions: dict[str, Any] | None = None,
    now: Callable[[], str] | None = None,
) -> Stored:
    """Delete with the API server's rules; returns the last version of the object.

    Objects with finalizers get a deletionTimestamp and stay; namespaces delete their contents
    first; ``propagation`` Orphan strips owner references from dependents, Background and
    Foreground delete them (kubesim collects garbage at once, in the same call).
    Raises 404, 409 (a failed precondition), 400 (unknown propagation policy).
    """
    if propagation not in (None, "", "Orphan", "Background", "Foreground"):
        raise _status.bad_request(f"unsupported propagationPolicy: {propagation!r}")
    stamp = (now or _default_now)()
    old = cluster.get_stored(rtype, namespace or "", name)
    obj = old.decode()
    meta = obj["metadata"]
    pre = preconditions or {}
    if pre.get("uid") not in (None, meta.get("uid")) or pre.get("resourceVersion") not in (
        None,
        str(old.rv),
    ):
        raise ApiError(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {pre.get('uid')}, UID in object meta: "
            f"{meta.get('uid')}",
        )
    if meta.get("finalizers") and rtype.kind != "Namespace":
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = stamp
            meta["deletionGracePeriodSeconds"] = 0
            return cluster.commit(rtype, obj, added=False)
        return old
    if rtype.kind == "Namespace" and not rtype.group:
        return _delete_namespace(cluster, rtype, obj, stamp)
    if rtype.kind == "Pod" and not rtype.group and grace_period != 0:
        # A real pod is marked first (the kubelet then stops it): watchers see both events.
        meta["deletionTimestamp"] = stamp
        meta["deletionGracePeriodSeconds"] = 30 if grace_period is None else grace_period
        obj = cluster.commit(rtype, obj, added=False).decode()
    uid = meta.get("uid", "")
    if propagation == "Foreground":
        # The owner waits, marked, with the foregroundDeletion finalizer until its
        # dependents are gone (kubesim removes them at once).
        meta["deletionTimestamp"] = stamp
        meta["finalizers"] = ["foregroundDeletion"]
        obj = cluster.commit(rtype, obj, added=False).decode()
        _collect(cluster, uid, "Foreground", stamp)
        del obj["metadata"]["finalizers"]
        return cluster.commit_delete(rtype, obj)
    final = cluster.commit_delete(rtype, obj)
    _collect(cluster, uid, propagation or "Background", stamp)
    return final


def _default_now() -> str:
    return now_rfc3339()


def _collect(cluster: Cluster, owner_uid: str, propagation: str, stamp: str) -> None:
    for dep_type, stored in _dependents(cluster, owner_uid):
        current = cluster.store(dep_type).objects.get(stored.key)
        if current is None:
            continue
        if propagation == "Orphan":
            obj = current.decode()
            refs = [
                r for r in obj["metadata"].get("ownerReferences", []) if r.get("uid") != owner_uid
            ]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)
            cluster.commit(dep_type, obj, added=False)
        else:
            delete(cluster, dep_type, current.namespace, current.name, propagation=propagation,
                   grace_period=0, now=lambda: stamp)  # fmt: skip


def _delete_namespace(
    cluster: Cluster, rtype: ResourceType, obj: dict[str, Any], stamp: str
) -> Stored:
    name = obj["metadata"]["name"]
    obj["metadata"]["deletionTimestamp"] = stamp
    obj["status"] = {"phase": "Terminating"}
    cluster.commit(rtype, obj, added=False)
    seen: set[tuple[str, str]] = set()
    for inner in cluster.registry:
        if not inner.namespaced or inner.key in seen:
            continue
        seen.add(inner.key)
        store = cluster.store(inner)
        keys, lo, hi = store.key_range(name, None)
        for key in list(keys[lo:hi]):
            if key in store.objects:
                victim = store.objects[key].decode()
                victim["metadata"]["deletionTimestamp"] = stamp
                cluster.commit_delete(inner, victim)
    final = cluster.get_stored(rtype, "", name).decode()
    return cluster.commit_delete(rtype, final)
