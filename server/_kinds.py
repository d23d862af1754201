"""Spinnaker's kind tokens: `deployment`, `replicaSet`, aliases, groups, and the kind map.

Clouddriver names Kubernetes kinds in lowerCamel (`replicaSet`) and accepts them
case-insensitively, with a few aliases (`deploy`, `rs`, `svc`) and the `kind.group` form for
custom resources (`certificate.cert-manager.io`). This module resolves a token to the
Kubernetes kind, its API group (what the store keys objects by) and the token Clouddriver
prints back. It is the one kind table of the server: the read side (server.api) and the
operations (server.ops, which server.api imports) both use it. Pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "SPINNAKER_KIND_MAP",
    "KindRef",
    "kubernetes_kind",
    "resolve_kind",
    "spinnaker_kind_name",
]


@dataclass(frozen=True, slots=True)
class KindRef:
    """A resolved kind. `group` is None when unknown (a custom kind given without its group)."""

    kind: str  # the Kubernetes kind, e.g. "ReplicaSet" (or the token as given, when unknown)
    group: str | None
    token: str  # Spinnaker's lowerCamel name, e.g. "replicaSet"


# (Kubernetes kind, API group) of the kinds Clouddriver knows by name.
_KNOWN: tuple[tuple[str, str], ...] = (
    ("APIService", "apiregistration.k8s.io"),
    ("ClusterRole", "rbac.authorization.k8s.io"),
    ("ClusterRoleBinding", "rbac.authorization.k8s.io"),
    ("ConfigMap", ""),
    ("ControllerRevision", "apps"),
    ("CronJob", "batch"),
    ("CustomResourceDefinition", "apiextensions.k8s.io"),
    ("DaemonSet", "apps"),
    ("Deployment", "apps"),
    ("Endpoints", ""),
    ("Event", ""),
    ("HorizontalPodAutoscaler", "autoscaling"),
    ("Ingress", "networking.k8s.io"),
    ("Job", "batch"),
    ("LimitRange", ""),
    ("MutatingWebhookConfiguration", "admissionregistration.k8s.io"),
    ("Namespace", ""),
    ("NetworkPolicy", "networking.k8s.io"),
    ("PersistentVolume", ""),
    ("PersistentVolumeClaim", ""),
    ("Pod", ""),
    ("PodDisruptionBudget", "policy"),
    ("PriorityClass", "scheduling.k8s.io"),
    ("ReplicaSet", "apps"),
    ("ResourceQuota", ""),
    ("Role", "rbac.authorization.k8s.io"),
    ("RoleBinding", "rbac.authorization.k8s.io"),
    ("Secret", ""),
    ("Service", ""),
    ("ServiceAccount", ""),
    ("StatefulSet", "apps"),
    ("StorageClass", "storage.k8s.io"),
    ("ValidatingWebhookConfiguration", "admissionregistration.k8s.io"),
)
_BY_LOWER = {kind.lower(): (kind, group) for kind, group in _KNOWN}
_ALIASES = {
    "deploy": "deployment",
    "rs": "replicaset",
    "svc": "service",
    "cm": "configmap",
    "ns": "namespace",
    "po": "pod",
    "sts": "statefulset",
    "ds": "daemonset",
    "ing": "ingress",
    "cj": "cronjob",
    "pvc": "persistentvolumeclaim",
    "pv": "persistentvolume",
    "sa": "serviceaccount",
    "hpa": "horizontalpodautoscaler",
    "pdb": "poddisruptionbudget",
    "crd": "customresourcedefinition",
    "netpol": "networkpolicy",
}

# Spinnaker's classes of kinds, as /credentials?expand=true prints them.
SPINNAKER_KIND_MAP: dict[str, str] = {
    "deployment": "serverGroupManagers",
    "replicaSet": "serverGroups",
    "statefulSet": "serverGroups",
    "daemonSet": "serverGroups",
    "pod": "instances",
    "service": "loadBalancers",
    "ingress": "loadBalancers",
    "networkPolicy": "securityGroups",
    "configMap": "configs",
    "secret": "configs",
    "persistentVolumeClaim": "configs",
    "job": "serverGroups",
    "cronJob": "serverGroups",
    "horizontalPodAutoscaler": "unclassified",
    "namespace": "unclassified",
    "customResourceDefinition": "unclassified",
}


def spinnaker_kind_name(kind: str) -> str:
    """`ReplicaSet` -> `replicaSet`; `APIService` -> `apiService` (Clouddriver's lowerCamel)."""
    if not kind:
        return kind
    upper = 0
    while upper < len(kind) and kind[upper].isupper():
        upper += 1
    if upper <= 1:
        return kind[0].lower() + kind[1:]
    # An acronym prefix: lower all of it but the capital that starts the next word.
    cut = upper if upper == len(kind) else upper - 1
    return kind[:cut].lower() + kind[cut:]


def resolve_kind(token: str) -> KindRef:
    """Resolve a Spinnaker kind token (case-insensitive, aliases, `kind.group`); never raises.

    An unknown kind without a group resolves with `group=None`: the caller looks it up by
    kind alone.
    """
    lower = token.strip().lower()
    if "." in lower:
        kind_part, group = lower.split(".", 1)
        known = _BY_LOWER.get(_ALIASES.get(kind_part, kind_part))
        if known is not None and known[1] == group:
            return KindRef(known[0], group, spinnaker_kind_name(known[0]))
        given = token.strip().split(".", 1)[0]
        return KindRef(given, group, token.strip())
    known = _BY_LOWER.get(_ALIASES.get(lower, lower))
    if known is not None:
        return KindRef(known[0], known[1], spinnaker_kind_name(known[0]))
    return KindRef(token.strip(), None, token.strip())


def kubernetes_kind(token: str) -> str:
    """The Kubernetes Kind an operation names: the known kind for a Spinnaker name or alias
    (``rs`` -> ``ReplicaSet``), else the token itself, stripped (a CRD kind, or any
    ``kind.group``, which the agent resolves against its cluster's discovery). Never raises."""
    token = token.strip()
    return token if "." in token else resolve_kind(token).kind
