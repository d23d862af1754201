"""The admin endpoint, for tests and demos driving kubesim from outside the process.

``GET /kubesim/requests`` -> the request counters; ``DELETE /kubesim/requests`` resets them.
``POST /kubesim/faults`` with one JSON object naming one fault and its arguments, e.g.
``{"fail_next": {"count": 3, "status": 429, "retry_after": 2}}``,
``{"drop_watches": {"after_events": 10}}``, ``{"stall_watches": {"seconds": 30}}``,
``{"stall_responses": {"seconds": 5}}``, ``{"slow": {"delay": 0.2}}``; ``DELETE /kubesim/faults``
clears them all. ``PUT /kubesim/users/{name}/grants`` with ``{"*": ["get", "list", "watch"],
"pods": []}`` replaces a user's grants (RBAC revoked or restored while clients run; keys as
in ``kubesim._auth``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from kubesim import _status
from kubesim._auth import VERBS_ANY, Users
from kubesim._cluster import Cluster
from kubesim._errors import ApiError
from kubesim._faults import Faults, RequestCounters
from kubesim._http import Request, Send, respond_json

__all__ = ["serve_admin"]

_FAULTS = ("fail_next", "drop_watches", "stall_watches", "stall_responses", "slow")


async def serve_admin(
    request: Request,
    send: Send,
    faults: Faults,
    counters: RequestCounters,
    cluster: Cluster,
    users: Users,
) -> None:
    path = request.path.rstrip("/")
    parts = path.split("/")
    if len(parts) == 5 and parts[:3] == ["", "kubesim", "users"] and parts[4] == "grants":
        await _set_grants(request, send, users, parts[3])
        return
    if path == "/kubesim/requests":
        if request.method == "DELETE":
            counters.reset()
        await respond_json(send, 200, counters.snapshot())
        return
    if path == "/kubesim/faults":
        if request.method == "DELETE":
            faults.clear()
            await respond_json(send, 200, {"cleared": True})
            return
        if request.method != "POST":
            raise _status.method_not_allowed(request.method)
        try:
            body: Any = msgspec.json.decode(await request.body())
        except msgspec.DecodeError as exc:
            raise _status.bad_request(f"fault body is not JSON: {exc}") from exc
        if not isinstance(body, dict) or len(body) != 1 or next(iter(body)) not in _FAULTS:
            raise _status.bad_request(f"fault body must be one object keyed by one of {_FAULTS}")
        name, arguments = next(iter(body.items()))
        if not isinstance(arguments, dict):
            raise _status.bad_request(f"{name}: arguments must be a JSON object")
        try:
            getattr(faults, name)(**arguments)
        except (TypeError, ValueError) as exc:
            raise ApiError(400, "BadRequest", f"{name}: {exc}") from exc
        await respond_json(send, 200, {"armed": name})
        return
    if path == "/kubesim/state":
        await respond_json(send, 200, {"resourceVersion": cluster.resource_version})
        return
    raise _status.path_not_found(request.path)


async def _set_grants(request: Request, send: Send, users: Users, name: str) -> None:
    if request.method != "PUT":
        raise _status.method_not_allowed(request.method)
    try:
        body: Any = msgspec.json.decode(await request.body())
    except msgspec.DecodeError as exc:
        raise _status.bad_request(f"grants body is not JSON: {exc}") from exc
    if not isinstance(body, dict) or not all(
        isinstance(verbs, list) and all(v in VERBS_ANY for v in verbs) for verbs in body.values()
    ):
        raise _status.bad_request(
            'grants must map resources to lists of verbs, e.g. {"*": ["get"], "pods": []}'
        )
    try:
        users.set_grants(name, body)
    except KeyError:
        raise ApiError(404, "NotFound", f'user "{name}" not found') from None
    await respond_json(send, 200, {"user": name, "grants": body})
