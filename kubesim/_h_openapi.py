"""``/openapi/v3`` (the index), ``/openapi/v3/{api/v1 | apis/{group}/{version}}`` and
``/openapi/v2``: the documents of ``_openapi``, those ``SimConfig.openapi`` publishes.

``/openapi/v2`` answers JSON only: a client asking for protobuf alone (kubectl does) gets 406
Not Acceptable, as from an API server that cannot encode it, and carries on without it.
"""

from __future__ import annotations

from kubesim._errors import ApiError
from kubesim._http import JSON, Request, Send, respond
from kubesim._openapi import OpenApiDocs
from kubesim._status import method_not_allowed, path_not_found

__all__ = ["serve_openapi"]


def _accepts_json(accept: str | None) -> bool:
    if not accept:
        return True
    for media in accept.split(","):
        kind = media.split(";")[0].strip().lower()
        if kind in ("*/*", "application/*", "application/json"):
            return True
    return False


async def serve_openapi(
    request: Request, send: Send, docs: OpenApiDocs, published: tuple[str, ...]
) -> None:
    """Answer an ``/openapi/...`` path; raises ApiError 404 for what is not published."""
    if request.method != "GET":
        raise method_not_allowed(request.method)
    path = request.path.rstrip("/")
    body: bytes | None = None
    if path == "/openapi/v3" and "v3" in published:
        body = docs.v3_index()
    elif path.startswith("/openapi/v3/") and "v3" in published:
        body = docs.v3(path[len("/openapi/v3/") :])
    elif path == "/openapi/v2" and "v2" in published:
        if not _accepts_json(request.headers.get("accept")):
            raise ApiError(406, "NotAcceptable", "only application/json is served here")
        body = docs.v2()
    if body is None:
        raise path_not_found(path)
    await respond(send, 200, body, JSON)
