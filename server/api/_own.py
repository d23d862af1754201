"""kubesvc's own endpoints: object queries, health, Prometheus metrics, the OpenAPI document."""

from __future__ import annotations

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._readiness import ReadinessAnswer
from ..store import StoredObject
from ._context import context
from ._errors import BadRequest
from ._unavailable import check_available

__all__ = ["health", "metrics", "openapi", "query_objects", "ready"]

DEFAULT_LIMIT = 500
MAX_LIMIT = 10_000
_encoder = msgspec.json.Encoder()


async def health(request: Request) -> Response:
    """Liveness: the process answers. It asks nothing of the store (see /health/ready)."""
    return JSONResponse({"status": "UP", "serverId": context(request).state.server_id})


async def ready(request: Request) -> Response:
    """200 while the store answers and the server is not draining; 503 with the reason."""
    ctx = context(request)
    body: dict[str, str] = {"serverId": ctx.state.server_id}
    readiness = ctx.state.readiness
    answer = ReadinessAnswer(True) if readiness is None else await readiness.check()
    if answer.ready:
        return JSONResponse({"status": "UP", **body})
    return JSONResponse({"status": "DOWN", "reason": answer.reason, **body}, status_code=503)


async def metrics(request: Request) -> Response:
    ctx = context(request)
    ctx.metrics.cached_objects.set(await ctx.state.store.count_objects())
    return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter limit: expected an integer, got {raw!r}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise BadRequest(f"query parameter limit: {value} is outside 1..{MAX_LIMIT}")
    return value


def _item(obj: StoredObject) -> bytes:
    head = _encoder.encode(
        {
            "account": obj.account,
            "apiVersion": obj.api_version,
            "kind": obj.kind,
            "namespace": obj.namespace,
            "name": obj.name,
            "uid": obj.uid,
            "resourceVersion": obj.resource_version,
        }
    )
    # The stored body is JSON already: splice it in rather than decode and re-encode it.
    return head[:-1] + b',"object":' + (obj.body or b"null") + b"}"


async def query_objects(request: Request) -> Response:
    q = request.query_params
    account, kind = q.get("account"), q.get("kind")
    if account and kind:
        # One kind of one account that the agent cannot watch: 403/503 with the reason,
        # not an empty list that looks like "there are none".
        await check_available(
            context(request).state.store, account, None, kind, q.get("namespace") or ""
        )
    page = await context(request).state.store.query_objects(
        account=q.get("account") or None,
        kind=q.get("kind") or None,
        namespace=q.get("namespace"),
        label_selector=q.get("labelSelector") or None,
        limit=_limit(q.get("limit")),
        continue_token=q.get("continue") or None,
    )
    items = b",".join(_item(o) for o in page.objects)
    token = _encoder.encode(page.next_token)
    body = b'{"items":[' + items + b'],"continue":' + token + b"}"
    return Response(body, media_type="application/json")


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)
