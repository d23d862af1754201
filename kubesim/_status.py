"""The ``Status`` errors kubesim's own code raises, worded the way the API server words them."""

from __future__ import annotations

from kubesim._errors import ApiError
from kubesim._resources import ResourceType

__all__ = [
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "forbidden",
    "gone",
    "method_not_allowed",
    "not_found",
    "too_large_rv",
    "unauthorized",
]


def _qualified(rtype: ResourceType) -> str:
    return f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural


def not_found(rtype: ResourceType, name: str) -> ApiError:
    details = {"name": name, "kind": rtype.plural}
    if rtype.group:
        details["group"] = rtype.group
    return ApiError(404, "NotFound", f'{_qualified(rtype)} "{name}" not found', details)


def path_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")


def already_exists(rtype: ResourceType, name: str) -> ApiError:
    details = {"name": name, "kind": rtype.plural}
    if rtype.group:
        details["group"] = rtype.group
    return ApiError(409, "AlreadyExists", f'{_qualified(rtype)} "{name}" already exists', details)


def conflict(rtype: ResourceType, name: str) -> ApiError:
    details = {"name": name, "kind": rtype.plural}
    if rtype.group:
        details["group"] = rtype.group
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(rtype)} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        details,
    )


def gone(rv: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {rv} ({oldest})")


def expired() -> ApiError:
    return ApiError(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You "
        "can start a new list without the continue parameter, or use the continue token in "
        "this response to retrieve the remainder of the results. Continuing with the provided "
        "token results in an inconsistent list - objects that were created, modified, or "
        "deleted between the time the first chunk was returned and now may show up in the list.",
    )


def too_large_rv(rv: int, current: int) -> ApiError:
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {rv}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(user: str, verb: str, rtype: ResourceType, namespace: str | None) -> ApiError:
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    group = f'in API group "{rtype.group}"'
    details = {"kind": rtype.plural}
    if rtype.group:
        details["group"] = rtype.group
    return ApiError(
        403,
        "Forbidden",
        f'{_qualified(rtype)} is forbidden: User "{user}" cannot {verb} resource '
        f'"{rtype.plural}" {group}{where}',
        details,
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method ({method})")
