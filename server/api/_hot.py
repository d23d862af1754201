"""The two routes Orca hammers, answered without Starlette's middleware stack.

Why. Under Orca-like load (issue 6, ``tests/bench/bench_ops.py``) every deploy is one
``POST /kubernetes/ops`` and a few ``GET /task/{id}`` polls. Through Starlette each request
crosses five layers (server errors, body limit, exceptions, our metrics, the router matching
~40 routes in turn), four of which wrap ``send`` in another coroutine, then the endpoint builds
a Request and a JSONResponse with the stdlib encoder: about as much CPU as Hypercorn's own
work. Here the two routes are matched by prefix and answered with one ``http.response.start``
and one ``http.response.body`` (msgspec-encoded, with Content-Length).

What stays the same. Bodies, status codes and headers are the ones the Starlette endpoints
give (server/api/_ops.py), the metrics are counted under the same route templates, and the body
limit holds. The hot path answers only what it can answer from memory with no surprise: a
task the service holds, a POST whose description is valid. Everything else (a task only in the
store, a malformed body, a refusal, a body near the limit, HEAD, a root_path) is handed to
the Starlette app unchanged; a request body already read is replayed to it first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.datastructures import QueryParams
from starlette.types import Message, Receive, Scope, Send

from .._errors import StoreError
from ..ops import OperationError, OperationService, OperationsUnavailable, parse_request
from ._body import decode_json
from ._errors import ApiError, error_body
from ._metrics import ApiMetrics

__all__ = ["HotRoutes"]

log = logging.getLogger("server.api")

_JSON = b"application/json"
_TASK = "/task/"
_SUBMIT_PATHS = ("/kubernetes/ops", "/ops")
_encode = msgspec.json.encode


class HotRoutes:
    """``await hot(scope, receive, send, fallback)``: answer a hot route, else call
    ``fallback`` (the Starlette app) with the same request."""

    def __init__(
        self, operations: Callable[[], OperationService | None], metrics: ApiMetrics, limit: int
    ) -> None:
        self._operations = operations
        self._metrics = metrics
        self._limit = limit
        self.answered = 0  # requests these routes answered themselves (not handed over)

    def wants(self, scope: Scope) -> bool:
        """Whether the request is one of the hot routes (cheap: no parsing)."""
        if scope["type"] != "http" or scope.get("root_path"):
            return False
        method, path = scope["method"], scope["path"]
        if method == "GET":
            return path.startswith(_TASK) and len(path) > 6 and "/" not in path[6:]
        return method == "POST" and path in _SUBMIT_PATHS

    def poll(self, target: bytes) -> bytes | None:
        """``GET {target}``'s body when it is a task this server holds in memory, else None
        (the request then goes through the app). For serve_http1's ``poll``: the same answer
        as the ASGI route, counted the same, without an ASGI scope or an app call."""
        if not target.startswith(b"/task/") or b"%" in target:
            return None
        task_id = target.partition(b"?")[0][6:]
        if not task_id or b"/" in task_id:
            return None
        started = time.monotonic()
        service = self._operations()
        task = service.task_in_memory(task_id.decode("latin-1")) if service else None
        if task is None:
            return None
        body = task.encoded()
        self._metrics.note("GET", "/task/{id}", 200, time.monotonic() - started)
        self.answered += 1
        return body

    async def __call__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        fallback: Callable[[Scope, Receive, Send], Awaitable[None]],
    ) -> None:
        started = time.monotonic()
        service = self._operations()
        if service is None:
            await fallback(scope, receive, send)
            return
        if scope["method"] == "GET":
            task = service.task_in_memory(scope["path"][6:])
            if task is None:
                await fallback(scope, receive, send)
                return
            await _respond(send, 200, task.encoded())
            self._metrics.note("GET", "/task/{id}", 200, time.monotonic() - started)
            self.answered += 1
            return
        await self._submit(service, scope, receive, send, fallback, started)

    async def _submit(
        self,
        service: OperationService,
        scope: Scope,
        receive: Receive,
        send: Send,
        fallback: Callable[[Scope, Receive, Send], Awaitable[None]],
        started: float,
    ) -> None:
        read: list[Message] = []
        body = await self._read_body(scope, receive, read)
        descriptions = None
        if body is not None and body.strip():
            try:
                descriptions = service.describe(parse_request(decode_json(body)))
            except (ApiError, OperationError):
                descriptions = None  # the Starlette route says why, in its own words
        if descriptions is None:
            await fallback(scope, _replay(read, receive), send)
            return
        path = scope["path"]
        try:
            task = await service.submit(descriptions, request_id=_request_id(scope))
        except OperationsUnavailable as exc:
            status, answer = 503, _encode(error_body(503, exc.message))
        except StoreError as exc:
            log.error("POST %s: the store failed: %s", path, exc)
            status, answer = 503, _encode(error_body(503, f"the cache store failed: {exc}"))
        except Exception:
            await _respond(send, 500, b"Internal Server Error", b"text/plain; charset=utf-8")
            self._metrics.note("POST", path, 500, time.monotonic() - started)
            raise
        else:
            status, answer = 200, _encode({"id": task.id, "resourceUri": f"/task/{task.id}"})
        await _respond(send, status, answer)
        self._metrics.note("POST", path, status, time.monotonic() - started)
        self.answered += 1

    async def _read_body(self, scope: Scope, receive: Receive, read: list[Message]) -> bytes | None:
        """The whole body, or None when the Starlette app must see the request (a body over or
        near the limit, a disconnect); ``read`` keeps every message taken, for the replay."""
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit() or int(value) > self._limit:
                    return None
                break
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _request_id(scope: Scope) -> str | None:
    query = scope.get("query_string", b"")
    if not query:
        return None
    return QueryParams(query).get("clientRequestId") or None


def _replay(read: list[Message], receive: Receive) -> Receive:
    pending = list(read)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _respond(send: Send, status: int, body: bytes, content_type: bytes = _JSON) -> None:
    # The headers Starlette's JSONResponse sends, in its order.
    headers: list[tuple[bytes, bytes]] = [
        (b"content-length", str(len(body)).encode()),
        (b"content-type", content_type),
    ]
    start: dict[str, Any] = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
