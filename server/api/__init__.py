"""The server's REST API and live change feed (Starlette routing on trio; HTTP/1.1 served by
server/api/_http1.py, WebSocket upgrades handed to Hypercorn).

Armory-plugin-compatible account/agent endpoints, Clouddriver-compatible reads
(/credentials, /manifests), object queries, /health, /metrics, /openapi.json, and the
WebSocket change feed at /v1/events.
"""

from ._app import DEFAULT_PORT, ENDPOINTS, build_app, serve_api
from ._context import ApiState, StandaloneState
from ._errors import ApiError, BadRequest, Conflict, NotFound

__all__ = [
    "DEFAULT_PORT",
    "ENDPOINTS",
    "ApiError",
    "ApiState",
    "BadRequest",
    "Conflict",
    "NotFound",
    "StandaloneState",
    "build_app",
    "serve_api",
]
