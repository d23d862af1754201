"""The Armory agent plugin's REST API: accounts, dynamic accounts, agents, clouddrivers.

Bodies and status codes follow armory-compat.md "Server REST API". Validation errors are 400
and name the offending element (`body[1].name`); unknown names are 404; names that already
exist are 409 and listed in `names`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..store import AccountRecord, AccountState, AgentRecord, ReplicaRecord
from ._body import json_body
from ._context import collect_objects, context
from ._errors import BadRequest, Conflict, NotFound
from ._unavailable import marks_by_account

__all__ = ["account_json", "account_namespaces", "lease_ttl_ms"]

# Dynamic-account fields that hold credentials: pushed to the agent, never stored.
_CREDENTIAL_FIELDS = frozenset({"kubeconfigContents"})
_STRING_LIST_FIELDS = ("kinds", "omitKinds", "namespaces", "omitNamespaces", "oAuthScopes")
_SOURCE_FIELDS = ("kubeconfigContents", "kubeconfigFile", "serviceAccount")


def _now_ms() -> int:
    return int(time.time() * 1000)


def account_json(record: AccountRecord, unavailable: list[Any] | None = None) -> dict[str, Any]:
    """An account as the Armory plugin prints it; with ``unavailable`` (the reads that list
    accounts pass it: ``_unavailable.marks_by_account``), the kinds the agent cannot watch."""
    body = {
        "name": record.name,
        "kubeHost": record.kube_host,
        "certFingerprint": record.cert_fingerprint,
        "kubeVersion": record.kube_version,
        "status": str(record.status),
        "errorMessage": record.error_message,
        "retryCount": record.retry_count,
        "dynamic": record.dynamic,
        "permissions": record.permissions,
        "properties": record.properties,
        "zoneId": record.zone_id,
        "lastUpdated": record.last_updated_ms,
        "connections": record.connections,
    }
    if unavailable is not None:
        body["unavailableKinds"] = unavailable
    return body


async def _account_or_404(request: Request, name: str) -> AccountRecord:
    record = await context(request).state.store.get_account(name)
    if record is None:
        raise NotFound(f"Account does not exist (name: {name})")
    return record


def _list_of_objects(body: Any) -> list[Mapping[str, Any]]:
    if not isinstance(body, list):
        raise BadRequest("body: expected a JSON list of accounts")
    if not body:
        raise BadRequest("body: the list of accounts is empty")
    for i, item in enumerate(body):
        if not isinstance(item, dict):
            raise BadRequest(f"body[{i}]: expected an object with a 'name'")
    return body


def _string(item: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = item.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadRequest(f"{where}.{key}: expected a non-empty string, got {value!r}")
    return value


def _unique_names(items: Sequence[Mapping[str, Any]]) -> list[str]:
    names = [_string(item, "name", f"body[{i}]", required=True) for i, item in enumerate(items)]
    for i, name in enumerate(names):
        if "/" in name:  # it separates an account from its shard (docs/sharding.md)
            raise BadRequest(f"body[{i}].name: an account name may not contain '/': {name!r}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BadRequest(f"body: account names appear more than once: {', '.join(duplicates)}")
    return names


async def list_accounts(request: Request) -> Response:
    store = context(request).state.store
    records = await store.list_accounts()
    marks = await marks_by_account(store)
    return JSONResponse([account_json(r, marks.get(r.name, [])) for r in records])


async def add_accounts(request: Request) -> Response:
    items = _list_of_objects(await json_body(request))
    names = _unique_names(items)
    store = context(request).state.store
    existing = [n for n in names if await store.get_account(n) is not None]
    if existing:
        raise Conflict(f"accounts already exist: {', '.join(existing)}", names=existing)
    created = []
    for i, (name, item) in enumerate(zip(names, items, strict=True)):
        properties: dict[str, Any] = {}
        kubeconfig = _string(item, "kubeconfigFile", f"body[{i}]")
        if kubeconfig:
            properties["kubeconfigFile"] = kubeconfig
        record = AccountRecord(
            name=name,
            status=AccountState.INACTIVE,
            zone_id=_string(item, "zoneId", f"body[{i}]"),
            properties=properties,
            last_updated_ms=_now_ms(),
        )
        await store.upsert_account(record)
        created.append(account_json(record))
    return JSONResponse(created, status_code=202)


async def update_accounts(request: Request) -> Response:
    items = _list_of_objects(await json_body(request))
    names = _unique_names(items)
    store = context(request).state.store
    updates: list[AccountRecord] = []
    missing: list[str] = []
    for i, (name, item) in enumerate(zip(names, items, strict=True)):
        raw_state = _string(item, "state", f"body[{i}]", required=True)
        try:
            state = AccountState(raw_state.upper())
        except ValueError:
            allowed = ", ".join(s.value for s in AccountState)
            raise BadRequest(f"body[{i}].state: {raw_state!r} is not one of {allowed}") from None
        record = await store.get_account(name)
        if record is None:
            missing.append(name)
            continue
        changes: dict[str, Any] = {"status": state, "last_updated_ms": _now_ms()}
        if "zoneId" in item:
            changes["zone_id"] = _string(item, "zoneId", f"body[{i}]")
        if "kubeconfigFile" in item:
            kubeconfig = _string(item, "kubeconfigFile", f"body[{i}]")
            changes["properties"] = {**record.properties, "kubeconfigFile": kubeconfig}
        updates.append(dataclasses.replace(record, **changes))
    if missing:
        raise NotFound(f"accounts do not exist: {', '.join(missing)}", names=missing)
    for record in updates:
        await store.upsert_account(record)
    return JSONResponse([account_json(r) for r in updates])


async def delete_accounts(request: Request) -> Response:
    body = await json_body(request)
    if not isinstance(body, list) or not all(isinstance(n, str) and n for n in body):
        raise BadRequest("body: expected a JSON list of account names")
    if not body:
        raise BadRequest("body: the list of account names is empty")
    store = context(request).state.store
    missing = [n for n in body if await store.get_account(n) is None]
    if missing:
        raise NotFound(f"accounts do not exist: {', '.join(missing)}", names=missing)
    for name in body:
        await store.delete_account(name)
    return JSONResponse({"deleted": body})


async def get_account(request: Request) -> Response:
    record = await _account_or_404(request, request.path_params["name"])
    return JSONResponse(account_json(record, await _marks(request, record.name)))


async def _marks(request: Request, name: str) -> list[Any]:
    """The account's unavailable kinds as JSON."""
    return (await marks_by_account(context(request).state.store, name)).get(name, [])


async def delete_account(request: Request) -> Response:
    name = request.path_params["name"]
    if not await context(request).state.store.delete_account(name):
        raise NotFound(f"Account does not exist (name: {name})")
    return JSONResponse({"deleted": [name]})


def _validate_definition(body: Any) -> dict[str, Any]:
    """A dynamic account definition: `name` plus one credential source, typed fields checked."""
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object (an account definition)")
    _string(body, "name", "body", required=True)
    if not any(body.get(f) not in (None, "", False) for f in _SOURCE_FIELDS):
        raise BadRequest(
            "body: an account definition needs one of kubeconfigContents, kubeconfigFile or "
            "serviceAccount"
        )
    for key in ("kubeconfigContents", "kubeconfigFile", "context"):
        if key in body:
            _string(body, key, "body")
    if "serviceAccount" in body and not isinstance(body["serviceAccount"], bool):
        raise BadRequest(
            f"body.serviceAccount: expected true or false, got {body['serviceAccount']!r}"
        )
    for key in _STRING_LIST_FIELDS:
        value = body.get(key)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise BadRequest(f"body.{key}: expected a list of strings, got {value!r}")
    permissions = body.get("permissions")
    if permissions is not None:
        if not isinstance(permissions, dict):
            raise BadRequest('body.permissions: expected an object like {"READ": [roles]}')
        for level, roles in permissions.items():
            if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
                raise BadRequest(f"body.permissions.{level}: expected a list of role names")
    return body


async def _put_dynamic(request: Request, *, create_only: bool) -> Response:
    definition = _validate_definition(await json_body(request))
    name: str = definition["name"]
    state = context(request).state
    existing = await state.store.get_account(name)
    if existing is not None and create_only:
        raise Conflict(f"accounts already exist: {name}", names=[name])
    if existing is not None and not existing.dynamic:
        raise Conflict(f"account {name} exists and is not a dynamic account", names=[name])
    agent_id = await state.push_dynamic_account(definition)
    stored = {k: v for k, v in definition.items() if k not in _CREDENTIAL_FIELDS}
    base = existing or AccountRecord(name=name)
    record = dataclasses.replace(
        base,
        dynamic=True,
        status=AccountState.ACTIVATING if agent_id else AccountState.INACTIVE,
        permissions=dict(definition.get("permissions") or {}),
        properties=stored,
        last_updated_ms=_now_ms(),
    )
    await state.store.upsert_account(record)
    if agent_id:
        message = f"the definition was sent to agent {agent_id}"
    else:
        message = (
            "no agent in service mode is connected: the definition is stored (without "
            "kubeconfigContents) and the account stays INACTIVE until it is pushed again"
        )
    return JSONResponse(
        {"account": account_json(record), "agentId": agent_id, "message": message},
        status_code=202,
    )


async def create_dynamic_account(request: Request) -> Response:
    return await _put_dynamic(request, create_only=True)


async def update_dynamic_account(request: Request) -> Response:
    return await _put_dynamic(request, create_only=False)


def _agents_by_id(records: Sequence[AgentRecord]) -> dict[str, list[AgentRecord]]:
    grouped: dict[str, list[AgentRecord]] = {}
    for record in sorted(records, key=lambda r: (r.agent_id, r.connected_at_ms)):
        grouped.setdefault(record.agent_id, []).append(record)
    return grouped


def _agent_json(agent_id: str, sessions: Sequence[AgentRecord], server_id: str) -> dict[str, Any]:
    return {
        "agentId": agent_id,
        "accounts": sorted({a for s in sessions for a in s.accounts}),
        "caching": True,
        "clouddriverId": next((s.server_id for s in sessions if s.server_id), server_id),
        "lastConnection": max(s.connected_at_ms for s in sessions),
        "type": "kubernetes",
        "instances": [
            {
                "sessionId": s.session_id,
                "instanceId": s.instance_id,
                "agentVersion": s.agent_version,
                "peer": s.peer,
                "accounts": s.accounts,
                "connectedAt": s.connected_at_ms,
                "lastSeen": s.last_seen_ms,
            }
            for s in sessions
        ],
    }


async def list_agents(request: Request) -> Response:
    state = context(request).state
    grouped = _agents_by_id(await state.store.list_agents())
    return JSONResponse([_agent_json(a, s, state.server_id) for a, s in grouped.items()])


async def get_agent(request: Request) -> Response:
    state = context(request).state
    agent_id = request.path_params["agentId"]
    sessions = _agents_by_id(await state.store.list_agents()).get(agent_id)
    if not sessions:
        raise NotFound(f"Agent does not exist (agentId: {agent_id})")
    return JSONResponse(_agent_json(agent_id, sessions, state.server_id))


async def disconnect_agent(request: Request) -> Response:
    state = context(request).state
    agent_id = request.path_params["agentId"]
    if agent_id not in _agents_by_id(await state.store.list_agents()):
        raise NotFound(f"Agent does not exist (agentId: {agent_id})")
    ended = await state.disconnect_agent(agent_id)
    return JSONResponse({"agentId": agent_id, "sessionsEnded": ended})


def lease_ttl_ms(state: object) -> int:
    """The replicas' lease TTL: a replica silent longer is not live (default when the API
    runs without a server: StandaloneState)."""
    config = getattr(state, "config", None)
    replicas = getattr(config, "replicas", None)
    return int(getattr(replicas, "lease_ttl_ms", 10_000))


def _replica_json(record: ReplicaRecord) -> dict[str, Any]:
    return {
        "address": record.address,
        "started": record.started_ms,
        "lastHeartbeat": record.heartbeat_ms,
        "sessions": record.sessions,
        "primaries": record.primaries,
    }


async def _clouddrivers(request: Request) -> dict[str, dict[str, Any]]:
    """The live replicas (their heartbeats in the store), this one always, with the agents
    each serves."""
    state = context(request).state
    drivers: dict[str, dict[str, Any]] = {
        state.server_id: {"id": state.server_id, "local": True, "agents": []}
    }
    now = _now_ms()
    ttl = lease_ttl_ms(state)
    records = await state.store.list_replicas()
    for record in records:
        if record.replica_id != state.server_id and record.heartbeat_ms + ttl <= now:
            continue  # silent past its TTL: dead (its leases lapsed)
        driver = drivers.setdefault(
            record.replica_id, {"id": record.replica_id, "local": False, "agents": []}
        )
        driver.update(_replica_json(record))
    for agent_id, sessions in _agents_by_id(await state.store.list_agents()).items():
        for server_id in {s.server_id or state.server_id for s in sessions}:
            if records and server_id not in drivers:
                continue  # the sessions a dead replica left (a crash) until it is forgotten
            driver = drivers.setdefault(server_id, {"id": server_id, "local": False, "agents": []})
            driver["agents"].append(agent_id)
    return dict(sorted(drivers.items()))


async def list_clouddrivers(request: Request) -> Response:
    return JSONResponse(list((await _clouddrivers(request)).values()))


async def get_clouddriver(request: Request) -> Response:
    driver_id = request.path_params["id"]
    driver = (await _clouddrivers(request)).get(driver_id)
    if driver is None:
        raise NotFound(f"Clouddriver does not exist (id: {driver_id})")
    return JSONResponse(driver)


async def account_namespaces(request: Request, record: AccountRecord) -> list[str]:
    """The account's namespaces: its configured list, else the Namespaces cached for it."""
    configured = record.properties.get("namespaces")
    if isinstance(configured, list) and configured:
        return sorted(str(n) for n in configured)
    store = context(request).state.store
    # The group too: the store's index is (account, group, kind, ...), see _clouddriver._events.
    found = await collect_objects(
        store, account=record.name, kind="Namespace", namespace="", group=""
    )
    return sorted(o.name for o in found)


async def kubernetes_account(request: Request) -> Response:
    record = await _account_or_404(request, request.path_params["name"])
    body = account_json(record, await _marks(request, record.name))
    body["namespaces"] = await account_namespaces(request, record)
    return JSONResponse(body)


async def kubernetes_account_namespaces(request: Request) -> Response:
    record = await _account_or_404(request, request.path_params["name"])
    return JSONResponse(await account_namespaces(request, record))
