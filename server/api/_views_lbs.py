"""Deck's load balancers, instances and firewalls (clouddriver-views.md 2.4-2.6), read through
the view index and shaped by ``server.views``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .._kinds import resolve_kind
from ..store import ViewQuery
from ..views import (
    INSTANCES,
    LOAD_BALANCERS,
    PROVIDER,
    SECURITY_GROUPS,
    Resource,
    ServerGroupParts,
    by_region,
    instance_full,
    lb_server_group,
    load_balancer,
    related_services,
    security_group,
)
from ._errors import NotFound
from ._views_groups import assemble
from ._views_read import ViewJSON, ViewReads, collector_paused, reads

__all__ = [
    "app_load_balancers",
    "get_instance",
    "list_load_balancers",
    "load_balancer_by_name",
    "security_group_details",
    "security_groups",
    "security_groups_named",
    "security_groups_of_account",
    "security_groups_of_provider",
]

# The server groups a load balancer can relate to: ReplicaSets (by the Service's selector)
# and StatefulSets (by their serviceName).
_RELATABLE = ("ReplicaSet", "StatefulSet")


def _json(body: Any, view: ViewReads) -> Response:
    return ViewJSON(body, headers=view.headers)


async def _load_balancers(view: ViewReads, base: ViewQuery) -> list[dict[str, Any]]:
    """The load balancers ``base`` selects, each with the server groups related to it (with
    only it: never disabled there) and their pods, sorted by name (case-insensitively)."""
    lean = replace(base, bodies=False, limit=None)
    lbs, near = await view.resources(base, ViewQuery(kinds=_RELATABLE, near=lean))
    services = [lb for lb in lbs if lb.kind == "Service"]
    members: dict[str, list[Resource]] = {}
    for group in near:
        for service in related_services(group, services):
            members.setdefault(service.full_name, []).append(group)
    related = [g for found in members.values() for g in found]
    owners = tuple({(g.account, g.namespace, g.kind, g.name) for g in related})
    pods: list[Resource] = []
    if owners:
        (pods,) = await view.resources(ViewQuery(roles=(INSTANCES,), owners=owners))
    with collector_paused():
        return _shape_load_balancers(lbs, members, related, pods)


def _shape_load_balancers(
    lbs: list[Resource],
    members: dict[str, list[Resource]],
    related: list[Resource],
    pods: list[Resource],
) -> list[dict[str, Any]]:
    parts = {id(p.workload): p for p in assemble(related, pods, ())}
    shaped = []
    for lb in lbs:
        groups: list[dict[str, Any]] = []
        if lb.kind == "Service":
            groups = [
                lb_server_group(parts.get(id(g)) or ServerGroupParts(g), disabled=False)
                for g in members.get(lb.full_name, ())
            ]
        shaped.append(load_balancer(lb, groups))
    return sorted(shaped, key=lambda body: (str(body["name"]).lower(), str(body["account"])))


async def app_load_balancers(request: Request) -> Response:
    """``GET /applications/{app}/loadBalancers``: every Service and Ingress of the app."""
    view = await reads(request)
    base = ViewQuery(roles=(LOAD_BALANCERS,), app=request.path_params["app"])
    return _json(await _load_balancers(view, base), view)


async def load_balancer_by_name(request: Request) -> Response:
    """``GET /kubernetes/loadBalancers/{account}/{region}/{name}``: a list with the one load
    balancer, ``[]`` (200) when unknown."""
    p = request.path_params
    view = await reads(request)
    tokens = p["name"].split()
    if len(tokens) != 2:
        return _json([], view)
    base = ViewQuery(roles=(LOAD_BALANCERS,), account=p["account"], namespace=p["region"],
                     kinds=(resolve_kind(tokens[0]).kind,), name=tokens[1])  # fmt: skip
    return _json(await _load_balancers(view, base), view)


async def list_load_balancers(request: Request) -> Response:
    """``GET /kubernetes/loadBalancers``: always ``[]`` for Kubernetes (as Clouddriver)."""
    return ViewJSON([])


# -- instances --------------------------------------------------------------------------------


async def get_instance(request: Request) -> Response:
    """``GET /instances/{account}/{region}/{name}`` (``"pod <name>"``, as the summary
    instance's ``name``, or the bare name)."""
    p = request.path_params
    raw = p["name"]
    tokens = raw.split()
    name = tokens[-1] if tokens else ""
    view = await reads(request)
    found: list[Resource] = []
    if len(tokens) == 1 or (len(tokens) == 2 and resolve_kind(tokens[0]).kind == "Pod"):
        (found,) = await view.resources(
            ViewQuery(roles=(INSTANCES,), account=p["account"], namespace=p["region"], name=name)
        )
    if not found:
        raise NotFound(f"Instance not found (id: {raw})")
    return _json(instance_full(found[0]), view)


# -- firewalls --------------------------------------------------------------------------------


def _policy_query(account: str | None = None, region: str | None = None) -> ViewQuery:
    return ViewQuery(roles=(SECURITY_GROUPS,), account=account, namespace=region, bodies=False)


async def security_groups(request: Request) -> Response:
    """``GET /securityGroups``: ``{account: {"kubernetes": {namespace: [summary]}}}``."""
    view = await reads(request)
    (rows,) = await view.rows(_policy_query())
    by_account: dict[str, list[tuple[str, str]]] = {}
    for r in rows:
        by_account.setdefault(r.account, []).append((r.namespace, _full(r.kind, r.name)))
    return _json({a: {PROVIDER: by_region(found)} for a, found in sorted(by_account.items())}, view)


def _full(kind: str, name: str) -> str:
    return f"{resolve_kind(kind).token} {name}"


async def security_groups_of_account(request: Request) -> Response:
    """``GET /securityGroups/{account}``: ``{"kubernetes": {namespace: [summary]}}``, or with
    ``region``: ``{"kubernetes": [summary]}``."""
    account = request.path_params["account"]
    region = request.query_params.get("region")
    view = await reads(request)
    (rows,) = await view.rows(_policy_query(account, region))
    grouped = by_region((r.namespace, _full(r.kind, r.name)) for r in rows)
    if not rows:
        return _json({}, view)
    if region is not None:
        return _json({PROVIDER: grouped.get(region, [])}, view)
    return _json({PROVIDER: grouped}, view)


async def security_groups_of_provider(request: Request) -> Response:
    """``GET /securityGroups/{account}/{cloudProvider}``: ``{namespace: [summary]}``, or
    with ``region``: ``[summary]``."""
    p = request.path_params
    region = request.query_params.get("region")
    view = await reads(request)
    rows = []
    if p["cloudProvider"] == PROVIDER:
        (rows,) = await view.rows(_policy_query(p["account"], region))
    grouped = by_region((r.namespace, _full(r.kind, r.name)) for r in rows)
    if region is not None:
        return _json(grouped.get(region, []), view)
    return _json(grouped, view)


def _policy_name(raw: str) -> str | None:
    """The NetworkPolicy's name in ``"networkPolicy x"`` (or a bare ``x``); None for another
    kind."""
    tokens = raw.split()
    if len(tokens) == 1:
        return tokens[0]
    if len(tokens) == 2 and resolve_kind(tokens[0]).kind == "NetworkPolicy":
        return tokens[1]
    return None


async def security_groups_named(request: Request) -> Response:
    """``GET /securityGroups/{account}/{cloudProvider}/{name}``: ``{namespace: [summary]}``
    of the policies of that name in every namespace."""
    p = request.path_params
    view = await reads(request)
    name = _policy_name(p["name"])
    rows = []
    if p["cloudProvider"] == PROVIDER and name is not None:
        (rows,) = await view.rows(
            ViewQuery(roles=(SECURITY_GROUPS,), account=p["account"], name=name, bodies=False)
        )
    return _json(by_region((r.namespace, _full(r.kind, r.name)) for r in rows), view)


async def security_group_details(request: Request) -> Response:
    """``GET /securityGroups/{account}/{cloudProvider}/{region}/{name}``: one policy's
    details; 404 ``Security group '<name>' does not exist``."""
    p = request.path_params
    view = await reads(request)
    name = _policy_name(p["name"])
    found: list[Resource] = []
    if p["cloudProvider"] == PROVIDER and name is not None:
        (found,) = await view.resources(
            ViewQuery(
                roles=(SECURITY_GROUPS,), account=p["account"], namespace=p["region"], name=name
            )
        )
    if not found:
        raise NotFound(f"Security group '{p['name']}' does not exist")
    return _json(security_group(found[0]), view)
