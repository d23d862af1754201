"""The JSON shapes Deck and Orca read, built from decoded objects and their relationships
(clouddriver-views.md section 2; Clouddriver's ``KubernetesServerGroup``,
``KubernetesInstance``, ``KubernetesLoadBalancer``, ``KubernetesServerGroupManager``,
``KubernetesCluster`` and the controllers' view models). Null fields are omitted, as
Clouddriver's NON_NULL mapper does. Pure: the API layer reads, this shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._health import health_state, instance_counts, pod_health
from ._index import controller_owner
from ._relations import is_disabled, traffic_load_balancers
from ._resource import Resource, mapping

__all__ = [
    "PROVIDER",
    "ServerGroupParts",
    "build_info",
    "instance_full",
    "instance_lb",
    "instance_summary",
    "lb_server_group",
    "load_balancer",
    "server_group_expanded",
    "server_group_full",
    "server_group_manager",
    "server_group_summary",
]

PROVIDER = "kubernetes"


# -- instances -------------------------------------------------------------------------------


def instance_full(pod: Resource) -> dict[str, Any]:
    """``KubernetesInstance``: ``name`` is the pod's uid (Deck needs a globally unique id),
    ``humanReadableName`` the ``"pod <name>"``; zone is the namespace."""
    health = pod_health(pod.body)
    body = pod.common()
    body["name"] = pod.uid
    body["humanReadableName"] = pod.full_name
    body["zone"] = pod.namespace
    del body["region"]  # an instance has a zone, not a region
    body["health"] = health
    body["healthState"] = health_state(health)
    body["cloudProvider"] = PROVIDER
    body["providerType"] = PROVIDER
    return body


def instance_summary(pod: Resource) -> dict[str, Any]:
    """``InstanceViewModel``: what the server group summaries of the Clusters tab carry."""
    health = pod_health(pod.body)
    return {
        "id": pod.uid,
        "name": pod.full_name,
        "health": [{"type": h["type"], "state": h["state"]} for h in health],
        "healthState": health_state(health),
        "availabilityZone": pod.namespace,
    }


def instance_lb(pod: Resource) -> dict[str, Any]:
    """``LoadBalancerInstance``: the health entries merged into one map (later entries win,
    so the last container's), as Deck's load balancer view counts them."""
    merged: dict[str, Any] = {}
    for entry in pod_health(pod.body):
        merged.update(entry)
    return {"id": pod.uid, "name": pod.full_name, "zone": pod.namespace, "health": merged}


# -- server groups ---------------------------------------------------------------------------


def build_info(workload: Resource) -> dict[str, list[str]]:
    """``{"images": [...]}``: the distinct images of the pod template's containers, then its
    init containers (a CronJob's job template too)."""
    images: list[str] = []
    specs: list[Mapping[str, Any]] = []
    template = mapping(workload.spec.get("template"))
    if template:
        specs.append(mapping(template.get("spec")))
    job = mapping(mapping(workload.spec.get("jobTemplate")).get("spec"))
    if job:
        specs.append(mapping(mapping(job.get("template")).get("spec")))
    for pod_spec in specs:
        for key in ("containers", "initContainers"):
            for container in pod_spec.get(key) or ():
                image = mapping(container).get("image")
                if isinstance(image, str) and image and image not in images:
                    images.append(image)
    return {"images": images}


def _desired(workload: Resource) -> int:
    value = workload.spec.get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(slots=True)
class ServerGroupParts:
    """A server group with what Clouddriver relates to it: its pods (ownerReferences) and the
    cached Services related to it (``_relations.related_services``)."""

    workload: Resource
    pods: Sequence[Resource] = ()
    services: Sequence[Resource] = ()
    _states: list[str] | None = field(default=None, repr=False)

    @property
    def load_balancers(self) -> list[str]:
        """Related Services and the annotated ones, sorted."""
        names = {s.full_name for s in self.services}
        names.update(traffic_load_balancers(self.workload))
        return sorted(names)

    @property
    def disabled(self) -> bool:
        return is_disabled(self.services, traffic_load_balancers(self.workload))

    @property
    def managers(self) -> list[dict[str, str]]:
        """``serverGroupManagers``: the owning Deployment as {account, location, name}, the
        bare name (Deck matches ``kind + " " + name``)."""
        kind, name = controller_owner(self.workload.metadata.get("ownerReferences"))
        if kind != "Deployment" or not name:
            return []
        w = self.workload
        return [{"account": w.account, "location": w.namespace, "name": name}]

    def instance_counts(self) -> dict[str, int]:
        if self._states is None:
            self._states = [health_state(pod_health(p.body)) for p in self.pods]
        return instance_counts(self._states)


def server_group_full(parts: ServerGroupParts) -> dict[str, Any]:
    """``KubernetesServerGroup``: what ``/serverGroups/{account}/{ns}/{name}`` and the
    expanded lists answer (``disabled``, not ``isDisabled``)."""
    w = parts.workload
    body = w.common()
    body.update(
        {
            "buildInfo": build_info(w),
            "disabled": parts.disabled,
            "capacity": {"desired": _desired(w), "pinned": False},
            "instanceCounts": parts.instance_counts(),
            "loadBalancers": parts.load_balancers,
            "serverGroupManagers": parts.managers,
            "zones": [],
            "securityGroups": [],
            "launchConfig": {},
            "cloudProvider": PROVIDER,
            "type": PROVIDER,
            "instances": [instance_full(p) for p in parts.pods],
        }
    )
    return body


def server_group_summary(parts: ServerGroupParts) -> dict[str, Any]:
    """``ServerGroupViewModel``: one element of ``/applications/{app}/serverGroups`` (the
    Clusters tab, every 30 s). ``application`` (Frigga's parse of a name with a space) is
    null there, so absent; ``labels`` only when there are some."""
    w = parts.workload
    body: dict[str, Any] = {
        "name": w.full_name,
        "account": w.account,
        "region": w.namespace,
        "cluster": w.moniker.cluster or "",
        "type": PROVIDER,
        "cloudProvider": PROVIDER,
        "isDisabled": parts.disabled,
        "moniker": w.moniker.to_json(),
        "buildInfo": build_info(w),
    }
    created = w.created_ms
    if created is not None:
        body["createdTime"] = created
    body.update(
        {
            "capacity": {"desired": _desired(w), "pinned": False},
            "instances": [instance_summary(p) for p in parts.pods],
            "loadBalancers": parts.load_balancers,
            "securityGroups": [],
            "instanceCounts": parts.instance_counts(),
            "serverGroupManagers": parts.managers,
        }
    )
    if w.labels:
        body["labels"] = w.labels
    return body


def server_group_expanded(parts: ServerGroupParts) -> dict[str, Any]:
    """``?expand=true``: the full server group plus its cluster's account and moniker parts
    (``stack``/``freeFormDetail`` only when set)."""
    body = server_group_full(parts)
    moniker = parts.workload.moniker
    body["accountName"] = parts.workload.account
    body["cluster"] = moniker.cluster or ""
    if moniker.app is not None:
        body["application"] = moniker.app
    if moniker.stack is not None:
        body["stack"] = moniker.stack
    if moniker.detail is not None:
        body["freeFormDetail"] = moniker.detail
    body["account"] = parts.workload.account
    return body


def lb_server_group(parts: ServerGroupParts, *, disabled: bool | None = None) -> dict[str, Any]:
    """``LoadBalancerServerGroup``. Under ``/applications/{app}/loadBalancers`` Clouddriver
    builds the server group with only that load balancer related, so it is never disabled
    there (``disabled=False``); in a cluster's load balancers it is the server group's own."""
    w = parts.workload
    return {
        "name": w.full_name,
        "account": w.account,
        "region": w.namespace,
        "isDisabled": parts.disabled if disabled is None else disabled,
        "detachedInstances": [],
        "instances": [instance_lb(p) for p in parts.pods],
        "cloudProvider": PROVIDER,
    }


# -- managers, load balancers --------------------------------------------------------------


def server_group_manager(manager: Resource, owned: Iterable[Resource]) -> dict[str, Any]:
    """``KubernetesServerGroupManager``: a Deployment and the server groups it owns as
    summaries {name, account, namespace, region, moniker}."""
    body = manager.common()
    body["cloudProvider"] = PROVIDER
    body["serverGroups"] = [
        {
            "name": rs.full_name,
            "account": rs.account,
            "namespace": rs.namespace,
            "region": rs.namespace,
            "moniker": rs.moniker.to_json(),
        }
        for rs in sorted(owned, key=lambda r: r.name)
    ]
    return body


def load_balancer(lb: Resource, server_groups: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``KubernetesLoadBalancer`` with its (already shaped) ``LoadBalancerServerGroup``s."""
    body = lb.common()
    body["cloudProvider"] = PROVIDER
    body["type"] = PROVIDER
    body["serverGroups"] = sorted(server_groups, key=lambda sg: str(sg["name"]))
    return body
