"""Errors the REST API answers with, and the one JSON shape every error body has.

Every error body is Clouddriver's (Spring's) shape, so Spinnaker's services and people read
them the same way: `{"status": 404, "error": "Not Found", "message": "...", "timestamp": ms}`.
The message says what was wrong and where (the field of a bad body, the unknown name).
"""

from __future__ import annotations

import http
import logging
import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._errors import InvalidQuery, ServerError, StoreError

log = logging.getLogger("server.api")

__all__ = [
    "ApiError",
    "BadRequest",
    "Conflict",
    "ContentTooLarge",
    "Forbidden",
    "NotFound",
    "ServiceUnavailable",
    "error_body",
    "error_response",
]


class ApiError(ServerError):
    """A request the API refuses; `status` is the HTTP status, the message is for the caller.

    ServerError
    └── ApiError
        ├── BadRequest   400: a malformed body, field or query parameter (the message names it)
        ├── Forbidden    403: a kind the agent is forbidden to watch (the reason says why)
        ├── NotFound     404: an unknown account, agent, object or route
        ├── Conflict     409: names that already exist (`extra` lists them)
        ├── ContentTooLarge  413: a request body over the limit (the message names it)
        └── ServiceUnavailable  503: a kind the agent cannot watch now (not served, gone)
    """

    status = 500

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class BadRequest(ApiError):
    status = 400


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class ContentTooLarge(ApiError):
    status = 413


class ServiceUnavailable(ApiError):
    status = 503


# A message quotes what it refuses (``got [...]``); the quote is cut so that a refused 4 MiB
# body is not echoed back whole.
MAX_MESSAGE_CHARS = 1000


def bounded(message: str) -> str:
    """``message``, cut to MAX_MESSAGE_CHARS (saying how long it was)."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return f"{message[:MAX_MESSAGE_CHARS]}... ({len(message)} characters in all)"


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    """The JSON error shape; ``message`` is cut to MAX_MESSAGE_CHARS."""
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = "Error"
    body: dict[str, Any] = {
        "status": status,
        "error": reason,
        "message": bounded(message),
        "timestamp": int(time.time() * 1000),
    }
    body.update(extra)
    return body


def error_response(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(error_body(status, message, **extra), status_code=status)


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, **exc.extra)


async def handle_invalid_query(request: Request, exc: Exception) -> Response:
    return error_response(400, str(exc))


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no route for {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, message)


async def handle_store_error(request: Request, exc: Exception) -> Response:
    # The store failed under the request (closed at shutdown, disk error): the caller may retry.
    log.error("%s %s: the store failed: %s", request.method, request.url.path, exc)
    return error_response(503, f"the cache store failed: {exc}")


EXCEPTION_HANDLERS = {
    ApiError: handle_api_error,
    InvalidQuery: handle_invalid_query,
    StoreError: handle_store_error,
    HTTPException: handle_http_exception,
}
