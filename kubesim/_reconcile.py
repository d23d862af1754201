"""The lite controllers' loop: take what the cluster marked dirty, hand it to its controller.

Runs synchronously after each write (``Cluster.reconcile``) until nothing is dirty, bounded by
``_MAX_STEPS`` so a controller bug shows as a stopped reconcile, not a hung server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubesim._controllers import deployment, kubelet, replicaset
from kubesim._controllers_jobs import job
from kubesim._controllers_sets import daemonset, statefulset

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = ["reconcile"]

_MAX_STEPS = 10_000
_CONTROLLERS = {
    "Deployment": deployment,
    "ReplicaSet": replicaset,
    "StatefulSet": statefulset,
    "DaemonSet": daemonset,
    "Job": job,
    "Pod": kubelet,
}


def reconcile(cluster: Cluster) -> None:
    """Run the controllers until nothing they watch is dirty (at most _MAX_STEPS objects)."""
    for _ in range(_MAX_STEPS):
        item = cluster.take_dirty()
        if item is None:
            return
        kind, namespace, name = item
        _CONTROLLERS[kind](cluster, namespace, name)
