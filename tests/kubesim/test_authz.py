"""The self-reviews (``kubectl auth can-i``, ``kubectl auth whoami``) judged by the same grants
as requests, and tokens that expire."""

from __future__ import annotations

import time
from typing import Any

import httpx
import trio
from kubernetes import client as k8s

import kubesim

from ._official_client import call

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _review(verb: str, resource: str, group: str = "", namespace: str = "") -> dict[str, Any]:
    attributes = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attributes["namespace"] = namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }


async def _allowed(http: httpx.AsyncClient, token: str, *args: str) -> bool:
    reply = await http.post(
        REVIEWS, json=_review(*args), headers={"authorization": f"Bearer {token}"}
    )
    assert reply.status_code == 201, reply.text
    assert reply.json()["kind"] == "SelfSubjectAccessReview"
    return bool(reply.json()["status"]["allowed"])


async def test_access_reviews_follow_the_grants_and_their_changes(
    server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        user = server.add_user(
            "reader", {"*": ["get", "list", "watch"], "secrets": [], "team-b/pods": []}
        )
        token = user.token
        assert await _allowed(http, token, "list", "deployments", "apps")
        assert await _allowed(http, token, "watch", "pods", "", "team-a")
        assert not await _allowed(http, token, "list", "secrets")
        assert not await _allowed(http, token, "list", "pods", "", "team-b")
        assert not await _allowed(http, token, "delete", "pods")
        # What the review says is what a request gets.
        forbidden = await http.get(
            "/api/v1/namespaces/team-b/pods", headers={"authorization": f"Bearer {token}"}
        )
        assert forbidden.status_code == 403
        # RBAC revoked while the user works: the next review says so at once.
        server.set_grants("reader", {"*": ["get", "list", "watch"], "deployments.apps": []})
        assert not await _allowed(http, token, "list", "deployments", "apps")
        assert await _allowed(http, token, "list", "secrets")


async def test_the_official_client_asks_can_i_and_whoami(
    server: kubesim.Server, api: k8s.ApiClient
) -> None:
    with trio.fail_after(20):
        body = k8s.V1SelfSubjectAccessReview(
            spec=k8s.V1SelfSubjectAccessReviewSpec(
                resource_attributes=k8s.V1ResourceAttributes(verb="watch", resource="pods")
            )
        )
        answer = await call(k8s.AuthorizationV1Api(api).create_self_subject_access_review, body)
        assert answer.status.allowed is True
        whoami = await call(
            k8s.AuthenticationV1Api(api).create_self_subject_review,
            k8s.V1SelfSubjectReview(),
        )
        assert whoami.status.user_info.username == "admin"


async def test_an_expired_token_is_refused_with_401(
    server: kubesim.Server, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        fresh = server.add_user("fresh", token="fresh-token", expires_at=time.time() + 3600)
        stale = server.add_user("stale", token="stale-token", expires_at=time.time() - 1)
        ok = await http.get("/version", headers={"authorization": f"Bearer {fresh.token}"})
        assert ok.status_code == 200
        refused = await http.get("/version", headers={"authorization": f"Bearer {stale.token}"})
        assert refused.status_code == 401
        assert refused.json()["reason"] == "Unauthorized"
        assert stale.expired()
        assert not fresh.expired()
