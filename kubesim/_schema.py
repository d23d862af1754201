"""How the lists and maps of the built-in kinds merge: the little of their OpenAPI schema we need.

A real API server reads these from its OpenAPI models (``patchStrategy``/``patchMergeKey`` for
strategic merge patch, ``x-kubernetes-list-type``/``-list-map-keys``/``-map-type`` for
server-side apply). kubesim keeps a table keyed by the field's name and its parent, which is
enough for the common kinds. Fields are located by ``names``: the field names from the object's
root down to the field, list positions left out (``("spec", "template", "spec", "containers")``).

Rules about ``metadata`` hold for every kind; the rest hold for the built-in kinds only, as
custom resources without a schema treat every list as atomic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "BUILTIN_KINDS",
    "ListType",
    "is_atomic_map",
    "smp_list_strategy",
    "smp_patch_strategy",
    "ssa_list_type",
]

BUILTIN_KINDS: Final = frozenset(
    {
        "Namespace", "Pod", "Service", "ConfigMap", "Secret", "ServiceAccount", "Deployment",
        "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "Ingress", "NetworkPolicy",
        "HorizontalPodAutoscaler", "PersistentVolumeClaim", "Role", "RoleBinding", "ClusterRole",
        "ClusterRoleBinding", "CustomResourceDefinition", "Endpoints", "Event", "Node",
        "PersistentVolume", "ReplicationController", "PodTemplate", "LimitRange", "ResourceQuota",
        "ControllerRevision",
    }
)  # fmt: skip

_CONTAINER_LISTS: Final = frozenset({"containers", "initContainers", "ephemeralContainers"})


@dataclass(frozen=True, slots=True)
class ListType:
    """How server-side apply treats a list: ``map`` (items keyed by ``keys``), ``set``, ``atomic``.

    ``defaults`` fills a key field an item leaves out (a port's protocol is TCP by default).
    """

    kind: Literal["map", "set", "atomic"]
    keys: tuple[str, ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()


ATOMIC: Final = ListType("atomic")
SET: Final = ListType("set")


def _map(*keys: str, **defaults: Any) -> ListType:
    return ListType("map", keys, tuple(defaults.items()))


_BY_NAME: Final = _map("name")
_CONTAINER_PORTS: Final = _map("containerPort", "protocol", protocol="TCP")
_SERVICE_PORTS: Final = _map("port", "protocol", protocol="TCP")

# Lists keyed by name wherever they appear under a built-in kind.
_SSA_LISTS: Final[dict[str, ListType]] = {
    "containers": _BY_NAME,
    "initContainers": _BY_NAME,
    "ephemeralContainers": _BY_NAME,
    "env": _BY_NAME,
    "volumes": _BY_NAME,
    "imagePullSecrets": _BY_NAME,
    "volumeMounts": _map("mountPath"),
    "volumeDevices": _map("devicePath"),
    "hostAliases": _map("ip"),
    "conditions": _map("type"),
    "topologySpreadConstraints": _map("topologyKey", "whenUnsatisfiable"),
    "schedulingGates": _BY_NAME,
    "resourceClaims": _BY_NAME,
}

# Strategic merge patch keys (``patchMergeKey``); a list not named here is replaced whole.
_SMP_KEYS: Final[dict[str, str]] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "hostAliases": "ip",
    "conditions": "type",
    "topologySpreadConstraints": "topologyKey",
    "schedulingGates": "name",
    "resourceClaims": "name",
}

# Keyed lists whose items also carry ``retainKeys`` (a volume has one source: the patch's
# keys replace the item's other keys), and the one object field with it (a Deployment's
# strategy: switching to Recreate drops rollingUpdate). From k8s.io/api's patchStrategy tags.
_RETAIN_KEYS_LISTS: Final = frozenset({"volumes", "resourceClaims"})
_RETAIN_KEYS_FIELDS: Final = frozenset({("Deployment", ("spec", "strategy"))})

# Label selectors (LabelSelector is +structType=atomic wherever it appears), Service
# selectors and node selectors (+mapType=atomic) are owned as one value.
_ATOMIC_MAPS: Final = frozenset(
    {"selector", "podSelector", "namespaceSelector", "labelSelector", "nodeSelector"}
)


def _in_object_meta(kind: str, names: tuple[str, ...]) -> bool:
    """Whether ``names`` is a field of an ObjectMeta: the object's own ``metadata``, or (in a
    built-in kind, where every ``metadata`` is one) a pod or claim template's."""
    return names[-2:-1] == ("metadata",) and (len(names) == 2 or kind in BUILTIN_KINDS)


def ssa_list_type(kind: str, names: tuple[str, ...]) -> ListType:
    """The server-side apply list type of the list at ``names`` in an object of ``kind``."""
    field = names[-1]
    if _in_object_meta(kind, names):
        if field == "finalizers":
            return SET
        if field == "ownerReferences":
            return _map("uid")
        return ATOMIC
    if kind not in BUILTIN_KINDS:
        return ATOMIC
    if field == "ports":
        if len(names) >= 2 and names[-2] in _CONTAINER_LISTS:
            return _CONTAINER_PORTS
        if kind == "Service" and names == ("spec", "ports"):
            return _SERVICE_PORTS
        return ATOMIC
    if kind == "ServiceAccount" and len(names) == 1:
        return _BY_NAME if field == "secrets" else ATOMIC
    return _SSA_LISTS.get(field, ATOMIC)


def smp_list_strategy(kind: str, names: tuple[str, ...]) -> str | None:
    """Strategic merge patch strategy of the list at ``names``.

    Returns the merge key for a list of objects merged by key, ``""`` for a list of scalars
    merged as a set (``metadata.finalizers``), or ``None`` for a list the patch replaces.
    """
    field = names[-1]
    if _in_object_meta(kind, names):
        if field == "finalizers":
            return ""
        if field == "ownerReferences":
            return "uid"
        return None
    if kind not in BUILTIN_KINDS:
        return None
    if field == "ports":
        if len(names) >= 2 and names[-2] in _CONTAINER_LISTS:
            return "containerPort"
        if kind == "Service" and names == ("spec", "ports"):
            return "port"
        return None
    if kind == "ServiceAccount" and len(names) == 1:
        # A ServiceAccount's secrets merge by name; its imagePullSecrets are atomic (unlike
        # a pod's).
        return "name" if field == "secrets" else None
    return _SMP_KEYS.get(field)


def smp_patch_strategy(kind: str, names: tuple[str, ...], *, is_list: bool) -> str:
    """``x-kubernetes-patch-strategy`` of the field at ``names`` ("" for none): "merge" for a
    list merged by key or as a set, plus ",retainKeys" where the API has it; "retainKeys"
    for the one object field that carries it."""
    if not is_list:
        return "retainKeys" if (kind, names) in _RETAIN_KEYS_FIELDS else ""
    if smp_list_strategy(kind, names) is None:
        return ""
    if names[-1] in _RETAIN_KEYS_LISTS and kind in BUILTIN_KINDS:
        return "merge,retainKeys"
    return "merge"


def is_atomic_map(kind: str, names: tuple[str, ...]) -> bool:
    """Whether the object-valued field at ``names`` is owned as one value by server-side apply."""
    return names[-1] in _ATOMIC_MAPS and kind in BUILTIN_KINDS and names[0] != "metadata"
