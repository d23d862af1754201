"""Shards: one account split across agents by kind or namespace (docs/sharding.md). Pure.

Theory of operation. A shard is a part of one account's cluster (``ShardSpec``: some kinds or
all but some, in some namespaces or in all of them and the cluster scope) that one agent
declares with ``shard:`` in its account config; the agent sends it in the account's
properties (``properties["shard"]``). The registry keeps each shard as an account of its own
under the *unit* name ``account/shard``: its own queue of sessions (one PRIMARY, STANDBYs),
lease, ORPHANED state and grace period, so one shard's agent dying orphans that shard only.
The objects stay under the account's name: every shard's sync brackets are of its own kinds
and namespaces, so one shard's SYNC_END never sweeps another's objects, which is why shards
of one account must not overlap (``overlap`` says where two do, and the registry refuses the
second). The REST API sees one account per name (``fold``), its shards listed; an operation
goes to the shard that owns the kind and namespace it writes (``owner``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .store import AccountRecord, AccountState, ShardScope

__all__ = [
    "SEPARATOR",
    "ShardSpec",
    "account_of",
    "fold",
    "folded",
    "owner",
    "refusal",
    "shard_of",
    "spec_of",
    "unit_name",
    "unowned",
]

#: Between an account's name and its shard's in a unit name; account names may not hold it.
SEPARATOR = "/"

# The properties that say what an agent watches: a shard's are its own, so the account seen
# whole (``fold``) drops them and lists its shards instead.
_WATCH_PROPERTIES = (
    "kinds",
    "omit_kinds",
    "omitKinds",
    "namespaces",
    "omit_namespaces",
    "omitNamespaces",
    "only_namespaced_resources",
    "onlyNamespacedResources",
    "shard",
)

# A folded account's status: the best of its shards' (one served shard keeps it ACTIVE).
_STATUS_ORDER = (
    AccountState.ACTIVE,
    AccountState.ACTIVATING,
    AccountState.ORPHANED,
    AccountState.FAILED,
    AccountState.TO_MIGRATE,
    AccountState.INACTIVE,
)


@dataclass(frozen=True, slots=True)
class ShardSpec(ShardScope):
    """What one shard owns (the store's ShardScope), read from an agent's claim."""

    @classmethod
    def of(cls, raw: object) -> ShardSpec:
        """The spec of ``properties["shard"]`` (snake_case as the agent sends it, or
        camelCase); ValueError says what is wrong."""
        if not isinstance(raw, Mapping):
            raise ValueError("shard must be an object with a name")
        name = raw.get("name")
        if not isinstance(name, str) or not name or SEPARATOR in name or len(name) > 63:
            raise ValueError(f"shard name {name!r} must be 1..63 characters without '/'")

        def names(*keys: str) -> frozenset[str]:
            for key in keys:
                value = raw.get(key)
                if value is None:
                    continue
                if not isinstance(value, list | tuple) or not all(
                    isinstance(v, str) for v in value
                ):
                    raise ValueError(f"shard {name!r}: {key} must be a list of names")
                return frozenset(value)
            return frozenset()

        spec = cls(
            name=name,
            kinds=frozenset(k.lower() for k in names("kinds")),
            omit_kinds=frozenset(k.lower() for k in names("omit_kinds", "omitKinds")),
            namespaces=names("namespaces"),
        )
        if spec.kinds and spec.omit_kinds:
            raise ValueError(f"shard {name!r}: kinds and omitKinds are exclusive")
        return spec

    def overlap(self, other: ShardSpec) -> str:
        """Where this shard and ``other`` both own objects, for people; "" when nowhere."""
        if self.kinds and other.kinds:
            kinds = self.kinds & other.kinds
            if not kinds:
                return ""
            where_kinds = "kinds " + ", ".join(sorted(kinds))
        elif self.kinds or other.kinds:
            finite, cofinite = (self, other) if self.kinds else (other, self)
            kinds = finite.kinds - cofinite.omit_kinds
            if not kinds:
                return ""
            where_kinds = "kinds " + ", ".join(sorted(kinds))
        else:
            where_kinds = "every kind neither omits"
        if self.namespaces and other.namespaces:
            namespaces = self.namespaces & other.namespaces
            if not namespaces:
                return ""
            where_ns = "namespaces " + ", ".join(sorted(namespaces))
        elif self.namespaces or other.namespaces:
            where_ns = "namespaces " + ", ".join(sorted(self.namespaces or other.namespaces))
        else:
            where_ns = "every namespace"
        return f"{where_kinds} in {where_ns}"

    def describe(self) -> str:
        """What it owns, for people: ``kinds Pod in every namespace``."""
        if self.kinds:
            kinds = "kinds " + ", ".join(sorted(self.kinds))
        elif self.omit_kinds:
            kinds = "every kind but " + ", ".join(sorted(self.omit_kinds))
        else:
            kinds = "every kind"
        where = (
            "namespaces " + ", ".join(sorted(self.namespaces))
            if self.namespaces
            else "every namespace and the cluster scope"
        )
        return f"{kinds} in {where}"

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kinds": sorted(self.kinds),
            "omitKinds": sorted(self.omit_kinds),
            "namespaces": sorted(self.namespaces),
        }


def unit_name(account: str, shard: str) -> str:
    """The registry's name of ``account``'s shard ``shard`` ("": the account whole)."""
    return f"{account}{SEPARATOR}{shard}" if shard else account


def account_of(name: str) -> str:
    """The account a registry name belongs to (itself when it names no shard)."""
    return name.split(SEPARATOR, 1)[0]


def shard_of(name: str) -> str:
    """The shard a registry name names ("" for an account whole)."""
    return name.split(SEPARATOR, 1)[1] if SEPARATOR in name else ""


def spec_of(record: AccountRecord) -> ShardSpec | None:
    """The shard a registry record is (None: an account whole, or a spec gone bad)."""
    if SEPARATOR not in record.name:
        return None
    try:
        return ShardSpec.of(record.properties.get("shard"))
    except ValueError:
        return ShardSpec(shard_of(record.name))  # owns everything: never routed to wrongly


def fold(records: Iterable[AccountRecord]) -> list[AccountRecord]:
    """``records`` (the registry's, by name) with the shards of each account folded into one
    record of the account's name: the best status of its shards, their connections (each
    naming its shard), and ``properties["shards"]`` listing each shard, what it owns, its
    status and its agents. Ordered by name."""
    whole: dict[str, AccountRecord] = {}
    shards: dict[str, list[AccountRecord]] = {}
    for record in records:
        if SEPARATOR in record.name:
            shards.setdefault(account_of(record.name), []).append(record)
        else:
            whole[record.name] = record
    for name, units in shards.items():
        if name not in whole:  # the registry refuses a whole account beside its shards
            whole[name] = folded(name, units)
    return [whole[n] for n in sorted(whole)]


def folded(name: str, units: Sequence[AccountRecord]) -> AccountRecord:
    """One account seen whole from its shards' records (see ``fold``)."""
    units = sorted(units, key=lambda r: r.name)
    first = min(units, key=_rank)
    properties = {k: v for k, v in first.properties.items() if k not in _WATCH_PROPERTIES}
    properties["shards"] = [_shard_json(r) for r in units]
    connections = [{**c, "shard": shard_of(r.name)} for r in units for c in r.connections]
    orphaned = [r.orphaned_at_ms for r in units if r.orphaned_at_ms is not None]
    return replace(
        first,
        name=name,
        properties=properties,
        connections=connections,
        last_updated_ms=max(r.last_updated_ms for r in units),
        orphaned_at_ms=min(orphaned) if first.status is AccountState.ORPHANED else None,
    )


def _rank(record: AccountRecord) -> int:
    """Where a shard's status ranks for the account's (any other state after these)."""
    order = _STATUS_ORDER
    return order.index(record.status) if record.status in order else len(order)


def _shard_json(record: AccountRecord) -> dict[str, Any]:
    spec = spec_of(record) or ShardSpec(shard_of(record.name))
    primary = next((c for c in record.connections if c.get("role") == "PRIMARY"), None)
    return {
        **spec.as_json(),
        "owns": spec.describe(),
        "status": str(record.status),
        "orphanedAt": record.orphaned_at_ms,
        "primary": primary.get("agentId") if primary else None,
        "standbys": [c.get("agentId") for c in record.connections if c.get("role") == "STANDBY"],
    }


def owner(
    units: Sequence[AccountRecord], targets: Iterable[tuple[str, str]]
) -> AccountRecord | None:
    """The shard (of one account's ``units``) an operation writing ``targets`` ((kind,
    namespace) pairs, in order) goes to: the owner of its first target that any shard owns.
    None: no shard owns any of them."""
    specs = [(r, spec_of(r)) for r in sorted(units, key=lambda r: r.name)]
    for kind, namespace in targets:
        for record, spec in specs:
            if spec is not None and spec.owns(kind, namespace):
                return record
    return None


def unowned(units: Sequence[AccountRecord], targets: Iterable[tuple[str, str]]) -> str:
    """Why an operation writing ``targets`` cannot go to any of an account's shards ("" when
    every target has an owner): a kind no shard watches would be written and never cached."""
    specs = [s for s in (spec_of(r) for r in units) if s is not None]
    for kind, namespace in targets:
        if not any(s.owns(kind, namespace) for s in specs):
            where = f"namespace {namespace!r}" if namespace else "the cluster scope"
            owned = "; ".join(f"{s.name}: {s.describe()}" for s in sorted(specs, key=_name))
            return (
                f"no shard of the account owns kind {kind} in {where} (shards: {owned}); "
                "an object no shard watches would never be cached"
            )
    return ""


def _name(spec: ShardSpec) -> str:
    return spec.name


def refusal(
    name: str,
    spec: ShardSpec | None,
    siblings: Iterable[AccountRecord],
    whole: AccountRecord | None,
    *,
    served: bool,
) -> str:
    """Why the claim of registry name ``name`` (``spec``: the shard it declares, None: the
    account whole) is REJECTED next to what the registry holds; "" when it is not.

    ``siblings``: the records of the account's other shards; ``whole``: the record of the
    account whole (for a shard claim), or of this very shard (for a shard whose spec may
    have changed); ``served``: whether sessions serve that record now."""
    account = account_of(name)
    siblings = [s for s in siblings if s.name != name]
    if spec is None:
        if siblings:
            shards = ", ".join(shard_of(s.name) for s in siblings)
            return (
                f"account {account!r} is served in shards ({shards}); an agent cannot serve "
                "it whole beside them: give its config a shard:, or remove the shards first"
            )
        return ""
    if whole is not None and whole.name == account:
        return (
            f"account {account!r} is registered whole ({whole.status}); it cannot be served "
            "in shards until that record is gone (DELETE /armory/accounts/"
            f"{account}, or the end of its orphan grace period)"
        )
    if whole is not None and served:
        held = spec_of(whole)
        if held is not None and held != spec:
            return (
                f"shard {spec.name!r} of account {account!r} is served with {held.describe()}; "
                f"this agent declares it with {spec.describe()}: give all the agents of one "
                "shard the same shard: config"
            )
    for sibling in sorted(siblings, key=lambda r: r.name):
        other = spec_of(sibling)
        if other is None:
            continue
        where = spec.overlap(other)
        if where:
            agents = ", ".join(str(c.get("agentId")) for c in sibling.connections) or "none now"
            return (
                f"shard {spec.name!r} of account {account!r} overlaps its shard {other.name!r} "
                f"(agents: {agents}, {sibling.status}) on {where}: shards of one account "
                "must not overlap, or each one's relists would delete the other's objects"
            )
    return ""
