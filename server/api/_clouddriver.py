"""Clouddriver's Kubernetes reads: /credentials and /manifests, shaped as clouddriver-api.md
sections 4 and 5 say (the shapes Orca and Deck read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._kinds import SPINNAKER_KIND_MAP, KindRef, resolve_kind
from .._manifest_status import compute_status
from .._moniker import ANNOTATION_PREFIX as MONIKER_PREFIX
from .._moniker import moniker_for
from ..store import AccountRecord, Store, StoredObject
from ._armory import account_namespaces
from ._context import collect_objects, context
from ._errors import BadRequest, NotFound
from ._fresh import list_fresh, read_fresh
from ._manifest_view import (
    age_key,
    artifacts_of,
    events_about,
    parse_manifest_name,
    pick_by_criteria,
)
from ._unavailable import check_available, marks_by_account

_decode = msgspec.json.decode


def _truthy(raw: str | None, *, default: bool, name: str) -> bool:
    if raw is None or raw == "":
        return default
    lowered = raw.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise BadRequest(f"query parameter {name}: expected true or false, got {raw!r}")


async def _account(request: Request, name: str) -> AccountRecord:
    record = await context(request).state.store.get_account(name)
    if record is None:
        raise NotFound(f"Account does not exist (name: {name})")
    return record


def _permissions(record: AccountRecord) -> dict[str, list[str]]:
    raw = record.permissions or record.properties.get("permissions") or {}
    if not isinstance(raw, Mapping):
        return {}
    return {str(k).upper(): list(v) for k, v in raw.items() if isinstance(v, list) and v}


async def _credential(
    request: Request, record: AccountRecord, *, expand: bool, unavailable: list[Any]
) -> dict[str, Any]:
    props = record.properties
    body: dict[str, Any] = {
        "name": record.name,
        "type": "kubernetes",
        "cloudProvider": "kubernetes",
        "environment": props.get("environment") or record.name,
        "accountType": props.get("accountType") or record.name,
        "requiredGroupMembership": props.get("requiredGroupMembership") or [],
        "challengeDestructiveActions": bool(props.get("challengeDestructiveActions", False)),
        "primaryAccount": bool(props.get("primaryAccount", False)),
    }
    permissions = _permissions(record)
    if permissions:
        body["permissions"] = permissions
    # Not Clouddriver's: the kinds the agent cannot watch now, and why (an operator's first
    # question when an object is missing).
    body["unavailableKinds"] = unavailable
    if expand:
        body["namespaces"] = await account_namespaces(request, record)
        body["spinnakerKindMap"] = dict(SPINNAKER_KIND_MAP)
        body["dockerRegistries"] = []
        body["enabled"] = True
        body["cacheThreads"] = props.get("cacheThreads", 1)
    return body


async def list_credentials(request: Request) -> Response:
    expand = _truthy(request.query_params.get("expand"), default=False, name="expand")
    store = context(request).state.store
    records = await store.list_accounts()
    marks = await marks_by_account(store)
    return JSONResponse(
        [
            await _credential(request, r, expand=expand, unavailable=marks.get(r.name, []))
            for r in records
        ]
    )


async def get_credentials(request: Request) -> Response:
    record = await _account(request, request.path_params["account"])
    marks = await marks_by_account(context(request).state.store, record.name)
    return JSONResponse(
        await _credential(request, record, expand=True, unavailable=marks.get(record.name, []))
    )


async def _find(
    store: Store, account: str, ref: KindRef, namespace: str, name: str
) -> StoredObject | None:
    if ref.group is not None:
        return await store.get_object(account, ref.group, ref.kind, namespace, name)
    # A custom kind named without its group: look it up by kind alone (a bounded scan).
    found = await collect_objects(
        store, account=account, kind=ref.kind, namespace=namespace, keep=lambda o: o.name == name
    )
    return found[0] if found else None


# The API server serves each Event under both groups, and the agent may watch either or both.
_EVENT_GROUPS = ("", "events.k8s.io")


async def _events(store: Store, account: str, obj: StoredObject) -> list[Mapping[str, Any]]:
    # Events live in the namespace of the object they are about (default for cluster-scoped).
    namespace = obj.namespace or "default"
    # One read per group: with the group the store reads its index from (account, group,
    # kind, namespace) on; without it, every index entry of the account (with 1M objects,
    # ~15 ms of CPU a GET that grew with the account's size: bench_server --objects).
    found = [
        event
        for group in _EVENT_GROUPS
        for event in await collect_objects(
            store, account=account, kind="Event", namespace=namespace, group=group
        )
    ]
    bodies = [_decode(e.body) for e in found]
    return events_about(bodies, obj.kind, obj.name, obj.namespace)


async def _manifest(request: Request, location: str, raw_name: str) -> Response:
    account = request.path_params["account"]
    include_events = _truthy(
        request.query_params.get("includeEvents"), default=True, name="includeEvents"
    )
    ref, name = parse_manifest_name(raw_name)
    await _account(request, account)
    store = context(request).state.store
    namespace = "" if location in ("", "_") else location
    stored, headers = await read_fresh(
        context(request).state.feed.freshness,
        lambda: _find(store, account, ref, namespace, name),
        account,
        ref,
        namespace,
        name,
    )
    if stored is None:
        # Not there: maybe because the agent cannot see the kind (403/503 then, not 404).
        await check_available(store, account, ref.group, ref.kind, namespace)
        where = f"namespace {namespace}" if namespace else "cluster scope"
        raise NotFound(f"Manifest {ref.token} {name} not found in account {account} ({where})")
    obj = _decode(stored.body)
    body = {
        "account": account,
        "name": f"{ref.token} {name}",
        "location": namespace,
        "moniker": moniker_for(obj).to_json(),
        "manifest": obj,
        "status": compute_status(obj).to_json(),
        "artifacts": artifacts_of(obj, account),
        "events": await _events(store, account, stored) if include_events else [],
        "warnings": [],
        "metrics": [],
    }
    return JSONResponse(body, headers=headers)


async def get_manifest(request: Request) -> Response:
    p = request.path_params
    return await _manifest(request, p["location"], p["name"])


async def get_cluster_scoped_manifest(request: Request) -> Response:
    return await _manifest(request, "", request.path_params["name"])


def _in_cluster(obj: Mapping[str, Any], ref: KindRef, app: str, cluster: str) -> bool:
    """Whether the object belongs to Spinnaker cluster `cluster` of application `app`.

    Clouddriver's cluster is the moniker cluster: the annotation, which Spinnaker deploys
    write as "<kind> <name>" (e.g. "replicaSet frontend"), else the name without -vNNN.
    """
    moniker = moniker_for(obj)
    if moniker.app != app:
        return False
    if moniker.cluster == cluster:
        return True
    annotations = obj.get("metadata", {}).get("annotations") or {}
    if f"{MONIKER_PREFIX}cluster" in annotations:
        return False
    # No cluster annotation: also accept Spinnaker's "<kind> <name without -vNNN>" spelling.
    return cluster == f"{ref.token} {moniker.cluster}"


async def _cluster_members(
    request: Request,
) -> tuple[KindRef, str, list[Mapping[str, Any]], dict[str, str]]:
    """The cluster's objects as the cache has them once it honours the writes of the
    operations that succeeded for this account, kind and namespace (read-your-writes,
    ``_fresh.list_fresh``), and the headers to answer with."""
    p = request.path_params
    account = p["account"]
    await _account(request, account)
    ref = resolve_kind(p["kind"])
    namespace = "" if p["location"] == "_" else p["location"]
    store = context(request).state.store
    # An empty cluster of a kind the agent cannot see would be a wrong answer: say why.
    await check_available(store, account, ref.group, ref.kind, namespace)
    found, headers = await list_fresh(
        context(request).state.feed.freshness,
        lambda: collect_objects(
            store, account=account, kind=ref.kind, namespace=namespace, group=ref.group
        ),
        account,
        ref,
        namespace,
    )
    members = []
    for stored in found:
        obj = _decode(stored.body)
        if _in_cluster(obj, ref, p["app"], p["cluster"]):
            members.append(obj)
    return ref, namespace, members, headers


def _coordinates(ref: KindRef, namespace: str, obj: Mapping[str, Any]) -> dict[str, str]:
    return {"kind": ref.token, "namespace": namespace, "name": str(obj["metadata"]["name"])}


async def list_cluster(request: Request) -> Response:
    ref, namespace, members, headers = await _cluster_members(request)
    members.sort(key=age_key)
    return JSONResponse([_coordinates(ref, namespace, o) for o in members], headers=headers)


async def dynamic_cluster_target(request: Request) -> Response:
    criteria = request.path_params["criteria"]
    pick_by_criteria([], criteria)  # validates the criteria before any store work
    ref, namespace, members, headers = await _cluster_members(request)
    chosen = pick_by_criteria(members, criteria)
    if chosen is None:
        p = request.path_params
        raise NotFound(
            f"No {criteria} {ref.token} in cluster {p['cluster']} of application {p['app']} "
            f"(account {p['account']}, location {p['location']}): {len(members)} found"
        )
    return JSONResponse(_coordinates(ref, namespace, chosen), headers=headers)
