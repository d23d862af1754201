"""The ASGI application: route, authenticate, authorize, count, inject faults, dispatch.

Routes: health probes and discovery, ``/kubesim/...`` (admin: faults and counters), the
self-reviews (kubesim/_h_authz.py: what may I do, who am I), and the resource paths
``/api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]`` and the same under
``/apis/{group}/{version}``. Every ApiError is answered here, once, as a Status.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from kubesim import _status
from kubesim._auth import User, Users
from kubesim._cluster import Cluster
from kubesim._errors import ApiError
from kubesim._faults import Faults, RequestCounters, Write, WriteLog
from kubesim._h_admin import serve_admin
from kubesim._h_authz import is_review, serve_review
from kubesim._h_discovery import DiscoveryDocs, serve_discovery
from kubesim._h_logs import serve_pod_log
from kubesim._h_openapi import serve_openapi
from kubesim._h_read import (
    ReadTarget,
    Wakeups,
    WatchDropped,
    serve_get,
    serve_list,
    serve_watch,
    watch_options,
)
from kubesim._h_write import serve_write
from kubesim._http import Receive, Request, Scope, Send, negotiate_metadata, respond, respond_error
from kubesim._openapi import OpenApiDocs
from kubesim._resources import ResourceType
from kubesim._watch import WatchCursor

__all__ = ["ApiApp"]

_log = logging.getLogger("kubesim")

_HEALTH = {"/healthz", "/readyz", "/livez"}
_VERB_BY_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class ApiApp:
    """The simulated API server as a raw ASGI app (no framework: it is on the hot path)."""

    def __init__(
        self,
        cluster: Cluster,
        users: Users,
        faults: Faults,
        counters: RequestCounters,
        peer_names: dict[tuple[str, int], str],
        cut_connection: Callable[[tuple[str, int]], None],
        flush_connection: Callable[[tuple[str, int]], Awaitable[None]],
        writes: WriteLog | None = None,
    ) -> None:
        self.cluster = cluster
        self.users = users
        self.faults = faults
        self.counters = counters
        self.writes = writes if writes is not None else WriteLog()
        self.peer_names = peer_names  # client address -> client-certificate common name
        self.cut_connection = cut_connection  # shuts a client's TCP connection down
        self.flush_connection = flush_connection  # waits until what was written went out
        self.wakeups = Wakeups()
        self.discovery = DiscoveryDocs(cluster)
        self.openapi = OpenApiDocs(
            lambda: list(cluster.registry),
            self._crd_object,
            lambda: cluster.registry.generation,
            cluster.config.version.get("gitVersion", ""),
        )
        self.server_address = ""
        self.unsubscribe = cluster.subscribe(self.wakeups.notify)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request.from_scope(scope, receive)
        try:
            await self._dispatch(request, send)
        except WatchDropped:
            # Cut the whole TCP connection, as a network failure would: returning mid-body
            # alone ends an HTTP/1.1 response but leaves an HTTP/2 stream hanging. The events
            # the fault let through go out first (an HTTP/2 connection sends from a task).
            client = scope.get("client")
            if client is not None:
                peer = (str(client[0]), int(client[1]))
                await self.flush_connection(peer)
                self.cut_connection(peer)
        except ApiError as exc:
            retry_after = None
            if exc.details and isinstance(exc.details.get("retryAfterSeconds"), int):
                retry_after = exc.details["retryAfterSeconds"]
            await respond_error(send, exc, retry_after)
        except Exception:
            # A bug in kubesim, not an answer: say where, then let Hypercorn answer 500 (or
            # cut a response already under way).
            _log.exception("kubesim: unexpected error on %s %s", request.method, request.path)
            raise

    def _crd_object(self, rtype: ResourceType) -> dict[str, Any] | None:
        name = self.cluster.registry.crd_name(rtype)
        if name is None:
            return None
        return self.cluster.get("apiextensions.k8s.io", "v1", "customresourcedefinitions", "", name)

    def _authenticate(self, request: Request) -> User:
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            user = self.users.by_token(header[7:].strip())
            if user is not None and not user.expired():
                return user
            raise _status.unauthorized()
        client = request.scope.get("client")
        if client is not None:
            name = self.peer_names.get((client[0], client[1]))
            if name is not None:
                user = self.users.by_cert_name(name)
                if user is not None:
                    return user
        raise _status.unauthorized()

    async def _dispatch(self, request: Request, send: Send) -> None:
        path = request.path.rstrip("/") or "/"
        if self.faults.take_drop(request.method, path):
            client = request.scope.get("client")
            if client is not None:
                self.cut_connection((str(client[0]), int(client[1])))
            return
        if path in _HEALTH:
            await respond(send, 200, b"ok", "text/plain; charset=utf-8")
            return
        request.user = self._authenticate(request)
        if path == "/version":
            await respond(send, 200, _encode_version(self.cluster), "application/json")
            return
        if path.startswith("/kubesim/"):
            if not request.user.is_admin:
                raise ApiError(403, "Forbidden", f'User "{request.user.name}" is not an admin')
            await serve_admin(request, send, self.faults, self.counters, self.cluster, self.users)
            return
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise _status.path_not_found(path)
        if is_review(parts):
            await serve_review(request, send, parts)
            return
        if parts[0] == "openapi":
            self.counters.record("get", "openapi")
            injected = self.faults.take_failure("get", "openapi", named_only=True)
            if injected is not None:
                raise injected[0]
            await serve_openapi(request, send, self.openapi, self.cluster.config.openapi)
            return
        is_api = parts[:1] == ["api"] and len(parts) <= 2
        if parts in (["api"], ["apis"]) or is_api or (parts[:1] == ["apis"] and len(parts) <= 3):
            if request.method != "GET":
                raise _status.method_not_allowed(request.method)
            await serve_discovery(request, send, self.discovery, self.server_address)
            return
        await self._resource(request, send, parts)

    def _target(self, parts: list[str]) -> tuple[ReadTarget, str | None]:
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _status.path_not_found("/" + "/".join(parts))
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            inner = self.cluster.registry.lookup(group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise _status.path_not_found("/" + "/".join(parts))
        rtype = self.cluster.resolve(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rtype.subresources:
            raise _status.path_not_found("/" + "/".join(parts))
        if rtype.namespaced and name is not None and namespace is None:
            raise _status.path_not_found("/" + "/".join(parts))
        return ReadTarget(rtype, namespace, name), sub

    async def _resource(self, request: Request, send: Send, parts: list[str]) -> None:
        target, sub = self._target(parts)
        rtype = target.rtype
        method = request.method
        if method == "GET":
            if target.name is not None:
                verb = "get"
            else:
                verb = "watch" if request.flag("watch") else "list"
        elif method == "DELETE" and target.name is None:
            verb = "deletecollection"
        elif method in _VERB_BY_METHOD:
            verb = _VERB_BY_METHOD[method]
            if (verb == "create") != (target.name is None):
                raise _status.method_not_allowed(method)
        else:
            raise _status.method_not_allowed(method)
        resource = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
        request.verb, request.resource = verb, resource
        assert request.user is not None
        if not request.user.allows(verb, rtype, target.namespace):
            raise _status.forbidden(request.user.name, verb, rtype, target.namespace)
        self.counters.record(verb, resource)
        injected = self.faults.take_failure(verb, resource)
        if injected is not None:
            raise injected[0]
        if self.faults.delay:
            await trio.sleep(self.faults.delay)
        if verb != "watch":
            stall = self.faults.take_stall()
            if stall:
                await trio.sleep(stall)
        gate = self.faults.take_hold(verb, resource)
        if gate is not None:
            await gate.wait()
        accept = request.headers.get("accept")
        if sub == "log":
            if verb != "get" or target.name is None:
                raise _status.method_not_allowed(request.method)
            await serve_pod_log(self.cluster, request, send, target.namespace or "", target.name)
        elif verb == "get" and sub is None:
            await serve_get(
                self.cluster, target, request, send, negotiate_metadata(accept, as_list=False)
            )
        elif verb == "list":
            await serve_list(
                self.cluster, target, request, send, negotiate_metadata(accept, as_list=True)
            )
        elif verb == "watch":
            options = watch_options(target, request, negotiate_metadata(accept, as_list=False))
            cursor = WatchCursor(self.cluster, rtype, options)
            if cursor.lists:  # counted apart too, so that "no relist" can be checked
                self.counters.record("watchlist", resource)
            await serve_watch(
                cursor,
                request,
                send,
                self.wakeups,
                bookmark_interval=self.cluster.config.bookmark_interval,
                fault=self.faults.take_watch_fault(),
            )
        else:
            try:
                await serve_write(self.cluster, target, sub, request, send)
            finally:
                self.writes.record(
                    Write(
                        verb,
                        resource,
                        request.path,
                        dict(request.query),
                        request.headers.get("content-type", ""),
                        request.body_read,
                        request.headers.get("user-agent", ""),
                    )
                )


def _encode_version(cluster: Cluster) -> bytes:
    return msgspec.json.encode(cluster.config.version)
