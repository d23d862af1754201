"""The REST API application (Starlette) and its server (server/api/_http1.py on trio).

Every endpoint is declared once in `ENDPOINTS`: the router and the OpenAPI document at
/openapi.json are both made from that list.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any, Literal

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import Receive, Scope, Send

import wire

from .._feed_follower import ChangeFollower
from ..ops import OperationService
from . import _armory as armory
from . import _clouddriver as clouddriver
from . import _jobs as jobs
from . import _ops_endpoints as ops_endpoints
from . import _own as own
from . import _schemas as schemas
from . import _status as status
from ._body import MAX_BODY_BYTES
from ._context import ApiContext, ApiState
from ._errors import EXCEPTION_HANDLERS
from ._feed_ws import events_feed
from ._hot import HotRoutes
from ._http1 import serve_http1
from ._metrics import AccountsView, AgentsView, ApiMetrics, MetricsMiddleware, ReplicaView
from ._routing import Endpoint, Param, openapi_document, routes_for
from ._views_endpoints import VIEWS_ENDPOINTS

__all__ = ["DEFAULT_PORT", "ENDPOINTS", "MAX_BODY_BYTES", "build_app", "serve_api"]

DEFAULT_PORT = 7002
API_VERSION = "1"

_ACCOUNTS = "Armory accounts"
_AGENTS = "Armory agents"
_CLOUDDRIVER = "Clouddriver"
_OWN = "kubesvc"
_STATUS = "kubesvc status page"

_EXPAND = Param("expand", "true adds namespaces, spinnakerKindMap, ...", type="boolean")
_INCLUDE_EVENTS = Param(
    "includeEvents", "include the Kubernetes Events about the object (default true)", type="boolean"
)
_NAME = Param("name", 'URL-encoded "<kind> <name>", e.g. "deployment my-app"', where="path")
_LOCATION = Param("location", "the namespace; _ for cluster-scoped objects", where="path")
_CRITERIA = Param(
    "criteria", "newest, second_newest (or second-newest), oldest, largest, smallest", where="path"
)
_ACCOUNT_LIST = "a JSON list [{name, zoneId?, kubeconfigFile?}]"
_DEFINITION = (
    "an account definition: name plus one of kubeconfigContents, kubeconfigFile, "
    "serviceAccount, and any kubernetes.accounts[] field"
)
_E400 = "a malformed body or parameter (the message names it)"
_E404 = "unknown account, agent or object"
# docs/protocol.md §7.4: what the agent cannot watch is answered for, not "not found".
_E403 = "the agent is forbidden to watch this kind (unavailableKind says why and since when)"
_E503 = "the agent cannot watch this kind now: not served, or gone from discovery (the reason)"

ENDPOINTS: tuple[Endpoint, ...] = (
    # Armory plugin: accounts.
    Endpoint("GET", "/armory/accounts", armory.list_accounts, "List accounts", _ACCOUNTS),
    Endpoint(
        "POST",
        "/armory/accounts",
        armory.add_accounts,
        "Add accounts as INACTIVE",
        _ACCOUNTS,
        body=_ACCOUNT_LIST,
        body_schema=schemas.ACCOUNT_LIST,
        responses={202: "the accounts added", 400: _E400, 409: "names already present (names)"},
    ),
    Endpoint(
        "PATCH",
        "/armory/accounts",
        armory.update_accounts,
        "Change accounts' states",
        _ACCOUNTS,
        body="a JSON list [{name, state, zoneId?, kubeconfigFile?}]",
        body_schema=schemas.ACCOUNT_CHANGES,
        responses={200: "the accounts after the change", 400: _E400, 404: _E404},
    ),
    Endpoint(
        "DELETE",
        "/armory/accounts",
        armory.delete_accounts,
        "Delete accounts",
        _ACCOUNTS,
        body='a JSON list of names ["a", ...]',
        body_schema=schemas.ACCOUNT_NAMES,
        responses={200: "the names deleted", 400: _E400, 404: _E404},
    ),
    Endpoint(
        "POST",
        "/armory/accounts/dynamic",
        armory.create_dynamic_account,
        "Create a dynamic account and push it to an agent",
        _ACCOUNTS,
        body=_DEFINITION,
        body_schema=schemas.ACCOUNT_DEFINITION,
        responses={
            202: "stored; agentId says where it was pushed (null: nowhere yet)",
            400: _E400,
            409: "the account exists",
        },
    ),
    Endpoint(
        "PUT",
        "/armory/accounts/dynamic",
        armory.update_dynamic_account,
        "Create or update a dynamic account and push it to an agent",
        _ACCOUNTS,
        body=_DEFINITION,
        body_schema=schemas.ACCOUNT_DEFINITION,
        responses={
            202: "stored; agentId says where it was pushed (null: nowhere yet)",
            400: _E400,
            409: "the account exists and is not dynamic",
        },
    ),
    Endpoint(
        "GET",
        "/armory/accounts/{name}",
        armory.get_account,
        "One account",
        _ACCOUNTS,
        responses={200: "the account", 404: _E404},
    ),
    Endpoint(
        "DELETE",
        "/armory/accounts/{name}",
        armory.delete_account,
        "Delete one account and its cached objects",
        _ACCOUNTS,
        responses={200: "deleted", 404: _E404},
    ),
    # Armory plugin: agents and clouddrivers.
    Endpoint("GET", "/armory/agents", armory.list_agents, "Connected agents", _AGENTS),
    Endpoint(
        "GET",
        "/armory/agents/{agentId}",
        armory.get_agent,
        "One agent",
        _AGENTS,
        responses={200: "the agent", 404: _E404},
    ),
    Endpoint(
        "POST",
        "/armory/agent/{agentId}/disconnect",
        armory.disconnect_agent,
        "End an agent's sessions",
        _AGENTS,
        responses={200: "how many sessions were ended", 404: _E404},
    ),
    Endpoint("GET", "/armory/clouddrivers", armory.list_clouddrivers, "Server replicas", _AGENTS),
    Endpoint(
        "GET",
        "/armory/clouddrivers/{id}",
        armory.get_clouddriver,
        "One server replica",
        _AGENTS,
        responses={200: "the replica", 404: "unknown id"},
    ),
    Endpoint(
        "GET",
        "/agents/kubernetes/accounts/{name}",
        armory.kubernetes_account,
        "An agent account with its namespaces",
        _ACCOUNTS,
        responses={200: "the account", 404: _E404},
    ),
    Endpoint(
        "GET",
        "/agents/kubernetes/accounts/{name}/namespaces",
        armory.kubernetes_account_namespaces,
        "An account's namespaces",
        _ACCOUNTS,
        responses={200: "a list of names", 404: _E404},
    ),
    # Clouddriver reads.
    Endpoint(
        "GET",
        "/credentials",
        clouddriver.list_credentials,
        "Accounts (Clouddriver)",
        _CLOUDDRIVER,
        params=(_EXPAND,),
        responses={200: "the accounts", 400: _E400},
    ),
    Endpoint(
        "GET",
        "/credentials/{account}",
        clouddriver.get_credentials,
        "One account, expanded (Clouddriver)",
        _CLOUDDRIVER,
        responses={200: "the account", 404: "Account does not exist (name: X)"},
    ),
    Endpoint(
        "GET",
        "/manifests/{account}/{location}/{name}",
        clouddriver.get_manifest,
        "One object with moniker, status, artifacts and events",
        _CLOUDDRIVER,
        params=(_LOCATION, _NAME, _INCLUDE_EVENTS),
        responses={200: "the manifest", 400: _E400, 403: _E403, 404: _E404, 503: _E503},
    ),
    Endpoint(
        "GET",
        "/manifests/{account}/{name}",
        clouddriver.get_cluster_scoped_manifest,
        "One cluster-scoped object",
        _CLOUDDRIVER,
        params=(_NAME, _INCLUDE_EVENTS),
        responses={200: "the manifest", 400: _E400, 403: _E403, 404: _E404, 503: _E503},
    ),
    Endpoint(
        "GET",
        "/manifests/{account}/{location}/{kind}/cluster/{app}/{cluster}",
        clouddriver.list_cluster,
        "The objects of a Spinnaker cluster, oldest first",
        _CLOUDDRIVER,
        params=(_LOCATION,),
        responses={200: "a list of {kind, namespace, name}", 403: _E403, 404: _E404, 503: _E503},
    ),
    Endpoint(
        "GET",
        "/manifests/{account}/{location}/{kind}/cluster/{app}/{cluster}/dynamic/{criteria}",
        clouddriver.dynamic_cluster_target,
        "Pick one object of a cluster by criteria",
        _CLOUDDRIVER,
        params=(_LOCATION, _CRITERIA),
        responses={
            200: "{kind, namespace, name}",
            400: "unknown criteria",
            403: _E403,
            404: "unknown account or nothing fits",
            503: _E503,
        },
    ),
    # Run Job's status, as Orca's WaitOnJobCompletion polls it (server/api/_jobs.py). Gate
    # still declares it as a POST with an empty body: both are answered.
    *(
        Endpoint(
            method,
            "/applications/{app}/jobs/{account}/{location}/{id}",
            jobs.get_job,
            "A Job's status: jobState, completionDetails, its pods",
            _CLOUDDRIVER,
            params=(
                _LOCATION,
                Param("id", 'URL-encoded "job <name>", e.g. "job migrate"', where="path"),
            ),
            responses={
                200: "the job status",
                400: _E400,
                403: _E403,
                404: "Job not found (...)",
                503: _E503,
            },
        )
        for method in ("GET", "POST")
    ),
    # Operations and tasks (issue 6, server/api/_ops.py).
    *ops_endpoints.OPS_ENDPOINTS,
    # Deck's Kubernetes screens (issue 16, server/api/_views_*.py).
    *VIEWS_ENDPOINTS,
    # kubesvc's own.
    Endpoint(
        "GET",
        "/v1/objects",
        own.query_objects,
        "Query cached objects, paginated",
        _OWN,
        params=(
            Param("account", "only this account"),
            Param("kind", "only this kind (case-insensitive)"),
            Param("namespace", "only this namespace (empty: cluster-scoped objects)"),
            Param("labelSelector", "a Kubernetes label selector"),
            Param("limit", "page size, 1..10000 (default 500)", type="integer"),
            Param("continue", "the token from the previous page"),
        ),
        responses={200: "{items, continue}", 400: _E400, 403: _E403, 503: _E503},
    ),
    Endpoint(
        "WEBSOCKET",
        "/v1/events",
        events_feed,
        "The live change feed (WebSocket)",
        _OWN,
        params=(
            Param("account", "only these accounts (repeat or comma-separate)", repeated=True),
            Param("kind", "only these kinds (repeat or comma-separate)", repeated=True),
        ),
        responses={101: "switching to the WebSocket protocol"},
    ),
    Endpoint(
        "GET",
        "/health",
        own.health,
        "Liveness: the process answers (the store is not asked)",
        _OWN,
        responses={200: "{status: UP, serverId}"},
    ),
    Endpoint(
        "GET",
        "/health/ready",
        own.ready,
        "Readiness: the store answers a ping (cached 1 s) and the server is not draining",
        _OWN,
        responses={
            200: "{status: UP, serverId}",
            503: "{status: DOWN, reason, serverId}: the store is unreachable, or draining",
        },
    ),
    Endpoint("GET", "/metrics", own.metrics, "Prometheus metrics", _OWN),
    # The operator's status page (server/api/_status.py).
    Endpoint(
        "GET",
        "/",
        status.to_status_page,
        "Redirects to the status page",
        _STATUS,
        responses={307: "to ui"},
    ),
    Endpoint(
        "GET",
        "/ui",
        status.status_page,
        "The status page: agents, accounts, operations, event rate",
        _STATUS,
        media_type="text/html",
    ),
    Endpoint(
        "GET",
        "/ui/status.js",
        status.status_script,
        "The status page's script",
        _STATUS,
        media_type="text/javascript",
    ),
    Endpoint(
        "GET",
        "/ui/status.css",
        status.status_style,
        "The status page's style sheet",
        _STATUS,
        media_type="text/css",
    ),
    Endpoint(
        "GET",
        "/ui/summary.json",
        status.status_summary,
        "What the status page shows: problems first, then agents, accounts, operations, "
        "event rate (polled every 2 s; computed at most once a second whoever asks)",
        _STATUS,
    ),
    Endpoint("GET", "/openapi.json", own.openapi, "This document", _OWN),
)


class ApiApp(Starlette):
    """Starlette, with the task polls and operation submits answered first (server/api/_hot.py)."""

    def __init__(self, hot: HotRoutes, **starlette: Any) -> None:
        super().__init__(**starlette)
        self.hot = hot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.hot.wants(scope):
            await self.hot(scope, receive, send, super().__call__)
        else:
            await super().__call__(scope, receive, send)


def build_app(state: ApiState, *, registry: CollectorRegistry | None = None) -> ApiApp:
    """The ASGI app over `state`. Metrics go to `registry` (a new one when None), never to the
    process-global registry, so that several servers can live in one process (the tests)."""
    if registry is None:
        registry = CollectorRegistry(auto_describe=True)
    unknown = getattr(state, "unknown_fields", None)  # ServerState has it, StandaloneState not
    replicas = getattr(state, "replicas", None)  # ServerState's ReplicaService, if any
    follower = getattr(state, "follower", None)  # ServerState's, on PostgreSQL
    accounts = getattr(state, "accounts", None)  # ServerState's AccountService
    sessions = getattr(state, "sessions", None)  # ServerState's SessionManager

    def operations() -> OperationService | None:
        service = getattr(state, "operations", None)
        return service if isinstance(service, OperationService) else None

    service = operations()
    metrics = ApiMetrics(
        registry,
        state.feed,
        unknown if isinstance(unknown, wire.UnknownFieldCounter) else None,
        replicas if isinstance(replicas, ReplicaView) else None,
        follower if isinstance(follower, ChangeFollower) else None,
        accounts=accounts if isinstance(accounts, AccountsView) else None,
        agents=sessions if isinstance(sessions, AgentsView) else None,
        operations=service.statistics if service is not None else None,
    )

    app = ApiApp(
        HotRoutes(operations, metrics, MAX_BODY_BYTES),
        routes=routes_for(ENDPOINTS),
        middleware=[Middleware(MetricsMiddleware, metrics=metrics)],
        # No max_body_size: the body limit is json_body's (server/api/_body.py), the one
        # reader of bodies, so that a body over it gets the same JSON error from every server.
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.ctx = ApiContext(state=state, metrics=metrics)
    app.state.status_summary = status.SummaryCache()
    app.state.openapi = openapi_document(ENDPOINTS, title="kubesvc server", version=API_VERSION)
    return app


async def serve_api(
    state: ApiState,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    registry: CollectorRegistry | None = None,
    http_server: Literal["kubesvc", "hypercorn"] = "kubesvc",
    drain: trio.Event | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the REST API until cancelled; `task_status.started(port)` with the bound port
    (useful with port 0). HTTP/1.1 requests are served by server/api/_http1.py (WebSocket
    upgrades by Hypercorn through it); ``http_server="hypercorn"`` serves everything with
    Hypercorn. When ``drain`` is set: stop listening, answer the requests in flight (then
    close their connections), close idle ones, and return once none is left."""
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    # Hypercorn's errors and notices through our logging (its default is a handler of its own
    # on stderr, which would break the one-format-per-process rule of --log-format json).
    config.errorlog = logging.getLogger("server.api.http")
    # Hypercorn's own drain: the caller bounds the whole drain with a cancel scope.
    config.graceful_timeout = 1.0 if drain is None else math.inf
    app = build_app(state, registry=registry)
    async with trio.open_nursery() as nursery:
        if http_server == "hypercorn":
            binds: list[str] = await nursery.start(_serve_forever, app, config, drain)
            task_status.started(int(binds[0].rsplit(":", 1)[1]))
        else:
            serve = functools.partial(
                serve_http1, max_body=MAX_BODY_BYTES, config=config, poll=app.hot.poll, drain=drain
            )
            task_status.started(await nursery.start(serve, app, host, port))


async def _serve_forever(
    app: Starlette,
    config: Config,
    drain: trio.Event | None,
    *,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    trigger = _never if drain is None else drain.wait
    await serve(app, config, shutdown_trigger=trigger, task_status=task_status)  # type: ignore[arg-type]


async def _never() -> None:
    await trio.sleep(math.inf)
