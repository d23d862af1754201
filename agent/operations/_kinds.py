"""Kind resolution: a Spinnaker/Kubernetes kind token -> the API resource that serves it.

Operations work on every kind the cluster serves, whatever an account's ``kinds`` /
``omitKinds`` say (those only decide what is watched). A :class:`KindResolver` holds the
account's discovery result and answers ``resolve("deployment")``, ``resolve("Deployment",
api_version="apps/v1")``, ``resolve("rs")`` or ``resolve("certificate.cert-manager.io")``.
An unknown kind triggers one rediscovery (at most every ``min_rediscovery_seconds``), so a
CRD created a moment ago resolves; still unknown -> UnsupportedOperation naming the kind.

The matching itself (:func:`match_kind`) is sans-I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import trio

from .._errors import KubeError, KubeStatusError, WatchDecodeError
from ..kube import KubeTransport
from ..watch import (
    WELL_KNOWN_GROUPS,
    DiscoveryCache,
    DiscoveryResult,
    KindInfo,
    discover,
    lower_camel,
)
from ._errors import AgentUnavailable, KubernetesRefusal, UnsupportedOperation

__all__ = ["KindResolver", "Resource", "lower_camel", "match_kind"]

# Spinnaker's and kubectl's short names for the built-in kinds.
ALIASES: dict[str, str] = {
    "deploy": "deployment",
    "rs": "replicaset",
    "svc": "service",
    "sts": "statefulset",
    "ds": "daemonset",
    "cm": "configmap",
    "ns": "namespace",
    "po": "pod",
    "pvc": "persistentvolumeclaim",
    "sa": "serviceaccount",
    "ing": "ingress",
    "hpa": "horizontalpodautoscaler",
    "netpol": "networkpolicy",
    "cj": "cronjob",
    "crd": "customresourcedefinition",
}
MAX_CACHED_TOKENS = 4096
# When a kind name is served by several groups, these win (in this order).
PREFERRED_GROUPS: tuple[str, ...] = WELL_KNOWN_GROUPS

#: One API resource an operation talks to, with its URL paths: discovery's own type.
Resource = KindInfo


def match_kind(kinds: Sequence[KindInfo], token: str, *, api_version: str = "") -> Resource | None:
    """The resource for ``token`` (kind name, plural or alias, any case, optionally
    ``kind.group``), preferring ``api_version``'s group and version when given."""
    token = token.strip()
    if not token:
        return None
    name, _, group = token.partition(".")
    name = ALIASES.get(name.lower(), name.lower())
    want_group, _, want_version = api_version.rpartition("/")
    if api_version and "/" not in api_version:
        want_group, want_version = "", api_version
    candidates = [
        info
        for info in kinds
        if (info.kind.lower() == name or info.plural.lower() == name)
        and (not group or info.group.lower() == group.lower())
    ]
    if not candidates:
        return None
    if api_version:
        exact = [c for c in candidates if c.group == want_group]
        if exact:
            candidates = exact
            # A version the discovery did not prefer is still served: use the manifest's.
            if all(c.version != want_version for c in exact):
                return replace(exact[0], version=want_version)
            candidates = [c for c in exact if c.version == want_version]

    def rank(info: KindInfo) -> int:
        try:
            return PREFERRED_GROUPS.index(info.group)
        except ValueError:
            return len(PREFERRED_GROUPS)

    return min(candidates, key=rank)


class KindResolver:
    """Resolves kind tokens for one account, discovering on first use and on a miss.

    Raises UnsupportedOperation for a kind the cluster does not serve, KubernetesRefusal
    when discovery itself is refused, AgentUnavailable when the cluster cannot be reached.
    """

    def __init__(self, transport: KubeTransport, *, min_rediscovery_seconds: float = 5.0) -> None:
        self._transport = transport
        self._min_rediscovery = min_rediscovery_seconds
        self._kinds: tuple[KindInfo, ...] | None = None
        self._discovered_at = float("-inf")
        self._lock = trio.Lock()
        # (token, api_version) -> its resource, for this discovery: a deploy resolves its
        # kind on every run, and matching scans every kind of the cluster. Cleared with each
        # discovery; bounded by the distinct tokens operations name (capped, cleared at it).
        self._found: dict[tuple[str, str], Resource] = {}
        self._documents = DiscoveryCache()  # a rediscovery with nothing new is a 304

    async def _discover(self) -> None:
        try:
            result: DiscoveryResult = await discover(self._transport, self._documents)
        except KubeStatusError as exc:
            raise KubernetesRefusal.from_status(exc) from exc
        except (KubeError, WatchDecodeError) as exc:  # network, credentials, closed client
            raise AgentUnavailable(f"discovery failed: {exc}") from exc
        self._kinds = result.kinds
        self._found = {}
        self._discovered_at = trio.current_time()

    def invalidate(self) -> None:
        """Let the next miss rediscover at once (a CRD was just created or changed)."""
        self._discovered_at = float("-inf")

    async def resolve(self, token: str, *, api_version: str = "") -> Resource:
        key = (token, api_version)
        cached = self._found.get(key)
        if cached is not None:
            await trio.lowlevel.checkpoint()
            return cached
        async with self._lock:
            if self._kinds is None:
                await self._discover()
            assert self._kinds is not None
            found = match_kind(self._kinds, token, api_version=api_version)
            if found is None and trio.current_time() - self._discovered_at >= self._min_rediscovery:
                await self._discover()
                found = match_kind(self._kinds, token, api_version=api_version)
        if found is not None:
            if len(self._found) >= MAX_CACHED_TOKENS:
                self._found.clear()
            self._found[key] = found
            return found
        where = f" (apiVersion {api_version})" if api_version else ""
        raise UnsupportedOperation(
            f"kind {token!r}{where} is not served by this cluster", code="Invalid"
        )
