"""How Clouddriver relates cached objects (``KubernetesCacheDataConverter`` and the handlers'
``addRelationships``), as functions of the decoded objects. Pure.

- ownerReferences: pod -> ReplicaSet / StatefulSet / DaemonSet / Job, ReplicaSet ->
  Deployment, Job -> CronJob (the controller reference).
- Service <-> ReplicaSet when every pair of the Service's ``spec.selector`` (non-empty) is in
  the ReplicaSet's ``spec.template.metadata.labels``, in the same account and namespace.
- StatefulSet <-> the Service its ``spec.serviceName`` names, when it exists.
- Ingress <-> each Service a backend names (in its namespace), when it exists.
Never pod <-> Service, never DaemonSet <-> Service.

A server group's ``loadBalancers`` are the related Services plus the ones its
``traffic.spinnaker.io/load-balancers`` annotation lists; it is ``disabled`` when it has no
related Service and the annotation lists at least one (``KubernetesServerGroup``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ._index import controller_owner
from ._resource import Resource, mapping, normalized_name

__all__ = [
    "TRAFFIC_ANNOTATION",
    "ingress_services",
    "is_disabled",
    "owned_by",
    "related_services",
    "service_selects",
    "traffic_load_balancers",
]

TRAFFIC_ANNOTATION = "traffic.spinnaker.io/load-balancers"


def owned_by(child: Resource, owner: Resource) -> bool:
    """Whether ``owner`` is ``child``'s controller (same account and namespace)."""
    if child.account != owner.account or child.namespace != owner.namespace:
        return False
    kind, name = controller_owner(child.metadata.get("ownerReferences"))
    return kind == owner.kind and name == owner.name


def _selector(service: Resource) -> Mapping[str, Any]:
    return mapping(service.spec.get("selector"))


def service_selects(service: Resource, workload: Resource) -> bool:
    """Whether the Service relates to the ReplicaSet (its selector is in the template labels)."""
    if workload.kind != "ReplicaSet" or service.kind != "Service":
        return False
    if service.account != workload.account or service.namespace != workload.namespace:
        return False
    selector = _selector(service)
    if not selector:
        return False
    template = mapping(mapping(workload.spec.get("template")).get("metadata"))
    labels = mapping(template.get("labels"))
    return all(labels.get(k) == v for k, v in selector.items())


def related_services(workload: Resource, services: Iterable[Resource]) -> list[Resource]:
    """The cached Services related to a server group: selecting a ReplicaSet, or named by a
    StatefulSet's ``serviceName``."""
    if workload.kind == "ReplicaSet":
        return [s for s in services if service_selects(s, workload)]
    if workload.kind == "StatefulSet":
        wanted = workload.spec.get("serviceName")
        if not isinstance(wanted, str) or not wanted:
            return []
        return [
            s
            for s in services
            if s.kind == "Service"
            and s.name == wanted
            and s.account == workload.account
            and s.namespace == workload.namespace
        ]
    return []


def _backend_service(backend: object) -> str | None:
    backend = mapping(backend)
    service = mapping(backend.get("service"))  # networking.k8s.io/v1
    name = service.get("name") or backend.get("serviceName")  # v1beta1
    return name if isinstance(name, str) and name else None


def ingress_services(ingress: Resource) -> list[str]:
    """The names of the Services an Ingress's backends name (default backend first)."""
    spec = ingress.spec
    names: list[str] = []
    for backend in (spec.get("defaultBackend"), spec.get("backend")):
        name = _backend_service(backend)
        if name is not None and name not in names:
            names.append(name)
    for rule in spec.get("rules") or ():
        for path in mapping(mapping(rule).get("http")).get("paths") or ():
            name = _backend_service(mapping(path).get("backend"))
            if name is not None and name not in names:
                names.append(name)
    return names


def traffic_load_balancers(workload: Resource) -> list[str]:
    """The load balancers the ``traffic.spinnaker.io/load-balancers`` annotation lists (a
    JSON list of ``"kind name"``), as full names; [] when absent or unreadable."""
    raw = workload.annotations.get(TRAFFIC_ANNOTATION)
    if not isinstance(raw, str) or not raw:
        return []
    try:
        listed = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(listed, list):
        return []
    names: list[str] = []
    for item in listed:
        name = normalized_name(item) if isinstance(item, str) else None
        if name is not None and name not in names:
            names.append(name)
    return names


def is_disabled(related: Iterable[Resource], annotated: Iterable[str]) -> bool:
    """No related Service, and the traffic annotation lists at least one."""
    return not any(True for _ in related) and any(True for _ in annotated)
