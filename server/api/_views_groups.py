"""Deck's applications, clusters, server groups and their managers (clouddriver-views.md
2.1-2.3), read through the view index (``_views_read``) and shaped by ``server.views``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .._kinds import resolve_kind
from ..store import ViewQuery, ViewRow
from ..views import (
    CLUSTER_ROLES,
    INSTANCES,
    LOAD_BALANCERS,
    PROVIDER,
    SERVER_GROUP_MANAGERS,
    SERVER_GROUPS,
    Resource,
    ServerGroupParts,
    application,
    application_list,
    cluster_full,
    cluster_names,
    cluster_summary,
    controller_owner,
    related_services,
    server_group_expanded,
    server_group_full,
    server_group_manager,
    server_group_summary,
)
from ._errors import BadRequest, NotFound
from ._views_read import ViewJSON, ViewReads, collector_paused, decode_rows, reads

__all__ = [
    "application_clusters",
    "cluster_in_account",
    "cluster_server_group",
    "cluster_server_groups",
    "cluster_target",
    "clusters_of_account",
    "get_application",
    "list_applications",
    "list_server_groups",
    "one_cluster",
    "server_group",
    "server_group_managers",
    "server_groups",
    "truthy",
]

SG = (SERVER_GROUPS,)
Triple = tuple[str, str, str]


def truthy(request: Request, name: str, *, default: bool) -> bool:
    """A boolean query parameter as Spring reads one (true/false, any case)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise BadRequest(f"query parameter {name}: expected true or false, got {raw!r}")


def listed(request: Request, name: str) -> list[str] | None:
    """A list query parameter (repeated and/or comma-separated, as Spring binds a List);
    None when absent."""
    values = request.query_params.getlist(name)
    if not values:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


# -- reading server groups with what relates to them ----------------------------------------


def with_relations(base: ViewQuery) -> tuple[ViewQuery, ViewQuery, ViewQuery]:
    """The server groups ``base`` selects, their pods, and the Services in their namespaces
    (what ``assemble`` relates)."""
    lean = replace(base, bodies=False, limit=None)
    return (
        base,
        ViewQuery(roles=(INSTANCES,), owned_by=lean),
        ViewQuery(roles=(LOAD_BALANCERS,), kinds=("Service",), near=lean),
    )


def assemble(
    groups: Iterable[Resource], pods: Iterable[Resource], services: Iterable[Resource]
) -> list[ServerGroupParts]:
    """Each server group with its pods (by their controller ownerReference) and its related
    Services, in name order."""
    by_owner: dict[tuple[str, str, str, str], list[Resource]] = defaultdict(list)
    for pod in pods:
        kind, name = controller_owner(pod.metadata.get("ownerReferences"))
        by_owner[(pod.account, pod.namespace, kind, name)].append(pod)
    near: dict[tuple[str, str], list[Resource]] = defaultdict(list)
    for service in services:
        near[(service.account, service.namespace)].append(service)
    parts = []
    for g in sorted(groups, key=lambda r: (r.account, r.namespace, r.kind, r.name)):
        owned = sorted(by_owner.get((g.account, g.namespace, g.kind, g.name), ()),
                       key=lambda p: p.name)  # fmt: skip
        parts.append(
            ServerGroupParts(g, owned, related_services(g, near.get((g.account, g.namespace), ())))
        )
    return parts


async def read_groups(view: ViewReads, base: ViewQuery) -> list[ServerGroupParts]:
    groups, pods, services = await view.resources(*with_relations(base))
    with collector_paused():
        return assemble(groups, pods, services)


async def read_triples(
    view: ViewReads,
    *,
    app: str | None = None,
    account: str | None = None,
    cluster: str | None = None,
) -> list[Triple]:
    """The (app, account, cluster) of every cluster (of an app, an account, a name)."""
    query = ViewQuery(roles=CLUSTER_ROLES, clusters=True, app=app, account=account,
                      cluster=cluster)  # fmt: skip
    (rows,) = await view.rows(query)
    return [(r.app, r.account, r.cluster) for r in rows if r.app and r.cluster]


def _json(body: Any, view: ViewReads, status: int = 200) -> Response:
    return ViewJSON(body, status_code=status, headers=view.headers)


# -- applications -----------------------------------------------------------------------------


async def list_applications(request: Request) -> Response:
    """``GET /applications``: every application with a cluster (``expand`` and
    ``restricted`` change nothing here: the clusters are the index's).

    Gate asks every 5 s, and the answer changes only when a cluster appears or goes: it is
    kept, encoded, with the version of the set of clusters it was built from (the store's,
    bumped in the transaction that changes the set), and built again when that moves."""
    truthy(request, "expand", default=True)
    truthy(request, "restricted", default=True)
    view = await reads(request)
    ((version,),) = await view.rows(ViewQuery(version=True))
    kept = getattr(request.app.state, "views_applications", None)
    if kept is not None and kept[0] == version.resource_version:
        return Response(kept[1], media_type="application/json", headers=view.headers)
    answer = _json(application_list(await read_triples(view)), view)
    request.app.state.views_applications = (version.resource_version, answer.body)
    return answer


async def get_application(request: Request) -> Response:
    app = request.path_params["app"]
    view = await reads(request)
    triples = await read_triples(view, app=app)
    if not triples:
        raise NotFound(f"Application does not exist (name: {app})")
    return _json(application(app, triples), view)


async def application_clusters(request: Request) -> Response:
    """``{account: [cluster, ...]}`` ({} when none)."""
    view = await reads(request)
    return _json(cluster_names(await read_triples(view, app=request.path_params["app"])), view)


# -- clusters ---------------------------------------------------------------------------------


def _by_cluster(parts: Sequence[ServerGroupParts]) -> dict[str, list[ServerGroupParts]]:
    grouped: dict[str, list[ServerGroupParts]] = defaultdict(list)
    for p in parts:
        grouped[p.workload.moniker.cluster or ""].append(p)
    return grouped


async def clusters_of_account(request: Request) -> Response:
    """``GET /applications/{app}/clusters/{account}``: each cluster with the names of its
    server groups and their load balancers; 404 when there is none."""
    app, account = request.path_params["app"], request.path_params["account"]
    view = await reads(request)
    triples = await read_triples(view, app=app, account=account)
    if not triples:
        raise NotFound(f"No clusters found (application: {app}, account: {account})")
    base = ViewQuery(roles=SG, app=app, account=account)
    lean = replace(base, bodies=False)
    groups, services = await view.resources(
        base, ViewQuery(roles=(LOAD_BALANCERS,), kinds=("Service",), near=lean)
    )
    grouped = _by_cluster(assemble(groups, (), services))
    return _json(
        [cluster_summary(app, account, name, grouped.get(name, [])) for _, _, name in triples],
        view,
    )


async def _cluster(request: Request, expand: bool) -> tuple[dict[str, Any] | None, ViewReads]:
    p = request.path_params
    app, account, name = p["app"], p["account"], p["cluster"]
    view = await reads(request)
    if not await read_triples(view, app=app, account=account, cluster=name):
        return None, view
    parts: list[ServerGroupParts] = []
    if expand:
        parts = await read_groups(view, ViewQuery(roles=SG, app=app, account=account,
                                                  cluster=name))  # fmt: skip
    return cluster_full(app, account, name, parts, expand=expand), view


async def cluster_in_account(request: Request) -> Response:
    """``GET /applications/{app}/clusters/{account}/{cluster}``: a list with the cluster."""
    body, view = await _cluster(request, truthy(request, "expand", default=True))
    if body is None:
        p = request.path_params
        raise NotFound(
            f"Cluster not found (application: {p['app']}, account: {p['account']}, "
            f"name: {p['cluster']})"
        )
    return _json([body], view)


def _check_provider(request: Request) -> None:
    p = request.path_params
    if p["type"] != PROVIDER:
        raise NotFound(
            f"No cluster provider of type: {p['type']} found that can handle cluster: "
            f"{p['cluster']} in application: {p['app']}, account: {p['account']}"
        )


async def _cluster_or_404(request: Request) -> tuple[dict[str, Any], ViewReads]:
    """The cluster of the path (``expand`` on by default), or Clouddriver's 404."""
    body, view = await _cluster(request, truthy(request, "expand", default=True))
    if body is None:
        p = request.path_params
        raise NotFound(
            f"No clusters found (application: {p['app']}, account: {p['account']}, "
            f"type: {p['type']})"
        )
    return body, view


async def one_cluster(request: Request) -> Response:
    """``GET .../clusters/{account}/{cluster}/kubernetes`` (Orca's getCluster)."""
    _check_provider(request)
    body, view = await _cluster_or_404(request)
    return _json(body, view)


async def cluster_server_groups(request: Request) -> Response:
    """``GET .../{cluster}/kubernetes/serverGroups``: the cluster's server groups (full),
    of one namespace with ``region``."""
    _check_provider(request)
    body, view = await _cluster_or_404(request)
    region = request.query_params.get("region")
    groups = [g for g in body["serverGroups"] if not region or g["region"] == region]
    return _json(groups, view)


async def cluster_server_group(request: Request) -> Response:
    """Clouddriver loads a minimal cluster here for Kubernetes (no server groups): always 404
    (spinnaker/spinnaker#6171; Orca uses ``/manifests/.../dynamic/{criteria}``)."""
    p = request.path_params
    raise NotFound(
        f"Server group not found (account: {p['account']}, name: {p['name']}, type: {p['type']})"
    )


_TARGETS = ("current", "previous", "oldest", "largest", "fail")


async def cluster_target(request: Request) -> Response:
    """``.../{cluster}/kubernetes/{scope}/serverGroups/target/{target}``: always 404 for
    Kubernetes, as ``cluster_server_group``."""
    p = request.path_params
    target = p["target"].lower().removesuffix("_asg").removesuffix("_asg_dynamic")
    if target not in _TARGETS:
        raise NotFound(f"Target not found (target: {p['target']})")
    raise NotFound(
        f"No server groups found (account: {p['account']}, location: {p['scope']}, "
        f"cluster: {p['cluster']}, type: {p['type'].upper()})"
    )


# -- server groups ----------------------------------------------------------------------------


async def list_server_groups(request: Request) -> Response:
    """``GET /applications/{app}/serverGroups``: summaries (the Clusters tab, every 30 s), or
    full ones with ``expand=true``; ``clusters=acct:cluster,...`` keeps those clusters'."""
    app = request.path_params["app"]
    expand = truthy(request, "expand", default=False)
    provider = request.query_params.get("cloudProvider")
    clusters = listed(request, "clusters")
    if clusters is None and "clusters" in request.query_params:
        clusters = []
    view = await reads(request)
    if (provider and provider.lower() != PROVIDER) or clusters == []:
        return _json([], view)
    found = await view.rows(*with_relations(ViewQuery(roles=SG, app=app)))
    with collector_paused():
        return _server_groups_answer(found, clusters, expand, view)


def _server_groups_answer(
    found: list[list[ViewRow]], clusters: list[str] | None, expand: bool, view: ViewReads
) -> Response:
    """``list_server_groups``'s answer, decoded, shaped and encoded in one call under one
    pause of the collector: its objects (an app's 100 pods decoded) are freed when it returns,
    before the collector resumes, so resuming finds no young objects to walk (with a pause per
    step, the collection at each resume walked them: 1.2 s of the server's 13 s of CPU in
    the bench, ~6 ms an answer)."""
    groups, pods, services = (decode_rows(rows) for rows in found)
    parts = [p for p in assemble(groups, pods, services) if p.workload.moniker.cluster]
    if clusters is not None:
        wanted = {tuple(c.split(":", 1)) for c in clusters if c.count(":") == 1}
        parts = [p for p in parts if (p.workload.account, p.workload.moniker.cluster) in wanted]
    shape = server_group_expanded if expand else server_group_summary
    return _json([shape(p) for p in parts], view)


def _server_group_query(account: str, region: str, full: str) -> ViewQuery | None:
    tokens = full.split()
    if len(tokens) != 2:
        return None
    ref = resolve_kind(tokens[0])
    return ViewQuery(roles=SG, account=account, namespace=region, kinds=(ref.kind,),
                     name=tokens[1])  # fmt: skip


async def _one_server_group(request: Request) -> Response:
    p = request.path_params
    account, region, name = p["account"], p["region"], p["name"]
    view = await reads(request)
    query = _server_group_query(account, region, name)
    parts = await read_groups(view, query) if query is not None else []
    if not parts:
        raise NotFound(
            f"Server group not found (account: {account}, region: {region}, name: {name})"
        )
    return _json(server_group_full(parts[0]), view)


async def server_group(request: Request) -> Response:
    """``GET /applications/{app}/serverGroups/{account}/{region}/{name}`` and
    ``GET /serverGroups/{account}/{region}/{name}``: the full server group."""
    return await _one_server_group(request)


async def server_groups(request: Request) -> Response:
    """``GET /serverGroups?ids=acct:ns:kind name,...`` or ``?applications=a,b``: summaries
    (Deck's global search counts instances with it)."""
    apps = listed(request, "applications") or []
    ids = listed(request, "ids") or []
    if bool(apps) == bool(ids):
        raise BadRequest("Provide either 'applications' or 'ids' parameter (but not both)")
    provider = request.query_params.get("cloudProvider")
    view = await reads(request)
    if apps:
        if provider and provider.lower() != PROVIDER:
            return _json([], view)
        found = await view.resources(
            *[q for app in apps for q in with_relations(ViewQuery(roles=SG, app=app))]
        )
        parts = [
            p
            for i in range(0, len(found), 3)
            for p in assemble(*found[i : i + 3])
            if p.workload.moniker.cluster
        ]
        return _json([server_group_summary(p) for p in parts], view)
    tokens = [i.split(":") for i in ids]
    bad = [":".join(t) for t in tokens if len(t) != 3]
    if bad:
        raise BadRequest(
            "Expected ids in the format <account>:<region>:<name> but got invalid ids: "
            + ", ".join(bad)
        )
    queries = [_server_group_query(a, r, n) for a, r, n in tokens]
    found = await view.resources(*[x for q in queries if q is not None for x in with_relations(q)])
    parts = [p for i in range(0, len(found), 3) for p in assemble(*found[i : i + 3])]
    return _json([server_group_summary(p) for p in parts], view)


# -- server group managers --------------------------------------------------------------------


async def server_group_managers(request: Request) -> Response:
    """``GET /applications/{app}/serverGroupManagers``: each Deployment with the server
    groups it owns; [] for an unknown application."""
    managers = ViewQuery(roles=(SERVER_GROUP_MANAGERS,), app=request.path_params["app"])
    view = await reads(request)
    deployments, owned = await view.resources(
        managers, ViewQuery(roles=SG, owned_by=replace(managers, bodies=False))
    )
    by_owner: dict[tuple[str, str, str, str], list[Resource]] = defaultdict(list)
    for rs in owned:
        kind, name = controller_owner(rs.metadata.get("ownerReferences"))
        by_owner[(rs.account, rs.namespace, kind, name)].append(rs)
    return _json(
        [
            server_group_manager(d, by_owner.get((d.account, d.namespace, d.kind, d.name), ()))
            for d in deployments
        ],
        view,
    )
