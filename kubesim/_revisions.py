"""ControllerRevisions: the rollout history of StatefulSets and DaemonSets, kept the way their
controllers keep it, so that ``kubectl rollout undo`` (and Spinnaker's undo) has something to
read.

One revision per distinct pod template, named ``<owner>-<hash>``, labelled with the owner's
selector labels and ``controller.kubernetes.io/hash``, owned by the workload, holding
``data: {"spec": {"template": <template + "$patch": "replace">}}`` and a ``revision`` number.
Going back to an older template reuses its revision and moves it to the next number (as
the Deployment controller does with ReplicaSets); revisions beyond
``spec.revisionHistoryLimit`` (default 10) are deleted oldest first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from kubesim._controllers import owned_by, template_hash
from kubesim._deletes import delete
from kubesim._meta import controller_ref, new_uid, now_rfc3339

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = ["HASH_LABEL", "sync_revision"]

HASH_LABEL = "controller.kubernetes.io/hash"


def sync_revision(cluster: Cluster, owner: dict[str, Any]) -> tuple[str, str]:
    """Make the owner's current template the newest ControllerRevision; returns (its name,
    the template hash)."""
    cr_type = cluster.resolve("apps", "v1", "controllerrevisions")
    meta = owner["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    spec = owner.get("spec") or {}
    template = spec.get("template") or {}
    digest = template_hash(template)
    revisions = [s.decode() for s in owned_by(cluster, cr_type, namespace, meta["uid"])]
    newest = max((int(r.get("revision", 0)) for r in revisions), default=0)
    current = next((r for r in revisions if r["metadata"]["name"] == f"{name}-{digest}"), None)
    if current is None:
        data_template = msgspec.json.decode(msgspec.json.encode(template))
        data_template["$patch"] = "replace"
        labels = dict((spec.get("selector") or {}).get("matchLabels") or {})
        labels[HASH_LABEL] = digest
        cluster.commit(
            cr_type,
            {
                "apiVersion": "apps/v1",
                "kind": "ControllerRevision",
                "metadata": {
                    "name": f"{name}-{digest}",
                    "namespace": namespace,
                    "uid": new_uid(),
                    "creationTimestamp": now_rfc3339(),
                    "labels": labels,
                    "ownerReferences": [controller_ref(owner)],
                },
                "data": {"spec": {"template": data_template}},
                "revision": newest + 1,
            },
            added=True,
            controlled=False,
        )
    elif int(current.get("revision", 0)) < newest:
        current["revision"] = newest + 1
        cluster.commit(cr_type, current, added=False, controlled=False)
    limit = spec.get("revisionHistoryLimit", 10)
    old = sorted(
        (r for r in revisions if r["metadata"]["name"] != f"{name}-{digest}"),
        key=lambda r: int(r.get("revision", 0)),
    )
    for doomed in old[: max(0, len(old) - limit)]:
        delete(cluster, cr_type, namespace, doomed["metadata"]["name"])
    return f"{name}-{digest}", digest
