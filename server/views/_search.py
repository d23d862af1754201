"""``/search`` as Clouddriver's KubernetesSearchProvider answers it (clouddriver-views.md 2.7).
Pure: the store finds the matches (``server/store/_views.py``), this plans and shapes.

A query matches, case-insensitively, as the glob ``*q*`` on cache keys: an object's
``kubernetes.v2:infrastructure:<kind>:<account>:<namespace>:<name>`` (account and namespace
text match too), an application's ``kubernetes.v2:logical:applications:<app>``, a
cluster's ``kubernetes.v2:logical:clusters:<account>:<app>:<cluster>``. A type is a
Kubernetes kind (``replicaSet``), a Spinnaker kind (``serverGroups``: its Kubernetes kinds)
or a logical one (``applications``, ``clusters``). Results: the direct matches of the
requested types, then the objects linked to a matching application or cluster, each with
``"application"``/``"cluster"`` added, so an object can appear twice. ``totalMatches`` is
the size of the page returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._kinds import resolve_kind, spinnaker_kind_name
from ._kinds import APP_ROLES, CLUSTER_ROLES, ROLES, kinds_of_role
from ._model import PROVIDER

__all__ = [
    "APPLICATIONS",
    "CLUSTERS",
    "SearchHits",
    "SearchPlan",
    "app_key",
    "cluster_key",
    "infra_result",
    "plan_search",
    "result_set",
    "search_results",
]

APPLICATIONS, CLUSTERS = "applications", "clusters"
_LOGICAL_PREFIX = "kubernetes.v2:logical:"
_ALL_KINDS = tuple(sorted({kind for role in ROLES for kind in kinds_of_role(role)}))
_ROLE_OF_KIND = {kind: role for role in ROLES for kind in kinds_of_role(role)}
# Which key names the object in a direct result (the handlers' hydrateSearchResult).
_NAME_KEY = {
    "ReplicaSet": "serverGroup",
    "StatefulSet": "serverGroup",
    "DaemonSet": "serverGroup",
    "Service": "loadBalancer",
    "Ingress": "loadBalancer",
    "Pod": "instanceId",
    "NetworkPolicy": "id",
}


def _part(text: str) -> str:
    return text.replace(":", ";")


def app_key(app: str) -> str:
    return f"{_LOGICAL_PREFIX}{APPLICATIONS}:{_part(app)}"


def cluster_key(account: str, app: str, cluster: str) -> str:
    return f"{_LOGICAL_PREFIX}{CLUSTERS}:{_part(account)}:{_part(app)}:{_part(cluster)}"


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """What to look for: the Kubernetes kinds searched (``kinds``), whether application and
    cluster keys are results themselves, and the roles of the kinds searched."""

    kinds: tuple[str, ...]
    applications: bool
    clusters: bool

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(sorted({_ROLE_OF_KIND[k] for k in self.kinds}))

    @property
    def empty(self) -> bool:
        return not (self.kinds or self.applications or self.clusters)


def plan_search(types: Sequence[str]) -> SearchPlan:
    """The kinds ``types`` asks for (none given: every kind, no logical keys; unknown types
    are dropped, as Clouddriver keeps only the caches it has)."""
    wanted: set[str] = set()
    applications = clusters = False
    if not types:
        return SearchPlan(_ALL_KINDS, False, False)
    for raw in types:
        token = raw.strip()
        if token == APPLICATIONS:
            applications = True
        elif token == CLUSTERS:
            clusters = True
        elif token in ROLES:
            wanted.update(kinds_of_role(token))
        elif token:
            kind = resolve_kind(token).kind
            if kind in _ROLE_OF_KIND and spinnaker_kind_name(kind) == token:
                wanted.add(kind)
    return SearchPlan(tuple(sorted(wanted)), applications, clusters)


def infra_result(kind: str, account: str, namespace: str, name: str) -> dict[str, Any]:
    """A direct match of an object: its key's fields plus what names it for Deck."""
    token = spinnaker_kind_name(kind)
    full = f"{token} {name}"
    result: dict[str, Any] = {
        "provider": PROVIDER,
        "group": token,
        "kubernetesKind": token,
        "account": account,
        "namespace": namespace,
        "region": namespace,
        "name": full,
    }
    key = _NAME_KEY.get(kind)
    if key is not None:
        result[key] = full
    result["type"] = _ROLE_OF_KIND.get(kind, "unclassified")
    return result


def app_result(app: str) -> dict[str, Any]:
    return {
        "provider": PROVIDER,
        "group": APPLICATIONS,
        "logicalKind": APPLICATIONS,
        "name": app,
        "application": app,
        "type": APPLICATIONS,
    }


def cluster_result(account: str, app: str, cluster: str) -> dict[str, Any]:
    return {
        "provider": PROVIDER,
        "group": CLUSTERS,
        "logicalKind": CLUSTERS,
        "account": account,
        "application": app,
        "name": cluster,
        "cluster": cluster,
        "type": CLUSTERS,
    }


Row = tuple[str, str, str, str, str, str, str]  # kind, account, namespace, name, role, app, cluster
Triple = tuple[str, str, str]  # account, app, cluster


@dataclass(frozen=True, slots=True)
class SearchHits:
    """What the store found for a plan and a query (each list in key order, bounded)."""

    direct: Sequence[Row] = ()  # objects of the plan's kinds whose key matched
    apps: Sequence[str] = ()  # application keys that matched
    clusters: Sequence[Triple] = ()  # cluster keys that matched
    app_clusters: Sequence[Triple] = ()  # every cluster of a matching application
    related: Sequence[Row] = ()  # objects of the plan's kinds in a matching app or cluster


def search_results(plan: SearchPlan, hits: SearchHits) -> list[dict[str, Any]]:
    """Every result, direct matches first (objects, then applications, then clusters), then
    the related ones."""
    results = [infra_result(r[0], r[1], r[2], r[3]) for r in hits.direct if r[0] in plan.kinds]
    if plan.applications:
        results.extend(app_result(app) for app in hits.apps)
    if plan.clusters:
        results.extend(cluster_result(*c) for c in hits.clusters)
    apps = set(hits.apps)
    clusters = set(hits.clusters)
    for kind, account, namespace, name, role, app, cluster in hits.related:
        if kind not in plan.kinds:
            continue
        result = infra_result(kind, account, namespace, name)
        linked = False
        if role in APP_ROLES and app in apps:
            result["application"] = app
            linked = True
        if role in CLUSTER_ROLES and (account, app, cluster) in clusters:
            result["cluster"] = cluster
            linked = True
        if linked:
            results.append(result)
    if plan.clusters:  # a matching application's clusters
        results.extend(cluster_result(*c) for c in hits.app_clusters if c[1] in apps)
    if plan.applications:  # the application of a matching cluster
        by_app: dict[str, str] = {}
        for _, app, cluster in hits.clusters:
            by_app[app] = cluster
        for app, cluster in by_app.items():
            results.append({**app_result(app), "cluster": cluster})
    return results


def result_set(
    q: str, page: int, page_size: int, results: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The one-element list Deck reads ``[0]`` of: the page, ``totalMatches`` its size."""
    start = page_size * (page - 1)
    chosen = list(results[start : start + page_size]) if start >= 0 else []
    return [
        {
            "totalMatches": len(chosen),
            "pageNumber": page,
            "pageSize": page_size,
            "platform": PROVIDER,
            "query": q,
            "results": chosen,
        }
    ]
