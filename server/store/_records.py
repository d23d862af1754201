"""The plain records the store reads and writes (no I/O here)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from wire import EventRecord


class AccountState(enum.StrEnum):
    """Account states, named as the Armory plugin names them."""

    INACTIVE = "INACTIVE"
    TO_MIGRATE = "TO_MIGRATE"
    ACTIVATING = "ACTIVATING"
    ACTIVE = "ACTIVE"
    TO_DEACTIVATE = "TO_DEACTIVATE"
    DEACTIVATING = "DEACTIVATING"
    FAILED = "FAILED"
    ORPHANED = "ORPHANED"
    DELETING = "DELETING"
    DELETE_FAILED = "DELETE_FAILED"


@dataclass(frozen=True, slots=True)
class AccountRecord:
    """One account as persisted (the Armory "Account record fields").

    ``kube_host`` and ``cert_fingerprint`` are the cluster identity ("" until an agent
    registers the account); ``orphaned_at_ms`` is set while the account is ORPHANED.
    """

    name: str
    kube_host: str = ""
    cert_fingerprint: str = ""
    kube_version: str = ""
    status: AccountState = AccountState.INACTIVE
    error_message: str = ""
    retry_count: int = 0
    dynamic: bool = False
    permissions: dict[str, list[str]] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    zone_id: str = ""
    last_updated_ms: int = 0
    connections: list[dict[str, Any]] = field(default_factory=list)
    orphaned_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One cached Kubernetes object; ``body`` is its JSON bytes (Secrets: metadata only)."""

    account: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    body: bytes
    updated_at_ms: int = 0

    @property
    def group(self) -> str:
        return group_of(self.api_version)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The coordinates of an object (used for the objects a sync bracket swept away)."""

    account: str
    api_version: str
    kind: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """The last resourceVersion stored for one watch: (account, api_version, kind, scope).

    ``scope`` is "" for a cluster-wide watch, else its namespace. A watch whose sync bracket
    is still open has no resume point (objects' own versions from a list are not resumable).
    """

    api_version: str
    kind: str
    scope: str
    resource_version: str
    updated_at_ms: int

    def age_ms(self, now_ms: int) -> int:
        return max(0, now_ms - self.updated_at_ms)


@dataclass(frozen=True, slots=True)
class UnavailableKind:
    """A kind of an account that the agent cannot watch now, in ``scope`` ("" the whole
    kind, else one namespace): the agent's KindStatus said so (docs/protocol.md §7.4).

    ``code`` is the API server's HTTP status (401, 403, 404, 406), 0 when the kind is gone
    from discovery; ``reason`` its message; ``since_ms`` when the store first marked it."""

    account: str
    api_version: str
    kind: str
    scope: str
    code: int
    reason: str
    since_ms: int = 0

    @property
    def group(self) -> str:
        return group_of(self.api_version)

    @property
    def forbidden(self) -> bool:
        """The API server refused the agent (401/403), rather than not serving the kind."""
        return self.code in (401, 403)

    def covers(self, group: str | None, kind: str, namespace: str) -> bool:
        """Whether this mark answers for an object of ``kind`` (``group`` None: any) in
        ``namespace`` ("" cluster-scoped)."""
        if kind.lower() != self.kind.lower() or group not in (None, self.group):
            return False
        return not self.scope or self.scope == namespace


@dataclass(frozen=True, slots=True)
class KindOverview:
    """One kind of one account at a glance (the status page): how many objects the cache
    holds, how many of its watches (one per scope) have finished a listing and keep a resume
    point, and when the newest of those points moved (an event or a bookmark), 0 if none.
    ``kind`` is spelled as the store holds it (the objects', else the resume points')."""

    account: str
    group: str
    kind: str
    objects: int = 0
    synced_watches: int = 0
    watch_updated_ms: int = 0


@dataclass(frozen=True, slots=True)
class KindChange:
    """One entry of the agent's KindStatus: (account, kind, scope) unavailable (``code``,
    ``reason``) or available again."""

    account: str
    api_version: str
    kind: str
    scope: str
    available: bool
    code: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ShardScope:
    """The part of an account one shard owns (server/_shards.py, docs/sharding.md): the
    kinds (lower-case, no group; ``kinds`` empty: every kind but ``omit_kinds``) in
    ``namespaces`` (empty: every namespace and the cluster scope; given: only those)."""

    name: str
    kinds: frozenset[str] = frozenset()
    omit_kinds: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()

    def owns(self, kind: str, namespace: str) -> bool:
        """Whether objects of ``kind`` in ``namespace`` ("" cluster-scoped) are this shard's."""
        lower = kind.lower()
        if self.kinds and lower not in self.kinds:
            return False
        if lower in self.omit_kinds:
            return False
        return not self.namespaces or namespace in self.namespaces


@dataclass(frozen=True, slots=True)
class AccountScope:
    """What the agent watches for one account now (its WatchScope): every kind, as
    (api_version, kind), and the namespaces namespaced kinds are watched in (none: all but
    ``omit_namespaces``)."""

    account: str
    kinds: tuple[tuple[str, str], ...]
    namespaces: tuple[str, ...] = ()
    omit_namespaces: tuple[str, ...] = ()
    #: The WatchScope of one shard: what lies outside the shard is another shard's, and
    #: stays whatever this scope says. With no ``kinds``: the whole shard goes (it expired).
    shard: ShardScope | None = None

    def holds_namespace(self, namespace: str) -> bool:
        """Whether objects (or watches) in ``namespace`` are in scope ("": cluster-scoped
        objects and cluster-wide watches always are)."""
        if not namespace:
            return True
        if namespace in self.omit_namespaces:
            return False
        return not self.namespaces or namespace in self.namespaces


@dataclass(frozen=True, slots=True)
class AvailabilityOutcome:
    """What a KindStatus or a WatchScope changed: the objects removed (for the feed), the
    marks set or given a new reason, the marks cleared (available again) and the marks
    dropped with their kind or namespace (out of scope)."""

    swept: tuple[ObjectRef, ...] = ()
    marked: tuple[UnavailableKind, ...] = ()
    cleared: tuple[UnavailableKind, ...] = ()
    dropped: tuple[UnavailableKind, ...] = ()
    #: the change-log row the write appended (PostgreSQL; 0: none, or SQLite)
    change_seq: int = 0


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What one committed batch changed: counts, the objects sync brackets swept away, and
    the unavailable marks their SYNC_END cleared (the kind listed again)."""

    upserted: int = 0
    deleted: int = 0
    swept: tuple[ObjectRef, ...] = ()
    #: the change-log row the write appended (PostgreSQL; 0: none, or SQLite)
    change_seq: int = 0
    restored: tuple[UnavailableKind, ...] = ()


@dataclass(frozen=True, slots=True)
class ChangeCursor:
    """Where a reader of the change log is (``Store.read_changes``; ``_pg_changes`` says how).

    ``since`` is a database snapshot (PostgreSQL's ``txid_snapshot`` as text): the changes
    it shows are behind the reader; ``since_ms`` the database's clock when it was taken.
    While a window of changes is paged through, ``until``/``until_ms`` is the window's end
    and ``after_seq`` the last change read from it ("" / 0: no window open).
    """

    since: str
    since_ms: int
    until: str = ""
    until_ms: int = 0
    after_seq: int = 0


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write of another replica: its feed records in order (bodies empty: read
    them from ``objects``) and the objects its sync brackets swept."""

    seq: int
    writer: str
    records: tuple[EventRecord, ...]
    swept: tuple[ObjectRef, ...]


@dataclass(frozen=True, slots=True)
class ChangePage:
    """What one ``read_changes`` found: changes in commit order per object, the cursor to
    read on from, whether more are already waiting (read again at once), and whether the
    log was trimmed past changes this reader had not read (its subscribers must resync)."""

    changes: list[Change]
    cursor: ChangeCursor
    more: bool = False
    lagged: bool = False


@dataclass(frozen=True, slots=True)
class ObjectPage:
    """One page of a query; ``next_token`` is None on the last page."""

    objects: list[StoredObject]
    next_token: str | None


@dataclass(frozen=True, slots=True)
class AgentRecord:
    """A connected agent session, as the REST API lists it (``/armory/agents``)."""

    session_id: str
    agent_id: str
    instance_id: str = ""
    agent_version: str = ""
    server_id: str = ""
    peer: str = ""
    accounts: list[str] = field(default_factory=list)
    connected_at_ms: int = 0
    last_seen_ms: int = 0


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """One server replica as it last reported itself (``/armory/clouddrivers``).

    ``address`` is "host:grpcPort api=host:apiPort" as the replica knows it; ``sessions`` the
    agent sessions open on it; ``primaries`` the account leases it holds (counted by the
    store at each heartbeat). Liveness is the reader's call: ``heartbeat_ms`` against its TTL.
    """

    replica_id: str
    address: str
    started_ms: int
    heartbeat_ms: int
    sessions: int = 0
    primaries: int = 0


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """Who is PRIMARY for an account, across replicas: the session (on ``replica_id``) that
    holds the account's lease until ``expires_ms`` (renewed by that replica's heartbeats)."""

    account: str
    replica_id: str
    session_id: str
    agent_id: str
    expires_ms: int


@dataclass(frozen=True, slots=True)
class LeaseOutcome:
    """What ``acquire_lease`` decided. ``holder`` is the lease as it stands after the call
    (this replica's when granted); ``refusal`` is non-empty when the account belongs to
    another cluster (then nothing was granted)."""

    granted: bool
    holder: LeaseRecord | None
    refusal: str = ""


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """An operation sent to an agent, and its outcome once known (issue 6 builds on it)."""

    id: str
    account: str
    type: str
    payload_json: str = "{}"
    state: str = "PENDING"
    created_ms: int = 0
    updated_ms: int = 0
    result_json: str = ""
    error_message: str = ""
    error_code: str = ""


@dataclass(frozen=True, slots=True)
class DispatchRecord:
    """An operation handed to the replica holding its account's stream (``target_replica``)
    by the replica running its task (``origin_replica``): a row of ``operation_dispatch``
    until the target claims it. ``payload_json`` is the payload whole (Secret data too: the
    agent needs it), which is why the row is deleted when claimed. ``deadline_ms`` is the
    absolute wall-clock time (the origin's) after which it must not be sent."""

    op_id: str
    account: str
    target_replica: str
    origin_replica: str
    type: str
    payload_json: str
    deadline_ms: int
    created_ms: int


@dataclass(frozen=True, slots=True)
class Notification:
    """One notification received on ``channel``. A ``channel`` of "" is a resync marker:
    listening (re)started, so notifications sent meanwhile may have been missed (poll)."""

    channel: str
    payload: str = ""

    @property
    def resync(self) -> bool:
        return not self.channel


@dataclass(frozen=True, slots=True)
class OperationEvent:
    """One line of an operation's history."""

    operation_id: str
    at_ms: int
    state: str
    message: str = ""


_CORE_VERSION = re.compile(r"v\d+((alpha|beta)\d+)?")


def group_of(api_version_or_group: str) -> str:
    """The API group of ``apps/v1`` (``apps``), ``v1`` (``""``, core) or a bare group (itself)."""
    if "/" in api_version_or_group:
        return api_version_or_group.split("/", 1)[0]
    if _CORE_VERSION.fullmatch(api_version_or_group):
        return ""
    return api_version_or_group
