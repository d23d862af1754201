"""Endpoints described once: the routes Starlette serves and the OpenAPI document both come
from the same `Endpoint` list, and a test checks the document against the router's routes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

__all__ = ["Endpoint", "Param", "openapi_document", "routes_for"]

HttpHandler = Callable[[Request], Awaitable[Response]]
WebSocketHandler = Callable[[WebSocket], Awaitable[None]]

_PATH_PARAM = re.compile(r"{([A-Za-z_][A-Za-z0-9_]*)}")


@dataclass(frozen=True, slots=True)
class Param:
    """A documented path or query parameter."""

    name: str
    description: str
    where: Literal["path", "query"] = "query"
    type: Literal["string", "integer", "boolean"] = "string"
    required: bool = False
    repeated: bool = False


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One operation: method + path, its handler, and what the OpenAPI document says of it.

    `method` is an HTTP method, or "WEBSOCKET" for a WebSocket route (documented as a GET
    that upgrades, answering 101).
    """

    method: str
    path: str
    handler: HttpHandler | WebSocketHandler
    summary: str
    tag: str
    params: tuple[Param, ...] = ()
    body: str | None = None
    body_schema: Mapping[str, Any] | None = None  # the body's JSON Schema (None: any JSON)
    responses: Mapping[int, str] = field(default_factory=lambda: {200: "OK"})
    media_type: str = "application/json"  # what its answers are (the status page's: HTML...)

    @property
    def openapi_method(self) -> str:
        return "get" if self.method == "WEBSOCKET" else self.method.lower()


def routes_for(endpoints: Iterable[Endpoint]) -> list[BaseRoute]:
    """One Starlette route per endpoint (several per path is fine: Starlette answers 405 when
    the path matches and the method does not)."""
    routes: list[BaseRoute] = []
    for endpoint in endpoints:
        if endpoint.method == "WEBSOCKET":
            routes.append(WebSocketRoute(endpoint.path, endpoint.handler))
        else:
            routes.append(Route(endpoint.path, endpoint.handler, methods=[endpoint.method]))
    return routes


_TYPES = {
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "boolean": {"type": "boolean"},
}


def _parameter(param: Param) -> dict[str, Any]:
    schema: dict[str, Any] = dict(_TYPES[param.type])
    if param.repeated:
        schema = {"type": "array", "items": schema}
    return {
        "name": param.name,
        "in": param.where,
        "required": param.required or param.where == "path",
        "description": param.description,
        "schema": schema,
    }


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    documented = {p.name for p in endpoint.params if p.where == "path"}
    params = [_parameter(p) for p in endpoint.params if p.where == "path"]
    for name in _PATH_PARAM.findall(endpoint.path):
        if name not in documented:
            params.append(_parameter(Param(name, f"the {name}", where="path")))
    params += [_parameter(p) for p in endpoint.params if p.where == "query"]
    responses: dict[str, Any] = {}
    for status, description in sorted(endpoint.responses.items()):
        response: dict[str, Any] = {"description": description}
        if status not in (101, 204) and not 300 <= status < 400:
            media = endpoint.media_type if status < 300 else "application/json"
            response["content"] = {media: {"schema": {}}}
        responses[str(status)] = response
    operation: dict[str, Any] = {
        "summary": endpoint.summary,
        "tags": [endpoint.tag],
        "operationId": f"{endpoint.openapi_method}_{endpoint.path}",
        "parameters": params,
        "responses": responses,
    }
    if endpoint.body is not None:
        operation["requestBody"] = {
            "required": True,
            "description": endpoint.body,
            "content": {"application/json": {"schema": dict(endpoint.body_schema or {})}},
        }
    if endpoint.method == "WEBSOCKET":
        operation["description"] = (
            "A WebSocket: connect with an HTTP Upgrade to receive JSON text messages."
        )
    return operation


def openapi_document(endpoints: Iterable[Endpoint], *, title: str, version: str) -> dict[str, Any]:
    """The OpenAPI 3.0 document of `endpoints`."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.openapi_method] = _operation(endpoint)
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": version},
        "paths": paths,
    }
