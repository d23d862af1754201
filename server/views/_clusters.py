"""Applications and clusters (clouddriver-views.md 2.1), from the (account, application,
cluster) triples the store's index gives and the server groups of a cluster. Pure.

A cluster exists for every (account, app, moniker cluster) of a server group or server group
manager; an application is listed only when it has one (``KubernetesApplicationProvider``
reads cluster keys): an app with only a Service is absent from ``/applications``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ._model import (
    PROVIDER,
    ServerGroupParts,
    lb_server_group,
    load_balancer,
    server_group_full,
)
from ._resource import Resource

__all__ = [
    "application",
    "application_list",
    "cluster_full",
    "cluster_names",
    "cluster_summary",
]

Triple = tuple[str, str, str]  # (app, account, cluster)


def cluster_names(triples: Iterable[Triple]) -> dict[str, list[str]]:
    """``{account: [cluster, ...]}`` (sorted)."""
    names: dict[str, list[str]] = {}
    for _, account, cluster in sorted(set(triples)):
        names.setdefault(account, []).append(cluster)
    return names


def application_list(triples: Iterable[Triple]) -> list[dict[str, Any]]:
    """``GET /applications``: ``{"name", "attributes": {"name"}, "clusterNames"}`` per app,
    sorted by name (case-insensitively). One pass over the sorted triples (Gate asks every
    5 s; 1,000 clusters of 500 applications)."""
    listed: list[dict[str, Any]] = []
    names: dict[str, list[str]] = {}
    last = None
    for app, account, cluster in sorted(set(triples)):
        if app != last:
            names = {}
            listed.append({"name": app, "attributes": {"name": app}, "clusterNames": names})
            last = app
        names.setdefault(account, []).append(cluster)
    listed.sort(key=lambda entry: (str(entry["name"]).lower(), str(entry["name"])))
    return listed


def application(app: str, triples: Iterable[Triple]) -> dict[str, Any]:
    """``GET /applications/{app}``: the minimal clusters (no server groups or load
    balancers: the Kubernetes provider loads cluster summaries) per account."""
    clusters = {
        account: [
            {"name": name, "loadBalancers": [], "serverGroups": [], "provider": PROVIDER}
            for name in names
        ]
        for account, names in cluster_names(triples).items()
    }
    return {
        "name": app,
        "attributes": {"name": app, "cloudProviders": PROVIDER},
        "clusters": clusters,
    }


def _cluster_load_balancers(
    groups: Sequence[ServerGroupParts], services: dict[str, Resource]
) -> list[dict[str, Any]]:
    """The Services related to the cluster's server groups, each with only this cluster's
    server groups (as ``loadClusters`` builds them)."""
    members: dict[str, list[ServerGroupParts]] = {}
    for parts in groups:
        for service in parts.services:
            members.setdefault(service.full_name, []).append(parts)
    return [
        load_balancer(services[name], [lb_server_group(p) for p in found])
        for name, found in sorted(members.items())
        if name in services
    ]


def cluster_full(
    app: str, account: str, name: str, groups: Sequence[ServerGroupParts], *, expand: bool
) -> dict[str, Any]:
    """``KubernetesCluster`` (``GET .../clusters/{account}/{cluster}[/kubernetes]``):
    ``expand=false`` answers the minimal cluster, with empty lists."""
    services = {s.full_name: s for p in groups for s in p.services}
    return {
        "name": name,
        "moniker": {"app": app, "cluster": name},
        "type": PROVIDER,
        "accountName": account,
        "application": app,
        "serverGroups": [server_group_full(p) for p in groups] if expand else [],
        "loadBalancers": _cluster_load_balancers(groups, services) if expand else [],
    }


def cluster_summary(
    app: str, account: str, name: str, groups: Sequence[ServerGroupParts]
) -> dict[str, Any]:
    """``ClusterViewModel`` (``GET .../clusters/{account}``): names only."""
    load_balancers = sorted({s.full_name for p in groups for s in p.services})
    return {
        "name": name,
        "account": account,
        "moniker": {"app": app, "cluster": name},
        "loadBalancers": load_balancers,
        "serverGroups": sorted(p.workload.full_name for p in groups),
    }
