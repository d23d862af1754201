"""Clouddriver's operations and tasks, the Armory operations views, and pod logs.

``POST /kubernetes/ops`` (also ``/kubernetes/ops/{name}`` with a bare description, and the old
``/ops``) answers 200 ``{"id", "resourceUri"}`` as soon as the task is persisted; the work runs
afterwards (server/ops/_service.py). Refusals come before any task exists: 400 with
``{status, error, message, errors}``. ``GET /task/{id}`` is Clouddriver's task shape exactly.

Pod logs (for run-job stages) are read through the agent with a ``podLogs`` operation:
``GET /manifests/{account}/{location}/{name}/logs`` (name "pod <name>" or a bare pod name;
query ``container``, ``tailLines``, ``limitBytes``) and Clouddriver's console view
``GET /instances/{account}/{location}/{name}/console``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._kinds import kubernetes_kind
from ..ops import (
    POD_LOGS,
    InvalidDescription,
    OperationError,
    OperationService,
    OperationsUnavailable,
    RulesViolated,
)
from ._body import json_body
from ._context import context
from ._errors import BadRequest, NotFound, bounded, error_response

__all__ = [
    "armory_get_operation",
    "armory_list_operations",
    "armory_submit_operation",
    "get_task",
    "instance_console",
    "list_tasks",
    "pod_logs",
    "submit_named_operation",
    "submit_operations",
]

Handler = Callable[[Request], Awaitable[Response]]
_MAX_LIST = 1000


def _refusals(handler: Handler) -> Handler:
    """Translate the operations refusals to their HTTP answers (400 / 503)."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except OperationsUnavailable as exc:
            return error_response(503, exc.message)
        except InvalidDescription as exc:
            errors = [bounded(exc.message)]  # the message, cut as error_body cuts it
            return error_response(400, exc.message, errors=errors, field=exc.field)
        except RulesViolated as exc:
            return error_response(400, exc.message, errors=[bounded(e) for e in exc.errors])
        except OperationError as exc:
            return error_response(400, exc.message)

    return wrapped


def _service(request: Request) -> OperationService:
    service = getattr(context(request).state, "operations", None)
    if not isinstance(service, OperationService):
        raise OperationsUnavailable("this server runs no operations (no agent sessions)")
    return service


def _submitted(task_id: str) -> JSONResponse:
    return JSONResponse({"id": task_id, "resourceUri": f"/task/{task_id}"})


def _request_id(request: Request) -> str | None:
    return request.query_params.get("clientRequestId") or None


@_refusals
async def submit_operations(request: Request) -> Response:
    body = await json_body(request)
    task = await _service(request).submit_request(body, request_id=_request_id(request))
    return _submitted(task.id)


@_refusals
async def submit_named_operation(request: Request) -> Response:
    body = await json_body(request)
    name = request.path_params["name"]
    task = await _service(request).submit_request([{name: body}], request_id=_request_id(request))
    return _submitted(task.id)


async def get_task(request: Request) -> Response:
    task_id = request.path_params["id"]
    task = await _service_or_404(request).get_task(task_id)
    if task is None:
        raise NotFound(f"Task not found (id: {task_id})")
    return JSONResponse(task.to_json())


async def list_tasks(request: Request) -> Response:
    limit = _limit(request, 100)
    return JSONResponse([t.to_json() for t in _service_or_404(request).recent_tasks(limit)])


def _service_or_404(request: Request) -> OperationService:
    try:
        return _service(request)
    except OperationsUnavailable as exc:
        raise NotFound(exc.message) from None


def _limit(request: Request, default: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= _MAX_LIST:
        raise BadRequest(f"query parameter limit: expected 1..{_MAX_LIST}, got {raw!r}")
    return limit


async def armory_list_operations(request: Request) -> Response:
    account = request.query_params.get("account") or None
    views = await _service_or_404(request).list_operations(account, _limit(request, 100))
    return JSONResponse(views)


async def armory_get_operation(request: Request) -> Response:
    op_id = request.path_params["opId"]
    view = await _service_or_404(request).operation_view(op_id)
    if view is None:
        raise NotFound(f"Operation not found (id: {op_id})")
    return JSONResponse(view)


@_refusals
async def armory_submit_operation(request: Request) -> Response:
    """``{"type": "<operation>", "description": {...}}`` (or the description's keys inline):
    one operation as a task; 202 with the task and operation ids."""
    body = await json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise InvalidDescription("body.type", "required: the operation name, e.g. deployManifest")
    description = body.get("description", body.get("payload"))
    if description is None:
        description = {k: v for k, v in body.items() if k != "type"}
    task = await _service(request).submit_request(
        [{body["type"]: description}], request_id=_request_id(request)
    )
    return JSONResponse(
        {
            "taskId": task.id,
            "operationId": f"{task.id}-0",
            "resourceUri": f"/task/{task.id}",
            "operationUri": f"/armory/agent/operations/{task.id}-0",
        },
        status_code=202,
    )


# -- pod logs ------------------------------------------------------------------------------


def _pod_name(token: str) -> str:
    words = token.split()
    if len(words) == 1:
        return words[0]
    if len(words) == 2 and kubernetes_kind(words[0]) == "Pod":
        return words[1]
    raise BadRequest(f'name: expected "pod <name>" or a pod name, got {token!r}')


def _int_param(request: Request, key: str) -> int | None:
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise BadRequest(f"query parameter {key}: expected a non-negative integer, got {raw!r}")
    return int(raw)


async def _read_logs(request: Request) -> tuple[str, str, str, list[dict[str, Any]]]:
    service = _service(request)
    account = request.path_params["account"]
    location = request.path_params["location"]
    namespace = "" if location == "_" else location
    pod = _pod_name(request.path_params["name"])
    if not await service.known_account(account):
        service.check_account(account)  # raises UnknownCredentials, in Clouddriver's words
    payload: dict[str, Any] = {"account": account, "namespace": namespace, "kind": "Pod"}
    payload["name"] = pod
    container = request.query_params.get("container")
    if container:
        payload["container"] = container
    for key in ("tailLines", "limitBytes", "sinceSeconds"):
        value = _int_param(request, key)
        if value is not None:
            payload[key] = value
    outcome = await service.execute(service.new_operation_id(), POD_LOGS, account, payload)
    if not outcome.ok:
        status = {"NoAgent": 503, "AgentDisconnected": 503, "OperationTimeout": 504}.get(
            outcome.error, 502
        )
        if "404" in outcome.agent.error_code or outcome.agent.error_code.endswith("NotFound"):
            status = 404
        raise _Upstream(status, outcome.message or outcome.error)
    result = outcome.agent.result if isinstance(outcome.agent.result, dict) else {}
    logs = [
        {"container": str(e.get("container", "")), "output": str(e.get("output", ""))}
        for e in result.get("logs") or []
        if isinstance(e, dict)
    ]
    return account, namespace, pod, logs


class _Upstream(OperationError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _upstream(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except _Upstream as exc:
            return error_response(exc.status, exc.message)

    return wrapped


@_refusals
@_upstream
async def pod_logs(request: Request) -> Response:
    account, namespace, pod, logs = await _read_logs(request)
    return JSONResponse(
        {"account": account, "location": namespace, "name": f"pod {pod}", "logs": logs}
    )


@_refusals
@_upstream
async def instance_console(request: Request) -> Response:
    """Clouddriver's console output shape: ``{"output": [{"name": container, "output"}]}``;
    a pod that is gone answers Clouddriver's one "Error" entry (200), which Deck shows."""
    try:
        _, _, _, logs = await _read_logs(request)
    except _Upstream as exc:
        if exc.status != 404:
            raise
        return JSONResponse({"output": [{"name": "Error", "output": _POD_GONE}]})
    return JSONResponse({"output": [{"name": e["container"], "output": e["output"]} for e in logs]})


_POD_GONE = "Failed to retrieve pod data; pod may have been deleted."
