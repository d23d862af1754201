"""Deck's Kubernetes screens as `Endpoint`s (registered in _app.ENDPOINTS, documented in
OpenAPI): clouddriver-views.md section 2."""

from __future__ import annotations

from . import _views_groups as groups
from . import _views_lbs as lbs
from . import _views_misc as misc
from ._routing import Endpoint, HttpHandler, Param

__all__ = ["VIEWS_ENDPOINTS"]

_TAG = "Deck views (Clouddriver)"
_EXPAND = Param("expand", "true: full objects", type="boolean")
_REGION = Param("region", "the namespace", where="path")
_FULL_NAME = Param("name", 'URL-encoded "<kind> <name>", e.g. "replicaSet shop-v001"', where="path")
_CLUSTER = Param("cluster", 'the moniker cluster, e.g. "deployment shop"', where="path")
_E404 = "unknown (the message says what)"
_SEARCH_TYPE = Param(
    "type",
    "serverGroups, instances, loadBalancers, securityGroups, applications, clusters, or a "
    "kind (replicaSet, ...)",
    required=True,
    repeated=True,
)


def _get(
    path: str, handler: HttpHandler, summary: str, *params: Param, **responses: str
) -> Endpoint:
    """A GET; ``e404="..."`` documents a 404 (and so on)."""
    codes = {200: "OK", **{int(k.removeprefix("e")): v for k, v in responses.items()}}
    return Endpoint("GET", path, handler, summary, _TAG, params=params, responses=codes)


VIEWS_ENDPOINTS: tuple[Endpoint, ...] = (
    _get(
        "/applications",
        groups.list_applications,
        "Applications with clusters: name, attributes, clusterNames (Gate polls it every 5 s)",
        _EXPAND,
        Param("restricted", "ignored (no Fiat here)", type="boolean"),
    ),
    _get(
        "/applications/{app}",
        groups.get_application,
        "One application with its minimal clusters per account",
        e404="Application does not exist (name: X)",
    ),
    _get(
        "/applications/{app}/clusters",
        groups.application_clusters,
        "The application's cluster names per account",
    ),
    _get(
        "/applications/{app}/clusters/{account}",
        groups.clusters_of_account,
        "The application's clusters in an account, with server group and load balancer names",
        e404=_E404,
    ),
    _get(
        "/applications/{app}/clusters/{account}/{cluster}",
        groups.cluster_in_account,
        "A list with the full cluster",
        _CLUSTER,
        _EXPAND,
        e404="Cluster not found (...)",
    ),
    _get(
        "/applications/{app}/clusters/{account}/{cluster}/{type}",
        groups.one_cluster,
        "The full cluster (Orca's getCluster); type is kubernetes",
        _CLUSTER,
        _EXPAND,
        e404=_E404,
    ),
    _get(
        "/applications/{app}/clusters/{account}/{cluster}/{type}/serverGroups",
        groups.cluster_server_groups,
        "The cluster's server groups (full)",
        _CLUSTER,
        _EXPAND,
        Param("region", "only this namespace"),
        e404=_E404,
    ),
    _get(
        "/applications/{app}/clusters/{account}/{cluster}/{type}/serverGroups/{name}",
        groups.cluster_server_group,
        "Always 404 for Kubernetes (minimal clusters); use /manifests/.../dynamic/{criteria}",
        _CLUSTER,
        e404="Server group not found (...)",
    ),
    _get(
        "/applications/{app}/clusters/{account}/{cluster}/{type}/{scope}/serverGroups/target/"
        "{target}",
        groups.cluster_target,
        "Always 404 for Kubernetes (minimal clusters); use /manifests/.../dynamic/{criteria}",
        _CLUSTER,
        e404="No server groups found (...)",
    ),
    _get(
        "/applications/{app}/serverGroups",
        groups.list_server_groups,
        "The application's server groups: summaries (Deck's Clusters tab), full with expand",
        _EXPAND,
        Param("cloudProvider", "only this provider (kubernetes)"),
        Param("clusters", "only these clusters: account:cluster,...", repeated=True),
    ),
    _get(
        "/applications/{app}/serverGroups/{account}/{region}/{name}",
        groups.server_group,
        "One server group (full)",
        _REGION,
        _FULL_NAME,
        Param("includeDetails", "ignored", type="boolean"),
        e404="Server group not found (account: A, region: R, name: N)",
    ),
    _get(
        "/serverGroups/{account}/{region}/{name}",
        groups.server_group,
        "One server group (full)",
        _REGION,
        _FULL_NAME,
        e404="Server group not found (account: A, region: R, name: N)",
    ),
    _get(
        "/serverGroups",
        groups.server_groups,
        "Server group summaries by ids (account:namespace:kind name) or applications",
        Param("ids", "account:namespace:kind name,...", repeated=True),
        Param("applications", "app,...", repeated=True),
        Param("cloudProvider", "only this provider (kubernetes)"),
        e400="neither or both parameters, or a malformed id",
    ),
    _get(
        "/applications/{app}/serverGroupManagers",
        groups.server_group_managers,
        "The application's Deployments with the server groups they own",
    ),
    _get(
        "/applications/{app}/loadBalancers",
        lbs.app_load_balancers,
        "The application's Services and Ingresses with their server groups and instances",
    ),
    _get("/kubernetes/loadBalancers", lbs.list_load_balancers, "Always [] for Kubernetes"),
    _get(
        "/kubernetes/loadBalancers/{account}/{region}/{name}",
        lbs.load_balancer_by_name,
        "A list with one load balancer ([] when unknown)",
        _REGION,
        _FULL_NAME,
    ),
    _get(
        "/instances/{account}/{region}/{name}",
        lbs.get_instance,
        "One instance (pod): health, healthState, moniker, ...",
        _REGION,
        Param("name", 'URL-encoded "pod <name>"', where="path"),
        e404="Instance not found (id: X)",
    ),
    _get(
        "/securityGroups",
        lbs.security_groups,
        "Firewalls (NetworkPolicies): {account: {kubernetes: {namespace: [summary]}}}",
    ),
    _get(
        "/securityGroups/{account}",
        lbs.security_groups_of_account,
        "An account's firewalls: {kubernetes: {namespace: [summary]}}",
        Param("region", "only this namespace: {kubernetes: [summary]}"),
    ),
    _get(
        "/securityGroups/{account}/{cloudProvider}",
        lbs.security_groups_of_provider,
        "An account's firewalls: {namespace: [summary]}",
        Param("region", "only this namespace: [summary]"),
    ),
    _get(
        "/securityGroups/{account}/{cloudProvider}/{name}",
        lbs.security_groups_named,
        "The firewalls of a name: {namespace: [summary]}",
    ),
    _get(
        "/securityGroups/{account}/{cloudProvider}/{region}/{name}",
        lbs.security_group_details,
        "One firewall's details (rules)",
        _REGION,
        Param("name", 'URL-encoded "networkPolicy <name>"', where="path"),
        e404="Security group 'X' does not exist",
    ),
    _get(
        "/search",
        misc.search,
        "Search cache keys: [{totalMatches, pageNumber, pageSize, platform, query, results}]",
        Param("q", "matched as *q*, case-insensitively"),
        _SEARCH_TYPE,
        Param("platform", "kubernetes (another answers no results)"),
        Param("pageSize", "default 10000", type="integer"),
        Param("page", "from 1", type="integer"),
        e400="no type, or a bad page or pageSize",
    ),
    _get("/features/stages", misc.features_stages, "The stages Kubernetes offers"),
    _get("/projects/{project}/clusters", misc.project_clusters, "Always [] (no Front50 here)"),
    _get(
        "/applications/{app}/rawResources",
        misc.app_raw_resources,
        "Every object linked to the application (Deck's kubernetesRawResources)",
    ),
    Endpoint(
        "POST",
        "/cache/{cloudProvider}/{type}",
        misc.cache_refresh,
        "A no-op on-demand refresh (the cache follows the watches)",
        _TAG,
        responses={200: '{"cachedIdentifiersByType": {}}'},
    ),
    _get("/cache/{cloudProvider}/{type}", misc.pending_cache, "Pending on-demand refreshes: []"),
)
