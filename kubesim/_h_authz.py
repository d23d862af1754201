"""The self-reviews: "may I?" (SelfSubjectAccessReview) and "who am I?" (SelfSubjectReview).

``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` answers whether the caller may
use a verb on a resource, judged by the same grants as its requests (kubesim/_auth.py), so
``kubectl auth can-i`` and ``kubesvc doctor`` see what the agent will see.
``POST /apis/authentication.k8s.io/v1/selfsubjectreviews`` answers the caller's user name and
groups (``kubectl auth whoami``). As on a real API server, every authenticated user may create
both (the ``system:basic-user`` ClusterRole), whatever its grants; they are not stored.

Where it is simpler than a real cluster: no SelfSubjectRulesReview (kubesim's grants say "the
most specific entry wins", which RBAC's additive rules cannot list faithfully), and
``nonResourceAttributes`` are always allowed (kubesim guards no non-resource path beyond
authentication). The groups are not in discovery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from kubesim import _status
from kubesim._auth import VERBS_ANY
from kubesim._errors import ApiError
from kubesim._http import Request, Send, respond_json

__all__ = ["is_review", "serve_review"]

_ACCESS = ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"]
_WHOAMI_VERSIONS = ("v1", "v1beta1")


def is_review(parts: list[str]) -> bool:
    """Whether the path (split on "/") is one of the self-reviews."""
    return parts == _ACCESS or (
        len(parts) == 4
        and parts[:2] == ["apis", "authentication.k8s.io"]
        and parts[2] in _WHOAMI_VERSIONS
        and parts[3] == "selfsubjectreviews"
    )


async def serve_review(request: Request, send: Send, parts: list[str]) -> None:
    if request.method != "POST":
        raise _status.method_not_allowed(request.method)
    try:
        body: Any = msgspec.json.decode(await request.body())
    except msgspec.DecodeError as exc:
        raise _status.bad_request(f"the review is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _status.bad_request("the review must be a JSON object")
    user = request.user
    assert user is not None  # authenticated before routing
    if parts == _ACCESS:
        spec = body.get("spec")
        if not isinstance(spec, dict):
            raise ApiError(422, "Invalid", "SelfSubjectAccessReview.spec is required")
        attributes = spec.get("resourceAttributes")
        if isinstance(attributes, dict):
            status = _judge(user.allows_resource, attributes)
        elif isinstance(spec.get("nonResourceAttributes"), dict):
            status = {"allowed": True}
        else:
            raise ApiError(
                422,
                "Invalid",
                "spec: one of resourceAttributes or nonResourceAttributes is required",
            )
        answer = {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
    else:
        answer = {
            "kind": "SelfSubjectReview",
            "apiVersion": f"authentication.k8s.io/{parts[2]}",
            "metadata": {"creationTimestamp": None},
            "status": {"userInfo": {"username": user.name, "groups": list(user.groups)}},
        }
    await respond_json(send, 201, answer)


def _judge(
    allows: Callable[[str, str, str, str | None], bool], attributes: dict[str, Any]
) -> dict[str, Any]:
    verb = str(attributes.get("verb") or "")
    resource = str(attributes.get("resource") or "")
    if verb not in VERBS_ANY or not resource:
        raise ApiError(
            422, "Invalid", "spec.resourceAttributes: a known verb and a resource are required"
        )
    group = str(attributes.get("group") or "")
    namespace = str(attributes.get("namespace") or "") or None
    if allows(verb, group, resource, namespace):
        return {"allowed": True, "reason": "granted by the user's kubesim grants"}
    return {"allowed": False}
