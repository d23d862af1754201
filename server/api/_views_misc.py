"""The rest of what Deck and Orca read for Kubernetes (clouddriver-views.md 2.7, 2.10):
``/search``, ``/features/stages``, ``/projects/{project}/clusters``, the no-op cache
refresh, and an application's raw resources."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..store import SearchRequest, ViewQuery
from ..views import (
    APP_ROLES,
    CLUSTER_ROLES,
    PROVIDER,
    plan_search,
    result_set,
    search_results,
)
from ._errors import BadRequest
from ._views_groups import listed
from ._views_read import ViewJSON, decode_rows, reads

__all__ = [
    "STAGES",
    "app_raw_resources",
    "cache_refresh",
    "features_stages",
    "pending_cache",
    "project_clusters",
    "search",
]

# Clouddriver's stage converters for Kubernetes (FeaturesController); Orca only looks for
# upsertEntityTags, which kubesvc does not offer.
STAGES = (
    "deployManifest",
    "deleteManifest",
    "scaleManifest",
    "patchManifest",
    "pauseRolloutManifest",
    "resumeRolloutManifest",
    "undoRolloutManifest",
    "rollingRestartManifest",
    "disableManifest",
    "enableManifest",
    "runJob",
    "cleanupArtifacts",
    "resizeServerGroup",
)
# At most this many results are looked for (page x pageSize): every answer has a bound.
MAX_SEARCH_RESULTS = 100_000


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name}: expected an integer, got {raw!r}") from None
    if value < 1:
        raise BadRequest(f"query parameter {name}: must be at least 1, got {value}")
    return value


async def search(request: Request) -> Response:
    """``GET /search?q=&type=&platform=&pageSize=&page=``: ``[{totalMatches, pageNumber,
    pageSize, platform, query, results}]`` (Deck reads element 0)."""
    q = request.query_params.get("q", "")
    types = listed(request, "type")
    if types is None:
        raise BadRequest("Required request parameter 'type' for method parameter type 'List' "
                         "is not present")  # fmt: skip
    page_size = _int_param(request, "pageSize", 10_000)
    page = _int_param(request, "page", 1)
    platform = request.query_params.get("platform")
    if platform and platform != PROVIDER:
        # No provider of that platform: Clouddriver merges nobody's results, as "aws".
        return ViewJSON([{"totalMatches": 0, "pageNumber": page, "pageSize": page_size,
                              "platform": "aws", "query": q, "results": []}])  # fmt: skip
    plan = plan_search(types)
    view = await reads(request)
    results = []
    if not plan.empty:
        limit = min(page * page_size, MAX_SEARCH_RESULTS)
        logical = plan.applications or plan.clusters
        roles = set(plan.roles)
        wanted = SearchRequest(
            plan.kinds,
            q.lower(),
            limit,
            app_clusters=plan.clusters,
            with_apps=logical or bool(roles & set(APP_ROLES)),
            with_clusters=logical or bool(roles & set(CLUSTER_ROLES)),
        )
        hits = await view.store.search_views(wanted)
        results = search_results(plan, hits)
    return ViewJSON(result_set(q, page, page_size, results), headers=view.headers)


async def features_stages(request: Request) -> Response:
    """``GET /features/stages``: ``[{"name", "enabled": true}]``."""
    return ViewJSON([{"name": name, "enabled": True} for name in STAGES])


async def project_clusters(request: Request) -> Response:
    """``GET /projects/{project}/clusters``: Clouddriver builds these from Front50's project
    configs by stack and detail, which kubesvc does not read (and which say little of
    ``"kind name"`` clusters): always ``[]``."""
    return ViewJSON([])


async def cache_refresh(request: Request) -> Response:
    """``POST /cache/{cloudProvider}/{type}``: a no-op for Kubernetes since 2020 (the cache
    here follows the watches); answers what Clouddriver answers."""
    return ViewJSON({"cachedIdentifiersByType": {}})


async def pending_cache(request: Request) -> Response:
    """``GET /cache/{cloudProvider}/{type}``: the pending on-demand refreshes: none."""
    return ViewJSON([])


async def app_raw_resources(request: Request) -> Response:
    """``GET /applications/{app}/rawResources`` (Deck's ``kubernetesRawResources`` flag):
    every object linked to the application."""
    view = await reads(request)
    (rows,) = await view.rows(ViewQuery(roles=APP_ROLES, app=request.path_params["app"]))
    bodies = []
    for resource in decode_rows(rows):
        body = resource.common()
        del body["region"]
        bodies.append(body)
    return ViewJSON(bodies, headers=view.headers)
