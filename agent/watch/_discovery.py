"""Which kinds an account watches: discovery, the account's filters, and rediscovery diffs.

Theory of operation: ``discover()`` asks ``/api`` and ``/apis`` for aggregated discovery
(apidiscovery.k8s.io v2, then v2beta1) and gets every group, version and resource in two
requests; an API server that does not offer it answers with the legacy documents
(APIVersions, APIGroupList) and each group version is then read on its own (a failing group
version, such as an unavailable aggregated API, is skipped and reported). Resources without
both ``list`` and ``watch`` verbs and subresources are dropped. Each resource is taken from
the most preferred version of its group that serves it (as kubectl's ``api-resources``).

Rediscovery is cheap when nothing changed: an aggregated document's ``ETag`` is kept
(``DiscoveryCache``, one per account) and sent back as ``If-None-Match``; the API server
answers 304 Not Modified with no body (kube-apiserver's aggregated discovery handler does, as
kubectl's disk cache relies on), and the kinds parsed last time are used again. At 1,000
accounts rediscovered every 2 minutes that is 16 requests a second either way, but no
document is sent, decrypted or parsed.

``select_targets()`` applies the account's filters (sans-I/O) and gives the watch targets:
one per kind cluster-wide, or one per kind per namespace when ``namespaces`` is set.
``diff_targets()`` compares two selections so that a periodic rediscovery starts new kinds
and stops removed ones.

Filter decisions where Armory's documentation is silent:
- ``namespaces`` set: namespaced kinds get one watch per listed namespace; cluster-scoped
  kinds are still watched cluster-wide unless ``onlyNamespacedResources`` is true (a 403 on
  them is then reported as that kind being unavailable, nothing worse).
- ``omitNamespaces`` drops those namespaces from ``namespaces``; for cluster-wide watches the
  reflector drops their events (``WatchTarget.omit_namespaces``).
- ``customResourceDefinitions[]`` (``Kind.group``) are watched even when ``kinds`` would not
  select them and even under ``onlyNamespacedResources``, but only once discovery serves
  them (the URL needs the served version and plural); ``omitKinds`` still wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec

from .._errors import KubeConnectionError, KubeStatusError, WatchDecodeError
from ..config import AccountConfig
from ..kube import KubeTransport
from ._listing import check_status, read_body

__all__ = [
    "AGGREGATED_ACCEPT",
    "WELL_KNOWN_GROUPS",
    "DiscoveryCache",
    "DiscoveryResult",
    "KindFilter",
    "KindInfo",
    "TargetDiff",
    "WatchTarget",
    "diff_targets",
    "discover",
    "lower_camel",
    "parse_aggregated",
    "parse_resource_list",
    "select_targets",
]

AGGREGATED_ACCEPT: Final = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)
_DISCOVERY_BODY_LIMIT: Final = 32 * 2**20
_WATCHABLE: Final = frozenset({"list", "watch"})
_T = TypeVar("_T")


#: The API groups whose kinds Spinnaker names in lowerCamel without a group (with every
#: ``*.k8s.io`` group); also the order operations prefer when several groups serve a name.
WELL_KNOWN_GROUPS: Final = ("", "apps", "batch", "networking.k8s.io", "autoscaling")


@dataclass(frozen=True, slots=True)
class KindInfo:
    """One API resource as discovery reports it: what the watches and the operations use."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def spinnaker_kind(self) -> str:
        """The kind as Spinnaker writes it in names: ``replicaSet``, or ``Kind.group`` for
        kinds outside the well-known groups."""
        if self.group in WELL_KNOWN_GROUPS or self.group.endswith(".k8s.io"):
            return lower_camel(self.kind)
        return f"{self.kind}.{self.group}"

    def collection_path(self, namespace: str = "") -> str:
        """The URL path that lists (or watches) this resource, in one namespace when given
        (ignored for a cluster-scoped resource)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"

    def object_path(self, namespace: str, name: str, subresource: str = "") -> str:
        """The URL path of one object (or of its ``subresource``)."""
        path = f"{self.collection_path(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path


def lower_camel(kind: str) -> str:
    """``ReplicaSet`` -> ``replicaSet`` (Spinnaker's kind names)."""
    return kind[:1].lower() + kind[1:]


@dataclass(frozen=True, slots=True)
class WatchTarget:
    """What one reflector watches: a kind, cluster-wide (``namespace == ""``) or in one namespace.

    ``omit_namespaces`` only matters cluster-wide: events from those namespaces are dropped.
    """

    kind: KindInfo
    namespace: str = ""
    omit_namespaces: frozenset[str] = frozenset()

    @property
    def scope(self) -> str:
        """The sync scope: ``""`` for cluster-wide, else the namespace."""
        return self.namespace

    @property
    def path(self) -> str:
        return self.kind.collection_path(self.namespace)

    def describe(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.kind.api_version} {self.kind.kind}{where}"


@dataclass(frozen=True, slots=True)
class DiscoveryResult:
    """Every watchable kind, plus the group versions that could not be read (and why)."""

    kinds: tuple[KindInfo, ...]
    failed: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class DiscoveryCache:
    """The last aggregated document of each root (``/api``, ``/apis``) that came with an
    ETag: root -> (etag, the kinds parsed from it). One per account; only ``discover`` uses
    it. Bounded: two entries."""

    entries: dict[str, tuple[str, tuple[KindInfo, ...]]] = field(default_factory=dict)
    #: answers 304 Not Modified so far (tests, metrics)
    not_modified: int = 0


# --- documents --------------------------------------------------------------------------


class _Named(msgspec.Struct):
    name: str = ""


class _GVK(msgspec.Struct):
    group: str = ""
    version: str = ""
    kind: str = ""


class _AggResource(msgspec.Struct):
    resource: str = ""
    responseKind: _GVK | None = None
    scope: str = ""
    verbs: list[str] = []


class _AggVersion(msgspec.Struct):
    version: str = ""
    resources: list[_AggResource] = []
    freshness: str = ""


class _AggGroup(msgspec.Struct):
    metadata: _Named | None = None
    versions: list[_AggVersion] = []


class _Document(msgspec.Struct):
    """The fields of every discovery document the agent reads; ``kind`` says which it is."""

    kind: str = ""
    items: list[_AggGroup] = []  # APIGroupDiscoveryList
    versions: list[str] = []  # APIVersions (/api, legacy)
    groups: list[_APIGroup] = []  # APIGroupList (/apis, legacy)


class _GroupVersion(msgspec.Struct):
    groupVersion: str = ""
    version: str = ""


class _APIGroup(msgspec.Struct):
    name: str = ""
    versions: list[_GroupVersion] = []
    preferredVersion: _GroupVersion | None = None


class _APIResource(msgspec.Struct):
    name: str = ""
    namespaced: bool = False
    kind: str = ""
    verbs: list[str] = []


class _APIResourceList(msgspec.Struct):
    groupVersion: str = ""
    resources: list[_APIResource] = []


_DOCUMENT = msgspec.json.Decoder(_Document)
_RESOURCE_LIST = msgspec.json.Decoder(_APIResourceList)


def _watchable(verbs: Iterable[str]) -> bool:
    return _WATCHABLE.issubset(verbs)


def parse_aggregated(body: bytes, *, where: str = "aggregated discovery") -> list[KindInfo]:
    """Every watchable resource of an APIGroupDiscoveryList, each from its preferred version.

    Versions are listed most preferred first; stale versions (an aggregated API that is
    down) are skipped. Raises WatchDecodeError.
    """
    return _aggregated_kinds(_decode(_DOCUMENT, body, where))


def _aggregated_kinds(document: _Document) -> list[KindInfo]:
    found: list[KindInfo] = []
    for group in document.items:
        group_name = group.metadata.name if group.metadata else ""
        per_version: list[list[KindInfo]] = []
        for version in group.versions:
            if version.freshness == "Stale":
                continue
            kinds = []
            for resource in version.resources:
                if "/" in resource.resource or not _watchable(resource.verbs):
                    continue
                kind = resource.responseKind.kind if resource.responseKind else ""
                if not kind:
                    continue
                kinds.append(
                    KindInfo(
                        group_name,
                        version.version,
                        kind,
                        resource.resource,
                        resource.scope == "Namespaced",
                    )
                )
            per_version.append(kinds)
        found.extend(_prefer(per_version))
    return found


def parse_resource_list(body: bytes, *, group: str, version: str) -> list[KindInfo]:
    """Every watchable resource of one legacy APIResourceList. Raises WatchDecodeError."""
    document = _decode(_RESOURCE_LIST, body, f"discovery of {group or 'core'}/{version}")
    return [
        KindInfo(group, version, resource.kind, resource.name, resource.namespaced)
        for resource in document.resources
        if "/" not in resource.name and resource.kind and _watchable(resource.verbs)
    ]


def _prefer(per_version: Sequence[Sequence[KindInfo]]) -> list[KindInfo]:
    """Keep each resource from the first (most preferred) version that serves it."""
    seen: set[str] = set()
    kept: list[KindInfo] = []
    for kinds in per_version:
        for info in kinds:
            if info.plural not in seen:
                seen.add(info.plural)
                kept.append(info)
    return kept


def _decode(decoder: msgspec.json.Decoder[_T], body: bytes, where: str) -> _T:
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise WatchDecodeError(f"{where}: not a discovery document: {exc}") from exc


async def _get(transport: KubeTransport, path: str, accept: str) -> bytes:
    async with transport.stream("GET", path, headers={"Accept": accept}) as response:
        await check_status(response, method="GET", path=path)
        return await read_body(response, limit=_DISCOVERY_BODY_LIMIT, what=f"GET {path}")


async def _get_root(
    transport: KubeTransport, root: str, cache: DiscoveryCache
) -> tuple[KindInfo, ...] | _Document:
    """``root``'s aggregated kinds (from the cache on a 304), or the legacy document."""
    headers = {"Accept": AGGREGATED_ACCEPT}
    cached = cache.entries.get(root)
    if cached is not None:
        headers["If-None-Match"] = cached[0]
    async with transport.stream("GET", root, headers=headers) as response:
        if response.status_code == 304 and cached is not None:
            cache.not_modified += 1
            return cached[1]
        await check_status(response, method="GET", path=root)
        body = await read_body(response, limit=_DISCOVERY_BODY_LIMIT, what=f"GET {root}")
        etag = response.headers.get("etag", "")
    document = _decode(_DOCUMENT, body, f"GET {root}")
    if document.kind != "APIGroupDiscoveryList":
        cache.entries.pop(root, None)
        return document
    kinds = tuple(_aggregated_kinds(document))
    if etag:
        cache.entries[root] = (etag, kinds)
    else:
        cache.entries.pop(root, None)
    return kinds


async def discover(
    transport: KubeTransport, cache: DiscoveryCache | None = None
) -> DiscoveryResult:
    """Discover every watchable kind of the API server behind ``transport``.

    ``cache`` (the account's) makes an unchanged aggregated document a 304. Raises
    KubeStatusError / KubeConnectionError when ``/api`` or ``/apis`` cannot be read and
    WatchDecodeError for a malformed document; a single legacy group version that fails is
    listed in ``DiscoveryResult.failed`` instead.
    """
    cache = cache if cache is not None else DiscoveryCache()
    kinds: list[KindInfo] = []
    failed: list[tuple[str, str]] = []
    for root in ("/api", "/apis"):
        found = await _get_root(transport, root, cache)
        if isinstance(found, tuple):
            kinds.extend(found)
            continue
        document = found
        if root == "/api":
            versions = [("", version) for version in document.versions[:1]]
            groups = [versions]
        else:
            groups = [_group_versions(group) for group in document.groups]
        for versions in groups:
            per_version: list[list[KindInfo]] = []
            for group, version in versions:
                path = f"/apis/{group}/{version}" if group else f"/api/{version}"
                try:
                    body = await _get(transport, path, "application/json")
                    per_version.append(parse_resource_list(body, group=group, version=version))
                except (KubeStatusError, KubeConnectionError, WatchDecodeError) as exc:
                    failed.append((path, str(exc)))
            kinds.extend(_prefer(per_version))
    return DiscoveryResult(tuple(kinds), tuple(failed))


def _group_versions(group: _APIGroup) -> list[tuple[str, str]]:
    """A legacy group's versions, the preferred one first."""
    versions = [v.version for v in group.versions if v.version]
    preferred = group.preferredVersion.version if group.preferredVersion else ""
    if preferred in versions:
        versions.remove(preferred)
        versions.insert(0, preferred)
    return [(group.name, version) for version in versions]


# --- filters ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KindFilter:
    """An account's kind and namespace filters, normalised (kind names lower-cased)."""

    kinds: frozenset[str] = frozenset()
    omit_kinds: frozenset[str] = frozenset()
    namespaces: tuple[str, ...] = ()
    omit_namespaces: frozenset[str] = frozenset()
    only_namespaced_resources: bool = False
    #: customResourceDefinitions[]: (kind lower-cased, group lower-cased) -> namespaced
    custom_resources: tuple[tuple[str, str, bool], ...] = ()

    @classmethod
    def from_account(cls, account: AccountConfig) -> KindFilter:
        crds = []
        for crd in account.custom_resource_definitions:
            kind, _, group = crd.kind.partition(".")
            crds.append((kind.lower(), group.lower(), crd.scope.lower() != "cluster"))
        omit = frozenset(account.omit_namespaces)
        return cls(
            kinds=frozenset(k.lower() for k in account.kinds),
            omit_kinds=frozenset(k.lower() for k in account.omit_kinds),
            namespaces=tuple(ns for ns in dict.fromkeys(account.namespaces) if ns not in omit),
            omit_namespaces=omit,
            only_namespaced_resources=account.only_namespaced_resources,
            custom_resources=tuple(crds),
        )

    def _declared_crd(self, info: KindInfo) -> bool:
        kind, group = info.kind.lower(), info.group.lower()
        return any(k == kind and g == group for k, g, _ in self.custom_resources)

    def wants(self, info: KindInfo) -> bool:
        """Whether this kind is watched at all (before namespaces are applied)."""
        name = info.kind.lower()
        if name in self.omit_kinds:
            return False
        if self._declared_crd(info):
            return True
        if self.kinds and name not in self.kinds:
            return False
        return not (self.only_namespaced_resources and not info.namespaced)


def select_targets(kinds: Iterable[KindInfo], kind_filter: KindFilter) -> list[WatchTarget]:
    """The watch targets for an account: its filters applied to what discovery found."""
    targets: list[WatchTarget] = []
    for info in kinds:
        if not kind_filter.wants(info):
            continue
        if info.namespaced and kind_filter.namespaces:
            targets.extend(WatchTarget(info, ns) for ns in kind_filter.namespaces)
        elif info.namespaced:
            targets.append(WatchTarget(info, "", kind_filter.omit_namespaces))
        else:
            targets.append(WatchTarget(info))
    return targets


@dataclass(frozen=True, slots=True)
class TargetDiff:
    """What a rediscovery changes: targets to start and targets to stop."""

    added: tuple[WatchTarget, ...]
    removed: tuple[WatchTarget, ...]


def diff_targets(old: Iterable[WatchTarget], new: Iterable[WatchTarget]) -> TargetDiff:
    """Compare two selections, keeping ``new``'s order for the added ones.

    A kind whose preferred version changed shows as one removed and one added target.
    """
    old_set = set(old)
    new_list = list(dict.fromkeys(new))
    new_set = set(new_list)
    return TargetDiff(
        added=tuple(t for t in new_list if t not in old_set),
        removed=tuple(t for t in old_set if t not in new_set),
    )
