"""Spinnaker's kinds of the Kubernetes kinds Deck shows (clouddriver-views.md section 1).

``serverGroups``: ReplicaSet, StatefulSet, DaemonSet, Job, CronJob; ``serverGroupManagers``:
Deployment; ``loadBalancers``: Service, Ingress; ``securityGroups``: NetworkPolicy;
``instances``: Pod (each handler's ``spinnakerKind()`` in Clouddriver). These are the "UI
kinds" Clouddriver caches by default, and the ones the store indexes for the views. Pure.
"""

from __future__ import annotations

__all__ = [
    "APP_ROLES",
    "CLUSTER_ROLES",
    "INSTANCES",
    "LOAD_BALANCERS",
    "ROLES",
    "SECURITY_GROUPS",
    "SERVER_GROUPS",
    "SERVER_GROUP_MANAGERS",
    "VIEW_KINDS",
    "kinds_of_role",
    "role_of",
]

SERVER_GROUPS = "serverGroups"
SERVER_GROUP_MANAGERS = "serverGroupManagers"
LOAD_BALANCERS = "loadBalancers"
SECURITY_GROUPS = "securityGroups"
INSTANCES = "instances"
ROLES = (SERVER_GROUPS, SERVER_GROUP_MANAGERS, LOAD_BALANCERS, SECURITY_GROUPS, INSTANCES)
#: the roles whose objects belong to a Spinnaker cluster (account, app, moniker cluster)
CLUSTER_ROLES = (SERVER_GROUPS, SERVER_GROUP_MANAGERS)
#: the roles whose objects are linked to their moniker's application
APP_ROLES = (SERVER_GROUPS, SERVER_GROUP_MANAGERS, LOAD_BALANCERS, SECURITY_GROUPS)

# (API group, Kubernetes kind) -> role. Ingress also in its old groups (clusters before 1.19).
_ROLE_OF: dict[tuple[str, str], str] = {
    ("apps", "ReplicaSet"): SERVER_GROUPS,
    ("apps", "StatefulSet"): SERVER_GROUPS,
    ("apps", "DaemonSet"): SERVER_GROUPS,
    ("batch", "Job"): SERVER_GROUPS,
    ("batch", "CronJob"): SERVER_GROUPS,
    ("apps", "Deployment"): SERVER_GROUP_MANAGERS,
    ("", "Service"): LOAD_BALANCERS,
    ("networking.k8s.io", "Ingress"): LOAD_BALANCERS,
    ("extensions", "Ingress"): LOAD_BALANCERS,
    ("networking.k8s.io", "NetworkPolicy"): SECURITY_GROUPS,
    ("", "Pod"): INSTANCES,
}
#: the lower-case Kubernetes kinds the views read (for read-your-writes)
VIEW_KINDS = frozenset(kind.lower() for _, kind in _ROLE_OF)


def role_of(group: str, kind: str) -> str | None:
    """The Spinnaker kind of an object of ``kind`` in API ``group``; None when Deck's views do
    not show it (configs, unclassified kinds)."""
    return _ROLE_OF.get((group, kind))


def kinds_of_role(role: str) -> list[str]:
    """The Kubernetes kinds of a Spinnaker kind, e.g. ``serverGroups`` -> ReplicaSet, ..."""
    return sorted({kind for (_, kind), r in _ROLE_OF.items() if r == role})
