"""Which shard of a sharded account runs an operation (docs/sharding.md). Pure.

An operation goes to the shard that owns what it writes: the kind and namespace of its first
target any shard owns (a Pod's delete to the Pods' shard, a Deployment's deploy to the shard
of the rest). That shard's agent watches the object, so the read-your-writes wait sees it
arrive from the same stream, and a shard whose agent is down stops only the operations on
what it owns. An operation writing something no shard owns is refused before it runs, as
an account's kind and namespace rules refuse one outside them: it would never be cached.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from .._kinds import resolve_kind
from .._registry import Registry
from .._shards import owner, unowned
from ..store import AccountRecord
from ._describe import Description
from ._rules import targets

__all__ = ["route", "shard_errors"]


def route(registry: Registry, account: str, operation: str, payload_json: str) -> str:
    """The registry's name of what runs the operation: ``account`` itself, or one shard of
    it (``account/shard``). An account whole, or one whose payload cannot be read, is its
    own name (its primary lookup then finds none, and the operation says so)."""
    units = _units(registry, account)
    if not units:
        return account
    try:
        payload = msgspec.json.decode(payload_json)
    except msgspec.DecodeError:
        return account
    if not isinstance(payload, dict):
        return account
    found = owner(units, _canonical(targets(operation, payload)))
    return found.name if found is not None else account


def shard_errors(registry: Registry, d: Description) -> list[str]:
    """The refusal of ``d`` when its account is sharded and no shard owns one of its
    targets (empty: allowed, or not sharded)."""
    units = _units(registry, d.account)
    if not units:
        return []
    problem = unowned(units, _canonical(targets(d.spec.name, d.payload)))
    return [f"account {d.account!r}: {problem}"] if problem else []


def _units(registry: Registry, account: str) -> Sequence[AccountRecord]:
    return [] if registry.get(account) is not None else registry.units(account)


def _canonical(found: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Targets with their kinds as a shard names them: the kind, no group, any alias
    (``deploy``) resolved."""
    return [(resolve_kind(kind).kind, namespace) for kind, namespace in found]
