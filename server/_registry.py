"""The account registry: which agent session serves which account (sans-I/O).

Theory of operation. An account is identified by its name and its cluster (API host and the
SHA-256 fingerprint of the API server's certificate). Sessions register the accounts their
agent serves. Per account the sessions form a queue: the first is PRIMARY (streams events,
runs operations), the others STANDBY. A name already bound to a different cluster is
REJECTED with a reason. When a session ends, the next in line is promoted (a RoleChange the
caller turns into an Assignment). An account nobody serves turns ORPHANED; ``expire(now)``
removes it once the grace period has passed, unless a registration restored it to ACTIVE.

Nothing here does I/O or reads a clock: the caller passes ``now_ms`` and persists what
``take_changes()`` returns (records to upsert, names to delete).

Several replicas (``use_leases``). Then the queue is this replica's only: its head is PRIMARY
only while this replica holds the account's lease in the store (``grant``); a head without it
is a STANDBY. The caller asks the store for the leases ``take_new_heads()`` names, hands back
what ``take_lease_releases()`` names, and reports the outcomes (``grant``, ``lost``,
``refuse``). ``refresh`` takes in the store's row of an account (written by any replica):
another replica's connections are kept in the row, and an account another replica serves is
not turned ORPHANED when its last local session leaves.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ._errors import AccountExists, UnknownAccount
from ._shards import SEPARATOR, ShardSpec, account_of, refusal, spec_of
from .store import AccountRecord, AccountState, cluster_refusal

DEFAULT_ORPHAN_GRACE_MS = 600_000


class Role(enum.IntEnum):
    """A session's role for one account (the values of the protocol's AccountAssignment)."""

    PRIMARY = 1
    STANDBY = 2
    REJECTED = 3


@dataclass(frozen=True, slots=True)
class Claim:
    """What an agent says about one account it wants to serve. ``name`` is the registry's
    name: the account's, or ``account/shard`` when ``shard`` says the agent serves a part of
    it (server/_shards.py)."""

    name: str
    kube_host: str
    cert_fingerprint: str
    kube_version: str = ""
    properties: dict[str, Any] = field(default_factory=dict)
    permissions: dict[str, list[str]] = field(default_factory=dict)
    shard: ShardSpec | None = None

    @property
    def account(self) -> str:
        """The account's name (the protocol's), whether the claim is of a shard or not."""
        return account_of(self.name)


@dataclass(frozen=True, slots=True)
class RoleChange:
    """A session's role for an account changed (or was first decided)."""

    session_id: str
    account: str
    role: Role
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Changes:
    """What to persist: the current records of changed accounts, and removed names."""

    upserts: list[AccountRecord]
    deletes: list[str]


@dataclass(slots=True)
class _Session:
    agent_id: str
    accounts: list[str] = field(default_factory=list)


_SERVABLE = {
    AccountState.INACTIVE,
    AccountState.ACTIVATING,
    AccountState.ACTIVE,
    AccountState.FAILED,
    AccountState.ORPHANED,
    AccountState.TO_MIGRATE,
}


class Registry:
    """Accounts, their states and the sessions serving them. Not thread-safe; no I/O.

    ``records`` are the persisted accounts: those that were ACTIVE (served before a restart)
    start ORPHANED at ``now_ms``, so they are kept for the grace period for their agents to
    come back, and removed after it.
    """

    def __init__(
        self,
        records: Iterable[AccountRecord] = (),
        *,
        now_ms: int = 0,
        orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS,
        use_leases: bool = False,
        replica_id: str = "",
        served_elsewhere: Collection[str] = (),
    ) -> None:
        self.orphan_grace_ms = orphan_grace_ms
        self.replica_id = replica_id
        self._use_leases = use_leases
        self._accounts: dict[str, AccountRecord] = {}
        self._holders: dict[str, list[str]] = {}
        self._sessions: dict[str, _Session] = {}
        self._dirty: set[str] = set()
        self._deleted: set[str] = set()
        # Several replicas: the session holding this replica's lease, per account; leases to
        # hand back; heads that should ask for the lease (with the reason to tell them); other
        # replicas' connections as the store's row last showed them.
        self._leases: dict[str, str] = {}
        self._releases: list[tuple[str, str]] = []
        self._new_heads: dict[str, str] = {}
        self._remote: dict[str, list[dict[str, Any]]] = {}
        # The replicas alive at the last heartbeat (None: not known, nothing filtered): the
        # connections a dead replica left in an account's row are not taken in.
        self.live_replicas: frozenset[str] | None = None
        # The accounts that have (or had) shards: a claim of one whole is checked against them.
        self._sharded: set[str] = set()
        for record in records:
            self._accounts[record.name] = record
            self._note_shard(record.name)
            if record.name in served_elsewhere:
                self._remote[record.name] = self._others(record)
                continue  # another replica's live lease serves it: not ours to orphan
            if record.status is AccountState.ACTIVE or record.connections:
                self._orphan(record.name, now_ms)

    # -- views --------------------------------------------------------------------------

    def get(self, name: str) -> AccountRecord | None:
        return self._accounts.get(name)

    def accounts(self) -> list[AccountRecord]:
        return [self._accounts[n] for n in sorted(self._accounts)]

    def holders(self, name: str) -> list[str]:
        """Session ids serving ``name``, the PRIMARY first."""
        return list(self._holders.get(name, ()))

    def primary(self, name: str) -> str | None:
        holders = self._holders.get(name)
        if not holders or not self._leads(name, holders[0]):
            return None
        return holders[0]

    def head(self, name: str) -> str | None:
        """The first session in this replica's queue (PRIMARY once it holds the lease)."""
        holders = self._holders.get(name)
        return holders[0] if holders else None

    def role(self, session_id: str, name: str) -> Role | None:
        holders = self._holders.get(name, [])
        if session_id not in holders:
            return None
        lead = holders[0] == session_id and self._leads(name, session_id)
        return Role.PRIMARY if lead else Role.STANDBY

    def _leads(self, name: str, session_id: str) -> bool:
        return not self._use_leases or self._leases.get(name) == session_id

    def session_accounts(self, session_id: str) -> list[str]:
        session = self._sessions.get(session_id)
        return list(session.accounts) if session else []

    def agent_of(self, session_id: str) -> str | None:
        session = self._sessions.get(session_id)
        return session.agent_id if session else None

    # -- sessions -----------------------------------------------------------------------

    def open_session(self, session_id: str, agent_id: str) -> None:
        if session_id in self._sessions:
            raise ValueError(f"session {session_id} is already open")
        self._sessions[session_id] = _Session(agent_id)

    def register(self, session_id: str, claim: Claim, now_ms: int) -> RoleChange:
        """Decide ``session_id``'s role for ``claim.name`` (idempotent for a held account)."""
        session = self._sessions.get(session_id)
        if session is None:
            raise ValueError(f"session {session_id} is not open")
        if (role := self.role(session_id, claim.name)) is not None:
            return RoleChange(session_id, claim.name, role)
        record = self._accounts.get(claim.name)
        if record is not None:
            refusal = self._refusal(record, claim)
            if refusal:
                return RoleChange(session_id, claim.name, Role.REJECTED, refusal)
        if claim.shard is not None or claim.name in self._sharded:
            refused = self._shard_refusal(claim)
            if refused:
                return RoleChange(session_id, claim.name, Role.REJECTED, refused)
        holders = self._holders.setdefault(claim.name, [])
        holders.append(session_id)
        session.accounts.append(claim.name)
        base = record or AccountRecord(name=claim.name)
        self._put(
            replace(
                base,
                kube_host=claim.kube_host,
                cert_fingerprint=claim.cert_fingerprint,
                kube_version=claim.kube_version or base.kube_version,
                properties=claim.properties or base.properties,
                permissions=claim.permissions or base.permissions,
                status=AccountState.ACTIVE,
                error_message="",
                orphaned_at_ms=None,
                last_updated_ms=now_ms,
                connections=self._connections(claim.name),
            )
        )
        if self._use_leases and holders[0] == session_id and claim.name not in self._leases:
            self._new_heads.setdefault(claim.name, "")
        role = self.role(session_id, claim.name) or Role.STANDBY
        return RoleChange(session_id, claim.name, role)

    @staticmethod
    def _refusal(record: AccountRecord, claim: Claim) -> str:
        refusal = cluster_refusal(
            claim.name,
            record.kube_host,
            record.cert_fingerprint,
            claim.kube_host,
            claim.cert_fingerprint,
        )
        if refusal:
            return refusal
        if record.status not in _SERVABLE:
            return f"account {claim.name!r} is {record.status}; it cannot be served now"
        return ""

    def _shard_refusal(self, claim: Claim) -> str:
        """Why a shard's claim (or an account's whole, when it has shards) is refused: see
        ``_shards.refusal``; and shards of one account are of one cluster."""
        account = claim.account
        siblings = [
            r
            for n, r in self._accounts.items()
            if n.startswith(account + SEPARATOR) and n != claim.name
        ]
        if claim.shard is None:
            return refusal(claim.name, None, siblings, None, served=False)
        whole = self._accounts.get(account) or self._accounts.get(claim.name)
        served = bool(self._holders.get(claim.name)) or bool(
            whole is not None and self._remote.get(whole.name)
        )
        refused = refusal(claim.name, claim.shard, siblings, whole, served=served)
        if refused:
            return refused
        for sibling in siblings:
            refused = cluster_refusal(
                account,
                sibling.kube_host,
                sibling.cert_fingerprint,
                claim.kube_host,
                claim.cert_fingerprint,
            )
            if refused:
                return f"{refused} (its shard {sibling.name.split(SEPARATOR, 1)[1]!r})"
        return ""

    def _note_shard(self, name: str) -> None:
        if SEPARATOR in name:
            self._sharded.add(account_of(name))

    def units(self, account: str) -> list[AccountRecord]:
        """The records of ``account``'s shards (none: it is not sharded), by name."""
        if account not in self._sharded:
            return []
        prefix = account + SEPARATOR
        return [self._accounts[n] for n in sorted(self._accounts) if n.startswith(prefix)]

    def moved(self, session_id: str, claim: Claim) -> bool:
        """Whether ``session_id`` holds ``claim.name`` for a cluster other than the claim's
        (its agent was pointed at another cluster under the same account name), or holds the
        shard ``claim.name`` with another spec (its agent's shard: config changed)."""
        record = self._accounts.get(claim.name)
        if record is None or self.role(session_id, claim.name) is None:
            return False
        if claim.shard is not None and spec_of(record) != claim.shard:
            return True  # its shard changed: judged afresh against the other shards
        bound = record.kube_host or record.cert_fingerprint
        return bool(bound) and (record.kube_host, record.cert_fingerprint) != (
            claim.kube_host,
            claim.cert_fingerprint,
        )

    def unregister(self, session_id: str, name: str, now_ms: int) -> list[RoleChange]:
        """``session_id`` stops serving ``name``; returns the promotion it causes, if any."""
        session = self._sessions.get(session_id)
        if session is None or name not in session.accounts:
            return []
        session.accounts.remove(name)
        return self._release(session_id, name, now_ms)

    def close_session(self, session_id: str, now_ms: int) -> list[RoleChange]:
        """The session ended: release its accounts; returns the promotions to announce."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return []
        changes: list[RoleChange] = []
        for name in session.accounts:
            changes += self._release(session_id, name, now_ms)
        return changes

    def _release(self, session_id: str, name: str, now_ms: int) -> list[RoleChange]:
        holders = self._holders.get(name, [])
        was_head = bool(holders) and holders[0] == session_id
        if session_id in holders:
            holders.remove(session_id)
        if not holders:
            self._holders.pop(name, None)
            self._hand_back(name)
        if name not in self._accounts:
            return []
        if not holders:
            if self._remote.get(name):  # another replica serves it: not orphaned
                self._put(replace(self._accounts[name], connections=self._connections(name)))
            else:
                self._orphan(name, now_ms)
            return []
        self._put(replace(self._accounts[name], connections=self._connections(name)))
        if was_head and self._use_leases:
            # The new head asks for the lease (this replica's: granted at once unless it
            # lapsed meanwhile and another replica took it).
            self._new_heads[name] = "promoted: the primary left" if name in self._leases else ""
        elif was_head:
            return [RoleChange(holders[0], name, Role.PRIMARY, "promoted: the primary left")]
        return []

    def _hand_back(self, name: str) -> None:
        """No local session serves ``name`` any more: its lease, if held, is to be released."""
        held = self._leases.pop(name, None)
        if held is not None:
            self._releases.append((name, held))
        self._new_heads.pop(name, None)

    # -- leases (several replicas) ------------------------------------------------------

    def take_new_heads(self) -> list[tuple[str, str, str]]:
        """(account, head session, reason) for the heads that should ask for the lease now
        (a session became the head of its queue); then forgotten."""
        heads = []
        for name, reason in sorted(self._new_heads.items()):
            head = self.head(name)
            if head is not None and self._leases.get(name) != head:
                heads.append((name, head, reason))
        self._new_heads.clear()
        return heads

    def lease_wanted(self) -> list[tuple[str, str]]:
        """(account, head session) for every local head without this replica's lease."""
        return [
            (name, holders[0])
            for name, holders in sorted(self._holders.items())
            if holders and self._leases.get(name) != holders[0]
        ]

    def held_leases(self) -> dict[str, str]:
        """The accounts whose lease this replica holds, and the session holding each."""
        return dict(self._leases)

    def take_lease_releases(self) -> list[tuple[str, str]]:
        """(account, session) of the leases to release in the store; then forgotten."""
        releases, self._releases = self._releases, []
        return releases

    def grant(self, name: str, session_id: str, reason: str = "") -> list[RoleChange]:
        """The store granted ``name``'s lease to ``session_id`` (on this replica): the
        session becomes PRIMARY, if it still heads the queue; else the lease is to be
        handed back."""
        if self.head(name) != session_id:
            self._releases.append((name, session_id))
            return []
        if self._leases.get(name) == session_id:
            return []  # renewed, nothing changes
        self._leases[name] = session_id
        if name in self._accounts:
            self._put(replace(self._accounts[name], connections=self._connections(name)))
        return [RoleChange(session_id, name, Role.PRIMARY, reason)]

    def lost(self, name: str, reason: str) -> list[RoleChange]:
        """Another replica holds ``name``'s lease now (ours lapsed): the head is a STANDBY."""
        if self._leases.pop(name, None) is None:
            return []
        head = self.head(name)
        if name in self._accounts:
            self._put(replace(self._accounts[name], connections=self._connections(name)))
        return [RoleChange(head, name, Role.STANDBY, reason)] if head else []

    def refuse(self, name: str, reason: str, stored: AccountRecord | None) -> list[RoleChange]:
        """The store refused ``name``'s lease: another cluster holds the name. Every local
        session serving it is told REJECTED, and the account is the store's row again
        (``stored``), not this replica's claim."""
        holders = self._holders.pop(name, [])
        for session_id in holders:
            self._sessions[session_id].accounts.remove(name)
        self._hand_back(name)
        self._dirty.discard(name)
        self.refresh(name, stored)
        return [RoleChange(s, name, Role.REJECTED, reason) for s in holders]

    def refresh(self, name: str, stored: AccountRecord | None) -> None:
        """Take in the store's row for ``name`` (any replica may have written it). Served
        here: only other replicas' connections are taken. Not served here: the row replaces
        what this replica knew (None: removed elsewhere, forgotten here without a delete)."""
        if not self._use_leases or name in self._dirty or name in self._deleted:
            return  # a local write not yet persisted is newer than any read
        if stored is None:
            if name not in self._holders:
                self._accounts.pop(name, None)
                self._remote.pop(name, None)
            return
        self._remote[name] = self._others(stored)
        if name not in self._holders:
            self._accounts[name] = replace(stored, connections=self._remote[name])
            self._note_shard(name)

    def take_in(self, name: str, stored: AccountRecord | None) -> list[RoleChange]:
        """``refresh``, and for an account served here what an operator did to its row on
        another replica (REST may reach any): removed there, it is deleted here; set to a
        state that cannot be served, newer than what this replica wrote, it is put here.
        Either way the local sessions are told they are REJECTED (the changes returned)."""
        local = self._accounts.get(name)
        if (
            self._use_leases
            and local is not None
            and name in self._holders
            and name not in self._dirty
            and name not in self._deleted
        ):
            if stored is None:
                return self.delete(name)
            unservable = stored.status not in _SERVABLE or stored.status is AccountState.INACTIVE
            if unservable and stored.last_updated_ms > local.last_updated_ms:
                return self.put(stored, stored.last_updated_ms)
        self.refresh(name, stored)
        return []

    def names_known(self) -> list[str]:
        return list(self._accounts)

    def _others(self, record: AccountRecord) -> list[dict[str, Any]]:
        """``record``'s connections on other replicas (live ones, when known)."""
        return [
            c
            for c in record.connections
            if c.get("clouddriverId")
            and c.get("clouddriverId") != self.replica_id
            and (self.live_replicas is None or c.get("clouddriverId") in self.live_replicas)
        ]

    def _orphan(self, name: str, now_ms: int) -> None:
        record = self._accounts[name]
        if record.status is AccountState.ACTIVE:
            record = replace(record, status=AccountState.ORPHANED, orphaned_at_ms=now_ms)
        self._put(replace(record, connections=[], last_updated_ms=now_ms))

    # -- time ---------------------------------------------------------------------------

    def due(self, now_ms: int) -> list[str]:
        """The ORPHANED accounts whose grace period has passed."""
        return sorted(
            r.name
            for r in self._accounts.values()
            if r.status is AccountState.ORPHANED
            and r.orphaned_at_ms is not None
            and r.orphaned_at_ms + self.orphan_grace_ms <= now_ms
        )

    def next_expiry_ms(self) -> int | None:
        """When the earliest ORPHANED account is due for removal (None if none is)."""
        due = [
            r.orphaned_at_ms + self.orphan_grace_ms
            for r in self._accounts.values()
            if r.status is AccountState.ORPHANED and r.orphaned_at_ms is not None
        ]
        return min(due, default=None)

    def expire(self, now_ms: int, keep: Collection[str] = ()) -> list[str]:
        """Remove the ORPHANED accounts whose grace period has passed, but those in ``keep``;
        returns their names."""
        gone = [name for name in self.due(now_ms) if name not in keep]
        for name in gone:
            self._remove(name)
        return gone

    # -- operator requests (REST) -------------------------------------------------------

    def add(self, records: Sequence[AccountRecord], now_ms: int) -> None:
        """Add accounts (INACTIVE unless given otherwise); all or none: AccountExists."""
        names = [r.name for r in records]
        taken = sorted({n for n in names if n in self._accounts or names.count(n) > 1})
        if taken:
            raise AccountExists(taken)
        for record in records:
            self._put(replace(record, last_updated_ms=now_ms))

    def set_state(
        self, name: str, state: AccountState, now_ms: int, *, zone_id: str | None = None
    ) -> AccountRecord:
        """Set an account's state (PATCH /armory/accounts); raises UnknownAccount."""
        record = self._accounts.get(name)
        if record is None:
            raise UnknownAccount(name)
        changed = replace(
            record,
            status=state,
            zone_id=record.zone_id if zone_id is None else zone_id,
            orphaned_at_ms=now_ms if state is AccountState.ORPHANED else None,
            last_updated_ms=now_ms,
        )
        self._put(changed)
        return changed

    def put(self, record: AccountRecord, now_ms: int) -> list[RoleChange]:
        """An operator wrote ``record`` (REST). A live account keeps its cluster identity and
        connections; one moved to a state that cannot be served releases its sessions, which
        are told it is REJECTED."""
        live = self._accounts.get(record.name)
        holders = self._holders.get(record.name, [])
        changes: list[RoleChange] = []
        if live is not None and holders:
            record = replace(
                record,
                kube_host=live.kube_host,
                cert_fingerprint=live.cert_fingerprint,
                connections=live.connections,
            )
            if record.status not in _SERVABLE or record.status is AccountState.INACTIVE:
                reason = f"account {record.name!r} was set {record.status} by an operator"
                changes = [RoleChange(s, record.name, Role.REJECTED, reason) for s in holders]
                for session_id in holders:
                    self._sessions[session_id].accounts.remove(record.name)
                self._holders.pop(record.name, None)
                self._hand_back(record.name)
                record = replace(record, connections=[])
        self._put(replace(record, last_updated_ms=now_ms))
        return changes

    def delete(self, name: str) -> list[RoleChange]:
        """Forget an account; the sessions serving it are told it is REJECTED (deleted)."""
        if name not in self._accounts:
            raise UnknownAccount(name)
        changes = [
            RoleChange(s, name, Role.REJECTED, f"account {name!r} was deleted")
            for s in self._holders.get(name, [])
        ]
        for session_id in self._holders.get(name, []):
            self._sessions[session_id].accounts.remove(name)
        self._hand_back(name)
        self._remove(name)
        return changes

    # -- persistence --------------------------------------------------------------------

    def take_changes(self) -> Changes:
        """The records changed and names removed since the last call (then forgotten)."""
        upserts = [self._accounts[n] for n in sorted(self._dirty) if n in self._accounts]
        changes = Changes(upserts, sorted(self._deleted))
        self._dirty.clear()
        self._deleted.clear()
        return changes

    def requeue(self, changes: Changes) -> None:
        """Mark ``changes`` (from take_changes, not persisted: the store failed) as pending
        again, so the next take_changes returns them (with any newer state of the same
        names)."""
        self._dirty.update(r.name for r in changes.upserts if r.name in self._accounts)
        self._deleted.update(n for n in changes.deletes if n not in self._accounts)

    def has_changes(self) -> bool:
        return bool(self._dirty or self._deleted)

    def _put(self, record: AccountRecord) -> None:
        self._accounts[record.name] = record
        self._note_shard(record.name)
        self._dirty.add(record.name)
        self._deleted.discard(record.name)

    def _remove(self, name: str) -> None:
        self._accounts.pop(name, None)
        self._holders.pop(name, None)
        self._remote.pop(name, None)
        self._dirty.discard(name)
        self._deleted.add(name)

    def _connections(self, name: str) -> list[dict[str, Any]]:
        holders = self._holders.get(name, [])
        local = [
            {
                "agentId": self._sessions[s].agent_id,
                "sessionId": s,
                "role": "PRIMARY" if i == 0 and self._leads(name, s) else "STANDBY",
            }
            for i, s in enumerate(holders)
            if s in self._sessions
        ]
        if self.replica_id:
            for c in local:
                c["clouddriverId"] = self.replica_id
        return local + self._remote.get(name, [])
