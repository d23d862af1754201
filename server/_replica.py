"""This server as one replica among several sharing a store (DESIGN 5a): its heartbeat.

Theory of operation. Every ``replicas.heartbeatMs`` the replica writes its row (address,
sessions, primaries), which also renews every account lease it holds for
``replicas.leaseTtlMs``. Then it reads the leases and lets the accounts service reconcile them
(``AccountService.reconcile``): a local head whose lease lapsed on another replica is promoted,
a local primary whose lease another replica took is demoted. Then it claims the "housekeeping"
duty; the one replica holding it deletes expired lease rows, forgets replicas long dead (with
the agent rows they left) and trims the change log (PostgreSQL: what the other replicas' feeds
read, server/_feed_follower.py); when a replica has left, it indexes the objects that have no
view row (a replica of a version from before the view index, still running during a rolling
upgrade, ingests without writing them); and only it removes orphaned accounts past their grace
period.
Each heartbeat also reads the accounts table, so an account registered, added or removed on
another replica is known here within a heartbeat. A graceful drain deletes the replica's row,
which releases its leases at once, so its agents' accounts are taken over on their next
connection rather than after the TTL. A crash leaves the leases to lapse.

On SQLite the store has one replica (one process owns its file): ``take_store_alone`` drops
what earlier processes left, and every lease is granted to the one replica.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Sequence

import trio

from ._accounts import AccountService
from ._errors import ServerError
from ._sessions import SessionManager
from .store import ReplicaRecord, Store

log = logging.getLogger("server.replicas")

HOUSEKEEPING = "housekeeping"
#: A replica silent for this many lease TTLs is forgotten (its row deleted) by housekeeping.
FORGET_AFTER_TTLS = 6


def live_replicas(
    records: Sequence[ReplicaRecord], now_ms: int, lease_ttl_ms: int
) -> list[ReplicaRecord]:
    """The replicas that reported within the lease TTL (their leases are still good)."""
    return [r for r in records if r.heartbeat_ms + lease_ttl_ms > now_ms]


def forgotten_replicas(
    records: Sequence[ReplicaRecord], now_ms: int, lease_ttl_ms: int, me: str
) -> list[str]:
    """The replicas housekeeping deletes: silent for FORGET_AFTER_TTLS lease TTLs."""
    return [
        r.replica_id
        for r in records
        if r.replica_id != me and r.heartbeat_ms + FORGET_AFTER_TTLS * lease_ttl_ms <= now_ms
    ]


def advertised_address(host: str, grpc_port: int, api_host: str, api_port: int | None) -> str:
    """ "host:grpcPort api=host:apiPort" for a replica listening on ``host`` (a wildcard
    address is replaced by this machine's name: the pod's, in Kubernetes)."""

    def named(h: str) -> str:
        return socket.gethostname() if h in ("", "0.0.0.0", "::") else h

    address = f"{named(host)}:{grpc_port}"
    if api_port is not None:
        address += f" api={named(api_host)}:{api_port}"
    return address


async def take_store_alone(store: Store, replica_id: str) -> None:
    """A store only this process uses (SQLite): forget the replicas and leases earlier
    processes left, so the one replica is granted every lease at once."""
    for record in await store.list_replicas():
        if record.replica_id != replica_id:
            await store.delete_replica(record.replica_id)
    for lease in await store.list_leases():
        await store.release_lease(lease.account, lease.session_id)


class ReplicaService:
    """The heartbeat of one replica (see the module docstring). ``run`` in a nursery;
    ``leave`` at a graceful drain."""

    def __init__(
        self,
        store: Store,
        accounts: AccountService,
        sessions: SessionManager,
        *,
        replica_id: str,
        started_ms: int,
        heartbeat_ms: int,
        lease_ttl_ms: int,
        now_ms: Callable[[], int],
        address: str = "",
        change_log_keep_ms: int = 300_000,
        change_log_max_rows: int = 100_000,
    ) -> None:
        self._store = store
        self._accounts = accounts
        self._sessions = sessions
        self.replica_id = replica_id
        self.started_ms = started_ms
        self.heartbeat_ms = heartbeat_ms
        self.lease_ttl_ms = lease_ttl_ms
        self._now_ms = now_ms
        self.address = address
        self.change_log_keep_ms = change_log_keep_ms
        self.change_log_max_rows = change_log_max_rows
        self.housekeeper = False
        self.left = False
        # The replicas as the last heartbeat read them (metrics read this at scrape time).
        self.replicas: list[ReplicaRecord] = []
        self.beats = trio.Event()  # set at each heartbeat (then replaced): for waiters
        # A replica left (drained or forgotten) since housekeeping last filled the view index:
        # one of a version from before the index ingests without writing view rows.
        self._replica_left = False
        accounts.housekeeper = lambda: self.housekeeper
        accounts.recheck_seconds = heartbeat_ms / 1000

    def record(self, now_ms: int) -> ReplicaRecord:
        return ReplicaRecord(
            self.replica_id,
            self.address,
            self.started_ms,
            now_ms,
            sessions=self._sessions.count(),
            primaries=len(self._accounts.registry.held_leases()),
        )

    def live(self) -> list[ReplicaRecord]:
        """The live replicas as the last heartbeat saw them."""
        return live_replicas(self.replicas, self._now_ms(), self.lease_ttl_ms)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Beat now, report started, then beat every ``heartbeat_ms`` until cancelled. A
        store failure is logged and the next beat tries again (the leases lapse meanwhile,
        as they would if this replica had died)."""
        await self._beat_logged()
        task_status.started()
        while True:
            await trio.sleep(self.heartbeat_ms / 1000)
            await self._beat_logged()

    async def _beat_logged(self) -> None:
        try:
            await self.beat()
        except ServerError as exc:
            log.error("replica %s: the heartbeat failed: %s", self.replica_id, exc)

    async def beat(self) -> None:
        """One heartbeat: the replica's row and leases renewed, the leases reconciled, the
        housekeeping duty claimed (and done, if held)."""
        if self.left:
            return
        now = self._now_ms()
        await self._store.heartbeat_replica(self.record(now), self.lease_ttl_ms)
        before = {r.replica_id for r in self.replicas}
        self.replicas = await self._store.list_replicas()
        if before - {r.replica_id for r in self.replicas}:
            self._replica_left = True
        live = live_replicas(self.replicas, now, self.lease_ttl_ms)
        self._accounts.registry.live_replicas = frozenset(
            [self.replica_id, *(r.replica_id for r in live)]
        )
        await self._accounts.reconcile(await self._store.list_leases())
        await self._accounts.sync()
        was = self.housekeeper
        self.housekeeper = await self._store.claim_duty(
            HOUSEKEEPING, self.replica_id, self.lease_ttl_ms
        )
        if self.housekeeper:
            if not was:
                log.info("replica %s: housekeeping is this replica's", self.replica_id)
                self._accounts.wake()
            await self._housekeeping(now)
        self.beats.set()
        self.beats = trio.Event()

    async def _housekeeping(self, now_ms: int) -> None:
        # A lapsed lease stays one more TTL: every replica's next reconcile sees whose it
        # was (a standby is promoted "the primary on replica X lapsed"; an expired row is
        # granted like a missing one), and housekeeping removes only what nobody took.
        gone = await self._store.expire_leases(self.lease_ttl_ms)
        if gone:
            log.info("expired leases removed: %s", ", ".join(lease.account for lease in gone))
        # Operations dispatched to a replica that died, by one that died too (else the
        # origin withdraws them at its deadline): their payloads must not stay.
        lost = await self._store.expire_dispatched(now_ms - self.lease_ttl_ms)
        if lost:
            log.info("dispatched operations nobody took, removed: %s", ", ".join(lost))
        records = await self._store.list_replicas()
        forgotten = forgotten_replicas(records, now_ms, self.lease_ttl_ms, self.replica_id)
        for replica_id in forgotten:
            log.info("replica %s has been silent long: forgotten", replica_id)
            await self._store.delete_replica(replica_id)
        # The agent rows a crashed replica left (a drained one removed its own): its
        # sessions ended with it, so /armory/agents must not list them. A row is old as
        # well as without its replica: a replica that just started may accept agents before
        # its first heartbeat writes its row.
        known = {r.replica_id for r in records if r.replica_id not in forgotten}
        old = now_ms - FORGET_AFTER_TTLS * self.lease_ttl_ms
        for agent in await self._store.list_agents():
            if (
                agent.server_id
                and agent.server_id not in known | {self.replica_id}
                and agent.connected_at_ms <= old
            ):
                await self._store.delete_agent(agent.session_id)
        trimmed = await self._store.trim_changes(self.change_log_keep_ms, self.change_log_max_rows)
        if trimmed:
            log.debug("change log: %d old rows trimmed", trimmed)
        if self._replica_left or forgotten:
            # Objects a replica of an older version ingested (a rolling upgrade) have no view
            # row: Deck would not show them. The anti-join costs one pass over the index.
            self._replica_left = False
            await self._store.fill_views()

    async def leave(self) -> None:
        """A graceful drain: stop beating and delete this replica's row, which releases its
        leases (another replica's standby is promoted at its next heartbeat). Raises
        StoreError."""
        self.left = True
        await self._store.delete_replica(self.replica_id)
        log.info("replica %s left: its leases are released", self.replica_id)
