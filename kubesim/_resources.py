"""The resource registry: which kinds the simulated API server serves, and how.

A :class:`ResourceType` is one row of discovery (group, version, plural, kind, scope, verbs,
short names, subresources). :class:`Registry` holds the built-in kinds and the kinds served
because a CustomResourceDefinition exists; its ``generation`` changes whenever the set
changes so discovery documents can be cached until then.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BUILTIN_TYPES", "VERBS", "Registry", "ResourceType"]

VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource (what discovery lists and what the URL paths name)."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "scale"
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = VERBS
    singular: str = field(default="")

    @property
    def key(self) -> tuple[str, str]:
        """(group, plural): the identity of the resource in the store."""
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


def _t(
    group: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    sub: tuple[str, ...] = ("status",),
    version: str = "v1",
    all_: bool = False,
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        namespaced=namespaced,
        short_names=short,
        subresources=sub,
        categories=("all",) if all_ else (),
    )


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _t("", "Namespace", "namespaces", namespaced=False, short=("ns",)),
    _t("", "Pod", "pods", short=("po",), sub=("status", "log"), all_=True),
    _t("", "Service", "services", short=("svc",), all_=True),
    _t("", "ConfigMap", "configmaps", short=("cm",), sub=()),
    _t("", "Secret", "secrets", sub=()),
    _t("", "ServiceAccount", "serviceaccounts", short=("sa",), sub=()),
    _t("", "PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",)),
    _t("", "Event", "events", short=("ev",), sub=()),
    _t("apps", "Deployment", "deployments", short=("deploy",), sub=("status", "scale"), all_=True),
    _t("apps", "ReplicaSet", "replicasets", short=("rs",), sub=("status", "scale"), all_=True),
    _t("apps", "StatefulSet", "statefulsets", short=("sts",), sub=("status", "scale"), all_=True),
    _t("apps", "DaemonSet", "daemonsets", short=("ds",), all_=True),
    _t("apps", "ControllerRevision", "controllerrevisions", sub=()),
    _t("batch", "Job", "jobs", all_=True),
    _t("batch", "CronJob", "cronjobs", short=("cj",), all_=True),
    _t("networking.k8s.io", "Ingress", "ingresses", short=("ing",)),
    _t("networking.k8s.io", "NetworkPolicy", "networkpolicies", short=("netpol",), sub=()),
    _t(
        "autoscaling",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        short=("hpa",),
        version="v2",
        all_=True,
    ),
    _t("rbac.authorization.k8s.io", "Role", "roles", sub=()),
    _t("rbac.authorization.k8s.io", "RoleBinding", "rolebindings", sub=()),
    _t("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", namespaced=False, sub=()),
    _t(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        namespaced=False,
        sub=(),
    ),
    _t(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
        short=("crd", "crds"),
    ),
)


def crd_types(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition serves (one per served version).

    Raises ``ValueError`` naming the missing field when the CRD lacks group/names/versions.
    """
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group")
    kind = names.get("kind")
    plural = names.get("plural")
    if not group or not kind or not plural:
        raise ValueError("spec.group, spec.names.kind and spec.names.plural are required")
    namespaced = spec.get("scope", "Namespaced") == "Namespaced"
    found: list[ResourceType] = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subs = version.get("subresources") or {}
        sub = tuple(name for name in ("status", "scale") if name in subs)
        found.append(
            ResourceType(
                group=group,
                version=str(version.get("name")),
                kind=kind,
                plural=plural,
                namespaced=namespaced,
                short_names=tuple(names.get("shortNames") or ()),
                subresources=sub,
                categories=tuple(names.get("categories") or ()),
                singular=names.get("singular") or kind.lower(),
            )
        )
    if not found:
        raise ValueError("spec.versions must list at least one served version")
    return found


class Registry:
    """Served resource types, by (group, version, plural) and by (group, plural)."""

    def __init__(self, types: tuple[ResourceType, ...] = BUILTIN_TYPES) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self._crds: dict[str, list[ResourceType]] = {}
        self.generation = 0
        for rtype in types:
            self._by_gvr[(rtype.group, rtype.version, rtype.plural)] = rtype

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rtype in self._by_gvr.values():
            if rtype.group == group and rtype.version == version and rtype.kind == kind:
                return rtype
        return None

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._by_gvr.values()))

    def group_versions(self) -> dict[str, list[str]]:
        """Group name -> its versions (in registration order, preferred first)."""
        out: dict[str, list[str]] = {}
        for rtype in self._by_gvr.values():
            versions = out.setdefault(rtype.group, [])
            if rtype.version not in versions:
                versions.append(rtype.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self._by_gvr.values() if t.group == group and t.version == version]

    def add_crd(self, name: str, types: list[ResourceType]) -> None:
        self.remove_crd(name)
        self._crds[name] = types
        for rtype in types:
            self._by_gvr[(rtype.group, rtype.version, rtype.plural)] = rtype
        self.generation += 1

    def crd_name(self, rtype: ResourceType) -> str | None:
        """The name of the CustomResourceDefinition serving ``rtype``; None for a built-in kind."""
        for name, types in self._crds.items():
            if rtype in types:
                return name
        return None

    def remove_crd(self, name: str) -> list[ResourceType]:
        types = self._crds.pop(name, [])
        for rtype in types:
            self._by_gvr.pop((rtype.group, rtype.version, rtype.plural), None)
        if types:
            self.generation += 1
        return types
