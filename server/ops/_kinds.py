"""Spinnaker's kind tokens in operation descriptions, resolved to Kubernetes kinds. Pure.

Clouddriver accepts lowerCamel kind names (``replicaSet``) case-insensitively, kubectl's short
names (``deploy``, ``rs``, ``svc``) and ``kind.group`` for custom resources. This is kept in
step with server/api/_kinds.py (the read side); it is separate because server.api imports
server.ops, and a shared kinds module is a follow-up that would move both.
"""

from __future__ import annotations

__all__ = ["resolve_kind"]

_KNOWN = (
    "APIService",
    "ClusterRole",
    "ClusterRoleBinding",
    "ConfigMap",
    "ControllerRevision",
    "CronJob",
    "CustomResourceDefinition",
    "DaemonSet",
    "Deployment",
    "Endpoints",
    "Event",
    "HorizontalPodAutoscaler",
    "Ingress",
    "Job",
    "LimitRange",
    "MutatingWebhookConfiguration",
    "Namespace",
    "NetworkPolicy",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodDisruptionBudget",
    "ReplicaSet",
    "Role",
    "RoleBinding",
    "Secret",
    "Service",
    "ServiceAccount",
    "StatefulSet",
    "StorageClass",
    "ValidatingWebhookConfiguration",
    "ResourceQuota",
    "PriorityClass",
)
_BY_LOWER = {kind.lower(): kind for kind in _KNOWN}
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


def resolve_kind(token: str) -> str:
    """The Kubernetes Kind for a Spinnaker kind token; the token itself (stripped) when it is
    not a kind Clouddriver knows by name (a CRD kind, or ``kind.group``). Never raises."""
    token = token.strip()
    lower = token.lower()
    if "." not in lower:
        known = _BY_LOWER.get(_ALIASES.get(lower, lower))
        if known is not None:
            return known
    return token
