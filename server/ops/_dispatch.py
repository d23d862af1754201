"""Operations across replicas: a task on one replica, the account's agent stream on another.

Theory of operation. The replica running a task (the origin) sends an operation to its own
PRIMARY session when it has one. Else it reads the account's lease: when another replica
holds it live (the target), the origin writes the operation into the store's dispatch mailbox
for that replica (payload whole, the deadline as absolute wall-clock milliseconds) and, in the
same transaction, notifies it (``kubesvc_ops_<target>``, payload ``d:<op id>``); that
transaction is the journal's, shared with the other operation writes queued meanwhile. The
lease is read again at most every half poll interval: it moves rarely, and an operation sent
to a replica that just lost it fails there, unsent (the next one reads the lease again). The
target's ``Dispatcher.run`` claims the rows for it (on that notification, and every ``poll_seconds``
in case one was missed), which deletes them, payload and all; sends each to its own PRIMARY
session with what is left of the deadline (the same at-most-once path as a local operation:
never resent); writes the operation's end (its record, and the objects it returned to the
cache) and, in that transaction, notifies the origin (``r:<op id>``). The origin waits for
the operation's record to end: woken by that notification (the ends announced meanwhile are
read together, in one read), reading the record every ``poll_seconds`` anyway. While it
waits it watches the target's heartbeat; a target that stops (its replica row gone or silent
for the lease TTL) fails the operation at once, saying so; at its deadline it fails it as a
timeout. In both cases it first withdraws the row: if the withdrawal wins (the target never
claimed it) nothing was sent, and the reason says so.

The target's claim of a row ends a little before the origin's deadline (``MARGIN_MS``), so
that the target's own account of a timeout is what the origin finds. A replica that no longer
holds the account's primary when it claims the row fails it (nothing sent): the origin's
task ends with that reason rather than chasing the stream to a third replica.

Tasks have an owner: the replica running them. A replica asked for a RUNNING task it does not
run reads the owner's heartbeat (``owner_stopped``): live, the stored task is the answer; gone
(or restarted since the task began), the task is failed with a reason naming it.

Bounds: at most ``max_claimed`` claimed operations run here at once (further rows wait in the
mailbox, their deadlines running); the notification channel holds ``NOTIFICATION_BUFFER``
(full: dropped, the poll covers it); one waiter per dispatched operation (bounded by the
origin's running tasks).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import trio

from .._errors import ServerError, StoreError
from ..store import (
    DispatchRecord,
    LeaseRecord,
    Notice,
    Notification,
    OperationRecord,
    ReplicaRecord,
    Store,
    channel_for,
)
from ._journal import OperationJournal
from ._outcome import ENDED_STATES, Ending, OperationOutcome, outcome_of

__all__ = ["Dispatcher", "ops_channel"]

log = logging.getLogger("server.operations")

MARGIN_MS = 250  # the target gives up this much before the origin does (at most half)
WITHDRAW_SECONDS = 1.0  # at shutdown, how long taking back an unclaimed dispatch may take
NOTIFICATION_BUFFER = 1024
_DISPATCH, _RESULT = "d", "r"


def ops_channel(replica_id: str) -> str:
    """The channel a replica listens on for operations dispatched to it, and for the ends of
    the operations it dispatched."""
    return channel_for("ops", replica_id)


def result_notice(origin: str, op_id: str) -> Notice:
    """What the target sends the origin with an operation's end."""
    return ops_channel(origin), f"{_RESULT}:{op_id}"


Serve = Callable[[DispatchRecord, float], Awaitable[None]]


@dataclass(slots=True)
class _Waiter:
    """An operation this replica dispatched, until its end is known: ``woken`` when it may
    be stored (or must be looked at: a resync), ``record`` once read ended."""

    woken: trio.Event = field(default_factory=trio.Event)
    record: OperationRecord | None = None


class Dispatcher:
    """Both sides of dispatching for one replica (see the module docstring). ``serve(row,
    deadline)`` is the service's: send a claimed row to the local primary until ``deadline``
    (trio's clock) and write its end with ``result_notice``."""

    def __init__(
        self,
        store: Store,
        journal: OperationJournal,
        *,
        replica_id: str,
        lease_ttl_ms: int,
        now_ms: Callable[[], int],
        serve: Serve,
        max_claimed: int = 32,
        poll_seconds: float = 0.5,
    ) -> None:
        self._store = store
        self._journal = journal
        self.replica_id = replica_id
        self.lease_ttl_ms = lease_ttl_ms
        self._now_ms = now_ms
        self._serve = serve
        self._max_claimed = max(1, max_claimed)
        self.poll_seconds = poll_seconds
        self._channel = ops_channel(replica_id)
        self._waiting: dict[str, _Waiter] = {}  # the operations dispatched from here
        self._to_read: set[str] = set()  # of those, the ones announced ended
        self._read = trio.Event()
        self._leases: dict[str, tuple[LeaseRecord, float]] = {}  # account -> (lease, read at)
        self._claim = trio.Event()
        self._claimed = 0
        self._freed = trio.Event()
        self._replicas: dict[str, ReplicaRecord] = {}
        self._replicas_read_at = -math.inf
        self.claims = 0  # claim calls made (tests, the benchmark)
        #: The lease to look for an operation (record, payload): its account's, or its
        #: shard's (ops/_shard_route.py; the service sets it).
        self.route: Callable[[OperationRecord, str], str] = lambda record, _payload: record.account

    # -- the target's side --------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, claim and serve until cancelled. Never raises for the store's faults."""
        send, receive = trio.open_memory_channel[Notification](NOTIFICATION_BUFFER)
        async with trio.open_nursery() as nursery:
            await nursery.start(self._store.listen, [self._channel], send)
            nursery.start_soon(self._route, receive)
            nursery.start_soon(self._claim_loop, nursery)
            nursery.start_soon(self._read_ends)
            task_status.started()

    async def _route(self, receive: trio.MemoryReceiveChannel[Notification]) -> None:
        async for notification in receive:
            if notification.resync:  # listening (re)started: anything may have been missed
                self._claim.set()
                for waiter in self._waiting.values():
                    waiter.woken.set()
                continue
            kind, _, op_id = notification.payload.partition(":")
            if kind == _DISPATCH:
                self._claim.set()
            elif kind == _RESULT and op_id in self._waiting:
                self._to_read.add(op_id)
                self._read.set()

    async def _claim_loop(self, nursery: trio.Nursery) -> None:
        while True:
            with trio.move_on_after(self.poll_seconds):
                await self._claim.wait()
            self._claim = trio.Event()
            while self._claimed >= self._max_claimed:
                await self._freed.wait()
            room = self._max_claimed - self._claimed
            try:
                rows = await self._store.claim_dispatched(self.replica_id, room)
            except ServerError as exc:
                log.error(
                    "replica %s: claiming dispatched operations failed: %s", self.replica_id, exc
                )
                continue
            self.claims += 1
            for row in rows:
                self._claimed += 1
                nursery.start_soon(self._serve_one, row)
            if len(rows) == room:
                self._claim.set()  # there may be more waiting

    async def _serve_one(self, row: DispatchRecord) -> None:
        try:
            left_s = (row.deadline_ms - self._now_ms()) / 1000
            await self._serve(row, trio.current_time() + left_s)
        except ServerError as exc:
            # The origin's poll and deadline end the operation there: it is not lost.
            log.error("operation %s from replica %s: %s", row.op_id, row.origin_replica, exc)
        except Exception:
            # A bug must fail this operation (at the origin's deadline), not the dispatcher.
            log.exception("operation %s from replica %s failed here", row.op_id, row.origin_replica)
        finally:
            self._claimed -= 1
            self._freed.set()
            self._freed = trio.Event()

    # -- the origin's side --------------------------------------------------------------

    async def remote(
        self, ended: Ending, payload_json: str, deadline: float
    ) -> OperationOutcome | None:
        """Run the operation of ``ended.record`` on the replica holding its account's lease,
        until ``deadline`` (trio's clock); its outcome, or None when no other live replica
        holds the lease (nothing was dispatched). StoreError when the dispatch cannot be
        written (then nothing was dispatched either)."""
        record = ended.record
        serving = self.route(record, payload_json)
        lease = await self._holder(serving)
        if lease is None:
            return None
        target, now = lease.replica_id, self._now_ms()
        left_ms = max(0, int((deadline - trio.current_time()) * 1000))
        row = DispatchRecord(
            op_id=record.id,
            account=record.account,
            target_replica=target,
            origin_replica=self.replica_id,
            type=record.type,
            payload_json=payload_json,
            deadline_ms=now + left_ms - min(MARGIN_MS, left_ms // 2),
            created_ms=now,
        )
        waiter = self._waiting[record.id] = _Waiter()  # before the dispatch: miss nothing
        try:
            note = f"dispatched to replica {target}, which holds the agent's stream"
            await self._journal.write_all(
                [(replace(record, state="DISPATCHED", updated_ms=now), note)],
                dispatches=[row],
                notices=[(ops_channel(target), f"{_DISPATCH}:{record.id}")],
            )
            stopped = ""
            with trio.move_on_at(deadline):
                stopped = await self._await_end(waiter, record.id, target)
            outcome = await self._ended(ended, target, stopped, waiter.record)
        except trio.Cancelled:
            # This replica stops (a drain, a cancelled task): take back what the target has
            # not claimed yet, so it is not run after nobody waits for it any more.
            with trio.CancelScope(shield=True), trio.move_on_after(WITHDRAW_SECONDS):
                try:
                    if await self._store.withdraw_dispatched(record.id):
                        log.info("operation %s: withdrawn unsent at shutdown", record.id)
                except StoreError as exc:
                    log.warning("operation %s: could not withdraw it: %s", record.id, exc)
            raise
        finally:
            self._waiting.pop(record.id, None)
        if not outcome.ok:
            self._leases.pop(serving, None)  # it may have moved: read it next time
        return outcome

    async def _holder(self, account: str) -> LeaseRecord | None:
        """The live lease of ``account`` when another replica holds it, read at most every
        half poll interval (a lease moves rarely; an operation sent to a replica it just left
        fails there unsent, and the next one reads the lease again)."""
        cached = self._leases.get(account)
        if cached is None or trio.current_time() - cached[1] >= self.poll_seconds / 2:
            lease = await self._store.get_lease(account)
            if lease is None:
                self._leases.pop(account, None)
                return None
            cached = self._leases[account] = (lease, trio.current_time())
        lease = cached[0]
        if lease.replica_id == self.replica_id or lease.expires_ms <= self._now_ms():
            return None
        return lease

    async def _read_ends(self) -> None:
        """Read the records the targets announced ended, all waiting at once in one read,
        and hand each to its waiter (a waiter not served here polls by itself)."""
        while True:
            await self._read.wait()
            self._read = trio.Event()
            ids = [op_id for op_id in self._to_read if op_id in self._waiting]
            self._to_read.clear()
            if not ids:
                continue
            try:
                records = await self._store.get_operations(ids)
            except ServerError as exc:
                log.warning("reading %d ended operations failed: %s", len(ids), exc)
                continue
            for stored in records:
                waiter = self._waiting.get(stored.id)
                if waiter is not None and stored.state in ENDED_STATES:
                    waiter.record = stored
                    waiter.woken.set()

    async def _await_end(self, waiter: _Waiter, op_id: str, target: str) -> str:
        """Wait until the operation's record ends (``waiter.record``; returns "") or the
        target stops (returns why)."""
        while True:
            with trio.move_on_after(self.poll_seconds):
                await waiter.woken.wait()
            if waiter.record is not None:
                return ""
            woken, waiter.woken = waiter.woken.is_set(), trio.Event()
            try:
                stored = await self._store.get_operation(op_id)
                if stored is not None and stored.state in ENDED_STATES:
                    waiter.record = stored
                    return ""
                if not woken:
                    stopped = await self.replica_stopped(target)
                    if stopped:
                        return stopped
            except ServerError as exc:  # a store fault: the next poll, or the deadline
                log.warning("operation %s: waiting for replica %s: %s", op_id, target, exc)

    async def _ended(
        self, ended: Ending, target: str, stopped: str, stored: OperationRecord | None
    ) -> OperationOutcome:
        """The outcome once the wait is over: the stored end when there is one, else a
        failure of the origin's own (the row withdrawn first, to know whether it was sent)."""
        op_id = ended.record.id
        if stored is None:
            stored = await self._store.get_operation(op_id)
        if stored is not None and stored.state in ENDED_STATES:
            return outcome_of(stored)
        withdrawn = await self._store.withdraw_dispatched(op_id)
        if stopped:
            what = (
                "it never claimed the operation: nothing was sent"
                if withdrawn
                else "the operation may or may not have been applied"
            )
            return await ended.failed(
                "ReplicaStopped",
                f"replica {target} that holds the agent's stream {stopped} before the "
                f"operation ended; {what}",
            )
        if withdrawn:
            return await ended.failed(
                "OperationTimeout",
                f"dispatched to replica {target}, which did not take the operation before "
                "its deadline (operations.waitMs); nothing was sent",
            )
        return await ended.failed(
            "OperationTimeout",
            f"dispatched to replica {target}; no result before the deadline "
            "(operations.waitMs); the operation may or may not have been applied",
        )

    # -- liveness -----------------------------------------------------------------------

    async def replica_stopped(self, replica_id: str) -> str:
        """ "" while ``replica_id`` heartbeats within the lease TTL; else how it stopped
        ("stopped (no heartbeat for 12000 ms)", "left"). The replicas are read at most every
        half poll interval, for every waiter at once."""
        record = await self._replica(replica_id)
        if record is None:
            return "stopped (it left, or was forgotten)"
        silent = self._now_ms() - record.heartbeat_ms
        if silent >= self.lease_ttl_ms:
            return f"stopped (no heartbeat for {silent} ms)"
        return ""

    async def owner_stopped(self, owner: str, task_started_ms: int) -> str:
        """ "" while the task's owner replica is live and has not restarted since the task
        began; else why it cannot be running the task any more."""
        stopped = await self.replica_stopped(owner)
        if stopped:
            return stopped
        record = await self._replica(owner)
        if record is not None and record.started_ms > task_started_ms:
            return "restarted"
        return ""

    async def _replica(self, replica_id: str) -> ReplicaRecord | None:
        if trio.current_time() - self._replicas_read_at >= self.poll_seconds / 2:
            records = await self._store.list_replicas()
            self._replicas = {r.replica_id: r for r in records}
            self._replicas_read_at = trio.current_time()
        return self._replicas.get(replica_id)
