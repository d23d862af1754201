"""What the store indexes of each object Deck's views show, computed as it is ingested.

Every object of a UI kind (``_kinds``) gets one ``IndexEntry``: its Spinnaker kind (role),
its moniker's application and cluster, the object its controller ownerReference names (a
pod's ReplicaSet, a ReplicaSet's Deployment, a Job's CronJob) and the cache key Clouddriver's
search matches against. The store keeps them in a table of their own, in the
same transaction as the objects (``server/store/_views.py``), so that an application's
clusters, server groups and their pods are index lookups, not scans. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._kinds import spinnaker_kind_name
from .._moniker import moniker_of
from ._kinds import INSTANCES, role_of

__all__ = ["IndexEntry", "cache_key", "controller_owner", "index_entry", "index_entry_of"]

INFRASTRUCTURE_PREFIX = "kubernetes.v2:infrastructure:"


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """The indexed facts of one object ("" where it has none)."""

    role: str
    app: str
    cluster: str
    owner_kind: str  # lower-case Kubernetes kind of the controller, e.g. "replicaset"
    owner_name: str
    search_key: str  # cache_key(...)


def _part(text: str) -> str:
    # Clouddriver's Keys.createKeyFromParts: a ':' inside a part is written ';'.
    return text.replace(":", ";")


_TOKENS: dict[str, str] = {}  # kind -> lowerCamel token (the views' kinds: a handful)


def cache_key(kind: str, account: str, namespace: str, name: str) -> str:
    """Clouddriver's cache key of an object, ``kubernetes.v2:infrastructure:<kind>:<account>:
    <namespace>:<name>`` with the lowerCamel kind; what ``/search`` matches ``q`` against."""
    token = _TOKENS.get(kind)
    if token is None:
        token = spinnaker_kind_name(kind)
        if len(_TOKENS) < 256:
            _TOKENS[kind] = token
    if ":" in account or ":" in namespace or ":" in name:
        account, namespace, name = _part(account), _part(namespace), _part(name)
    return f"{INFRASTRUCTURE_PREFIX}{token}:{account}:{namespace}:{name}"


def controller_owner(refs: object) -> tuple[str, str]:
    """(Kubernetes kind, name) of the controller ownerReference (else the first one); ("", "")
    when there is none."""
    if not isinstance(refs, Sequence) or isinstance(refs, str | bytes):
        return "", ""
    chosen: Mapping[str, Any] | None = None
    for ref in refs:
        if not isinstance(ref, Mapping):
            continue
        if ref.get("controller") is True:
            chosen = ref
            break
        if chosen is None:
            chosen = ref
    if chosen is None:
        return "", ""
    kind, name = chosen.get("kind"), chosen.get("name")
    if not isinstance(kind, str) or not isinstance(name, str):
        return "", ""
    return kind, name


def index_entry(
    account: str,
    group: str,
    kind: str,
    namespace: str,
    name: str,
    annotations: Mapping[str, Any] | None,
    owner_references: object,
) -> IndexEntry | None:
    """The entry of an object, from its coordinates and metadata; None for a kind Deck's
    views do not show (nothing is indexed for it)."""
    owner_kind, owner_name = controller_owner(owner_references)
    return index_entry_of(account, group, kind, namespace, name, annotations, owner_kind,
                          owner_name)  # fmt: skip


def index_entry_of(
    account: str,
    group: str,
    kind: str,
    namespace: str,
    name: str,
    annotations: Mapping[str, Any] | None,
    owner_kind: str,
    owner_name: str,
) -> IndexEntry | None:
    """``index_entry`` with the controller already picked (the store's ingest path)."""
    role = role_of(group, kind)
    if role is None:
        return None
    if role == INSTANCES:
        # A pod belongs to no application or cluster (Clouddriver links neither); leaving its
        # moniker out spares the name parsing on the busiest kind's every status change.
        app = cluster = ""
    else:
        moniker = moniker_of(kind, name, annotations)
        app, cluster = moniker.app or "", moniker.cluster or ""
    return IndexEntry(
        role=role,
        app=app,
        cluster=cluster,
        owner_kind=owner_kind.lower(),
        owner_name=owner_name,
        search_key=cache_key(kind, account, namespace, name),
    )
