"""Events the lite controllers record for notable transitions (core/v1 ``Event``), so that
what ``kubectl describe`` shows and Spinnaker's manifest view lists has something to read.

An Event lives in the namespace of the object it is about (``default`` for cluster-scoped
ones), is named ``<object name>.<16 hex>`` like the API server's event recorder names them,
and points at its subject through ``involvedObject``. Events are written uncontrolled (no
controller looks at them) and never aggregated: each transition is one Event, count 1.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from kubesim._meta import new_uid, now_rfc3339

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = ["record_event"]

NORMAL = "Normal"
WARNING = "Warning"


def record_event(
    cluster: Cluster,
    subject: dict[str, Any],
    reason: str,
    message: str,
    *,
    component: str,
    type_: str = NORMAL,
) -> None:
    """Store one Event about ``subject`` (a live object with its metadata) from ``component``
    (e.g. ``deployment-controller``)."""
    meta = subject["metadata"]
    namespace = meta.get("namespace") or "default"
    events = cluster.resolve("", "v1", "events")
    stamp = now_rfc3339()
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{secrets.token_hex(8)}",
            "namespace": namespace,
            "uid": new_uid(),
            "creationTimestamp": stamp,
        },
        "involvedObject": {
            "apiVersion": subject.get("apiVersion", ""),
            "kind": subject.get("kind", ""),
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "type": type_,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": "",
    }
    if not meta.get("namespace"):
        event["involvedObject"].pop("namespace")
    cluster.commit(events, event, added=True, controlled=False)
