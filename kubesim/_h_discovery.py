"""Discovery: /api, /apis, /api/v1, /apis/{group}[/{version}], aggregated discovery, /version.

Documents are built from the registry and cached until its ``generation`` changes (a CRD
appeared or went away), so discovery costs one dict lookup per request. Aggregated documents
carry an ``ETag`` and a request whose ``If-None-Match`` names it gets 304 Not Modified with no
body, as kube-apiserver's aggregated discovery handler answers (ServeHTTPWithETag).
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from kubesim._cluster import Cluster
from kubesim._http import JSON, Request, Send, respond
from kubesim._resources import ResourceType
from kubesim._status import path_not_found

__all__ = ["DiscoveryDocs", "serve_discovery"]

_encode = msgspec.json.Encoder().encode
_AGGREGATED = {"v2": "apidiscovery.k8s.io/v2", "v2beta1": "apidiscovery.k8s.io/v2beta1"}
_SUB_VERBS = ["get", "patch", "update"]
_READ_ONLY_SUBRESOURCES = {"log": ["get"]}


def _resource_entry(rtype: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": rtype.plural,
        "singularName": rtype.singular_name,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": list(rtype.verbs),
    }
    if rtype.short_names:
        entry["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        entry["categories"] = list(rtype.categories)
    out = [entry]
    for sub in rtype.subresources:
        sub_entry: dict[str, Any] = {
            "name": f"{rtype.plural}/{sub}",
            "singularName": "",
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": _READ_ONLY_SUBRESOURCES.get(sub, _SUB_VERBS),
        }
        if sub == "scale":
            sub_entry.update(group="autoscaling", version="v1", kind="Scale")
        out.append(sub_entry)
    return out


def _aggregated_resource(rtype: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": rtype.plural,
        "responseKind": {"group": rtype.group, "version": rtype.version, "kind": rtype.kind},
        "scope": "Namespaced" if rtype.namespaced else "Cluster",
        "singularResource": rtype.singular_name,
        "verbs": list(rtype.verbs),
    }
    if rtype.short_names:
        entry["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        entry["categories"] = list(rtype.categories)
    subs = []
    for sub in rtype.subresources:
        kind = (
            {"group": "autoscaling", "version": "v1", "kind": "Scale"}
            if sub == "scale"
            else {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        )
        verbs = _READ_ONLY_SUBRESOURCES.get(sub, _SUB_VERBS)
        subs.append({"subresource": sub, "responseKind": kind, "verbs": verbs})
    if subs:
        entry["subresources"] = subs
    return entry


class DiscoveryDocs:
    """The discovery documents of one cluster, cached per registry generation."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._cache: dict[Any, bytes] = {}
        self._generation = -1
        # (core, version) -> (the document, its quoted ETag); recomputed when it is rebuilt
        self._etags: dict[tuple[bool, str], tuple[bytes, str]] = {}

    def _cached(self, key: Any, build: Any) -> bytes:
        if self._generation != self._cluster.registry.generation:
            self._cache.clear()
            self._generation = self._cluster.registry.generation
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = _encode(build())
        return found

    def api_versions(self, server_address: str) -> bytes:
        return self._cached(
            ("api", server_address),
            lambda: {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
                ],
            },
        )

    def _group(self, name: str, versions: list[str]) -> dict[str, Any]:
        gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}

    def api_groups(self) -> bytes:
        def build() -> dict[str, Any]:
            groups = self._cluster.registry.group_versions()
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [self._group(g, v) for g, v in groups.items() if g],
            }

        return self._cached("apis", build)

    def api_group(self, group: str) -> bytes | None:
        versions = self._cluster.registry.group_versions().get(group)
        if not group or not versions:
            return None
        return self._cached(
            ("group", group),
            lambda: {"kind": "APIGroup", "apiVersion": "v1", **self._group(group, versions)},
        )

    def resource_list(self, group: str, version: str) -> bytes | None:
        types = self._cluster.registry.in_group_version(group, version)
        if not types:
            return None

        def build() -> dict[str, Any]:
            resources: list[dict[str, Any]] = []
            for rtype in types:
                resources.extend(_resource_entry(rtype))
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": resources,
            }

        return self._cached(("resources", group, version), build)

    def aggregated(self, core: bool, version: str) -> bytes:
        def build() -> dict[str, Any]:
            items = []
            for group, versions in self._cluster.registry.group_versions().items():
                if (group == "") != core:
                    continue
                items.append(
                    {
                        "metadata": {"name": group, "creationTimestamp": None},
                        "versions": [
                            {
                                "version": v,
                                "resources": [
                                    _aggregated_resource(t)
                                    for t in self._cluster.registry.in_group_version(group, v)
                                ],
                                "freshness": "Current",
                            }
                            for v in versions
                        ],
                    }
                )
            return {
                "kind": "APIGroupDiscoveryList",
                "apiVersion": _AGGREGATED[version],
                "metadata": {},
                "items": items,
            }

        return self._cached(("aggregated", core, version), build)

    def aggregated_etag(self, core: bool, version: str) -> tuple[bytes, str]:
        """The aggregated document and its ETag (a quoted hash of its bytes)."""
        body = self.aggregated(core, version)
        known = self._etags.get((core, version))
        if known is None or known[0] is not body:
            known = self._etags[core, version] = (body, f'"{hashlib.sha256(body).hexdigest()}"')
        return known


def _aggregated_version(accept: str | None) -> str | None:
    """The aggregated discovery version the client asked for first, if any."""
    for media in (accept or "").split(","):
        params = {}
        for part in media.split(";")[1:]:
            key, _, value = part.partition("=")
            params[key.strip().lower()] = value.strip()
        if params.get("g") == "apidiscovery.k8s.io" and params.get("as") == "APIGroupDiscoveryList":
            if params.get("v") in _AGGREGATED:
                return params["v"]
            continue
        if media.strip():
            return None
    return None


async def serve_discovery(
    request: Request, send: Send, docs: DiscoveryDocs, server_address: str
) -> None:
    """Answer a discovery path; raises ApiError 404 for unknown groups and versions."""
    parts = [p for p in request.path.split("/") if p]
    if parts in (["api"], ["apis"]):
        version = _aggregated_version(request.headers.get("accept"))
        if version is not None:
            content_type = (
                f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
            )
            body, etag = docs.aggregated_etag(parts == ["api"], version)
            if request.headers.get("if-none-match") == etag:
                await respond(send, 304, b"", content_type, [("etag", etag)])
            else:
                await respond(send, 200, body, content_type, [("etag", etag)])
            return
        body = docs.api_versions(server_address) if parts == ["api"] else docs.api_groups()
        await respond(send, 200, body, JSON)
        return
    found: bytes | None = None
    if len(parts) == 2 and parts[0] == "api":
        found = docs.resource_list("", parts[1])
    elif len(parts) == 2 and parts[0] == "apis":
        found = docs.api_group(parts[1])
    elif len(parts) == 3 and parts[0] == "apis":
        found = docs.resource_list(parts[1], parts[2])
    if found is None:
        raise path_not_found(request.path)
    await respond(send, 200, found, JSON)
