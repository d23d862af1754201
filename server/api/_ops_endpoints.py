"""The operations routes as `Endpoint`s (registered in _app.ENDPOINTS, documented in OpenAPI)."""

from __future__ import annotations

from . import _ops as ops
from . import _schemas as schemas
from ._routing import Endpoint, Param

__all__ = ["OPS_ENDPOINTS"]

_CLOUDDRIVER = "Clouddriver operations"
_AGENTS = "Armory agents"
_REQUEST_ID = Param(
    "clientRequestId",
    "the caller's idempotency key: a retried POST with the same id answers the same task and "
    "runs nothing again",
)
_SUBMITTED = '{"id": task id, "resourceUri": "/task/<id>"}; the work runs afterwards'
_REFUSED = (
    "refused before any task exists: unknown operation, unknown account "
    "(credentials not found (name: X, ...)) or an invalid description (errors names the field)"
)
_UNAVAILABLE = "operations are not running here, or too many tasks are unfinished"
_OPS_BODY = 'a JSON list of one-key objects [{"<operationName>": {description}}]'
_LOG_PARAMS = (
    Param("location", "the pod's namespace", where="path"),
    Param("name", 'URL-encoded "pod <name>" or the pod name', where="path"),
    Param("container", "only this container (default: every container)"),
    Param("tailLines", "only the last N lines", type="integer"),
    Param("limitBytes", "at most N bytes per container", type="integer"),
    Param("sinceSeconds", "only lines newer than N seconds", type="integer"),
)
_LOG_ERRORS = {
    400: "a malformed name or parameter, or an unknown account",
    404: "the pod or container does not exist",
    502: "the agent or the cluster failed",
    503: "no agent serves the account now",
    504: "no answer within operations.waitMs",
}

OPS_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "POST",
        "/kubernetes/ops",
        ops.submit_operations,
        "Submit Kubernetes operations (Clouddriver); answers a task id at once",
        _CLOUDDRIVER,
        params=(_REQUEST_ID,),
        body=_OPS_BODY,
        body_schema=schemas.OPERATIONS_REQUEST,
        responses={200: _SUBMITTED, 400: _REFUSED, 503: _UNAVAILABLE},
    ),
    Endpoint(
        "POST",
        "/kubernetes/ops/{name}",
        ops.submit_named_operation,
        "Submit one Kubernetes operation with a bare description",
        _CLOUDDRIVER,
        params=(Param("name", "the operation, e.g. deployManifest", where="path"), _REQUEST_ID),
        body="the operation's description object",
        body_schema=schemas.DESCRIPTION,
        responses={200: _SUBMITTED, 400: _REFUSED, 503: _UNAVAILABLE},
    ),
    Endpoint(
        "POST",
        "/ops",
        ops.submit_operations,
        "Submit operations (Clouddriver's older route)",
        _CLOUDDRIVER,
        params=(_REQUEST_ID,),
        body=_OPS_BODY,
        body_schema=schemas.OPERATIONS_REQUEST,
        responses={200: _SUBMITTED, 400: _REFUSED, 503: _UNAVAILABLE},
    ),
    Endpoint(
        "GET",
        "/task/{id}",
        ops.get_task,
        "One task: status {phase, status, complete, completed, failed, retryable}, history, "
        "resultObjects (an EXCEPTION object on failure)",
        _CLOUDDRIVER,
        responses={200: "the task", 404: "Task not found (id: X)"},
    ),
    Endpoint(
        "GET",
        "/task",
        ops.list_tasks,
        "Recent tasks, newest first",
        _CLOUDDRIVER,
        params=(Param("limit", "at most N tasks, 1..1000 (default 100)", type="integer"),),
        responses={200: "a list of tasks", 400: "bad limit"},
    ),
    Endpoint(
        "GET",
        "/armory/agent/operations",
        ops.armory_list_operations,
        "Operations sent to agents with their history (received, sent, result, duration)",
        _AGENTS,
        params=(
            Param("account", "only this account"),
            Param("limit", "at most N operations, 1..1000 (default 100)", type="integer"),
        ),
        responses={200: "a list of operations, newest first", 400: "bad limit"},
    ),
    Endpoint(
        "POST",
        "/armory/agent/operations",
        ops.armory_submit_operation,
        "Run one operation as a task",
        _AGENTS,
        params=(_REQUEST_ID,),
        body='{"type": "<operation>", "description": {...}} (or the description keys inline)',
        body_schema=schemas.ARMORY_OPERATION,
        responses={
            202: "{taskId, operationId, resourceUri, operationUri}",
            400: _REFUSED,
            503: _UNAVAILABLE,
        },
    ),
    Endpoint(
        "GET",
        "/armory/agent/operations/{opId}",
        ops.armory_get_operation,
        "One operation with its history",
        _AGENTS,
        responses={200: "the operation", 404: "Operation not found (id: X)"},
    ),
    Endpoint(
        "GET",
        "/manifests/{account}/{location}/{name}/logs",
        ops.pod_logs,
        "A pod's container logs, read through the agent (podLogs operation)",
        _CLOUDDRIVER,
        params=_LOG_PARAMS,
        responses={200: "{account, location, name, logs: [{container, output}]}", **_LOG_ERRORS},
    ),
    Endpoint(
        "GET",
        "/instances/{account}/{location}/{name}/console",
        ops.instance_console,
        "A pod's console output (Clouddriver's shape), read through the agent",
        _CLOUDDRIVER,
        params=_LOG_PARAMS,
        responses={200: "{output: [{name: container, output}]}", **_LOG_ERRORS},
    ),
)
