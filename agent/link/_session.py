"""One session of the agent's link: one Connect call, from the Welcome to its end.

Theory of operation. agent/link/_link.py opens the stream, sends Hello and reads the Welcome; then
a ``Session`` runs these tasks in the session's nursery, and they all end with it:

* one *account runner* per PRIMARY account (the app's reflectors), started with the resume
  points younger than the account's ``maxResumableResourceAgeMs`` (older ones are dropped, so
  those kinds list again); STANDBY, REJECTED and roles this version does not know run nothing
  until an Assignment makes the account PRIMARY;
* the *batch sender*: it takes batches from the budget channel (bounded by count and bytes,
  with a few ms of linger so a burst travels in full batches and a lone change still goes at
  once; bookmarks alone wait up to ``bookmark_linger_seconds`` for company), frames them
  as one EventBatch each with the next seq, and keeps them until the server's Ack, which
  releases their bytes in the budget; with ``max_batches_in_flight``
  unacknowledged it waits for an Ack, so a server that falls behind receives fewer, larger
  batches. An object too large for a message travels as its metadata, marked
  OVERSIZE_ANNOTATION. A watch notice in the channel (a kind unavailable or back, an
  account's watch scope: agent/watch/_notices.py) cuts the batch: the records before it go
  as one EventBatch, then the notice as its own message, then the rest; the budget's batch
  is released by the Ack of its last EventBatch;
* the *receiver*: Acks, Assignments, Operations and Heartbeats from the server; any message
  pushes the inactivity deadline forward; a message kind or field this version does not know
  is skipped (agent/link/_edge.py); an Ack of a batch not in flight, an empty message or a
  second Welcome ends the session (SessionEnded), as does the server's silence for
  ``heartbeat_seconds + heartbeat_timeout_seconds`` (when heartbeats are on);
* the *result sender*: operation results, the ones ready together in one write; a result too
  large for the server's messages is reported as a failure (``reportable``);
* the *account-change sender*, the only writer of AccountsChanged;
* the *heartbeat*, every ``keepAliveHeartbeatSeconds``;
* the *drain* task, which waits for ``Link.drain`` (agent/link/_drain.py).

One lock keeps messages whole on the stream. What outlives a session (the results outbox,
account changes not yet announced, the drain's state) lives in ``LinkState``, owned by the
link; everything else goes with the session's nursery, and bytes still in its channel return
to the budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import betterproto
import msgspec
import trio

import wire
from budget import Batch, ByteBudget, EventReceiver, EventSender
from wire import messages

from ..watch import KindNotice, Notice, ScopeNotice, notice_messages
from ._drain import Drain
from ._edge import known_role, skipped_unknown
from ._settings import AccountRunner, LinkSettings, LinkStatus, ResumeKey

__all__ = [
    "MAX_RESULTS_PER_WRITE",
    "OVERSIZE_ANNOTATION",
    "LinkState",
    "ServerSilent",
    "Session",
    "SessionEnded",
    "oversize_stand_in",
    "reportable",
]

log = logging.getLogger("agent.link")

#: Operation results sent in one write at most (those ready together).
MAX_RESULTS_PER_WRITE = 32
#: At most the bytes an operation result's tags and lengths and its AgentMessage envelope
#: add to its strings (the size is reckoned from the strings: no encoding twice).
_RESULT_OVERHEAD = 64

#: Marks an object that was too large to send: only its metadata reached the server.
OVERSIZE_ANNOTATION = "kubesvc.io/oversize"


@dataclass(eq=False, slots=True)
class LinkState:
    """What the link gives each of its sessions, and what outlives a session.

    The link owns it. ``results`` is the outbox of operation results (bounded; operations run
    in the link's nursery, ``start_operation`` starts one there); ``unsent`` holds the results
    a session was writing when it ended (at most MAX_RESULTS_PER_WRITE), sent first by the
    next. ``pending_changes`` maps an account to its newest info, or None when removed, until
    a session announces it. ``drain`` is set by ``Link.drain``; ``poke`` wakes its waits.
    """

    settings: LinkSettings
    budget: ByteBudget
    status: LinkStatus
    runner: AccountRunner
    max_resume_age_ms: Callable[[str], int]
    start_operation: Callable[[messages.Operation], None]
    results: trio.MemoryReceiveChannel[messages.OperationResult]
    unsent: list[messages.OperationResult] = field(default_factory=list)
    pending_changes: dict[str, messages.AccountInfo | None] = field(default_factory=dict)
    changes_wakeup: trio.Event = field(default_factory=trio.Event)
    drain: Drain | None = None
    drain_requested: trio.Event = field(default_factory=trio.Event)
    _changed: trio.Event = field(default_factory=trio.Event, init=False)

    def poke(self) -> None:
        """Wake ``wait_until`` (called on progress; a no-op unless draining)."""
        if self.drain is not None:
            self._changed.set()
            self._changed = trio.Event()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition()`` holds; it is checked again after every ``poke``."""
        while not condition():
            await self._changed.wait()


@dataclass(slots=True)
class _Part:
    """A run of a batch's entries: records (one EventBatch) or notices (their messages)."""

    records: list[wire.EventRecord] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


class SessionEnded(Exception):
    """The session ended for a reason of the protocol (not the network): reconnect."""


class ServerSilent(SessionEnded):
    """No message from the server (not even an Ack or a heartbeat's answer) for the
    session's silence allowance."""


class Session:
    """The tasks of one session (see the module docstring); started by the link inside the
    session's nursery, which owns them and ``stream``."""

    def __init__(
        self,
        state: LinkState,
        stream: wire.ClientStream,
        nursery: trio.Nursery,
        send: EventSender,
        receive: EventReceiver,
        limits: messages.Limits | None,
        silence_seconds: float,
    ) -> None:
        self._state = state
        settings = state.settings
        # The server's limits win over ours: a batch it would refuse must never be built.
        self._max_events = settings.batch_max_events
        self._max_message = settings.max_message_size
        if limits is not None and limits.max_batch_events:
            self._max_events = max(1, min(self._max_events, limits.max_batch_events))
        if limits is not None and limits.max_message_size:
            self._max_message = min(self._max_message, limits.max_message_size)
        # Room for the envelope and the records' headers around the objects' bytes.
        self._max_bytes = max(1, min(settings.batch_max_bytes, self._max_message - 64 * 1024))
        self._stream = stream
        self._nursery = nursery
        # How long the server may say nothing before the session is given up: the link
        # grows it after sessions that ended so (agent/link/_link.py, ``silence_wait``).
        self._silence = silence_seconds
        self._events = send
        self._receive = receive
        self._send_lock = trio.Lock()
        # seq -> the budget's batch its Ack releases (None: a batch cut by a notice, whose
        # later part's Ack releases it)
        self._unacked: dict[int, Batch | None] = {}
        self._sent_at: dict[int, float] = {}  # seq -> when it went, for the Ack's latency
        self._in_flight = trio.Semaphore(max(settings.max_batches_in_flight, 1))
        self._seq = 0
        self._accounts: dict[str, trio.CancelScope] = {}
        self._account_tasks = 0  # account runners not yet finished (a drain waits for them)
        self._draining = False
        self._stream_ended = False  # the drain ended our side: the server's OK is next
        self._server_closed = trio.Event()

    @property
    def unacked_batches(self) -> int:
        """Batches sent and not yet acknowledged."""
        return len(self._unacked)

    async def send(self, message: messages.AgentMessage) -> None:
        # One message at a time on the stream: batches, results and heartbeats interleave
        # whole, never byte by byte.
        async with self._send_lock:
            await self._stream.send(message)

    # -- accounts ----------------------------------------------------------------------------

    def assign(self, assignments: Sequence[messages.AccountAssignment]) -> None:
        for assignment in assignments:
            role = known_role(assignment.role)
            self._state.status.roles[assignment.name] = (
                role.name if role is not None else f"UNKNOWN({int(assignment.role)})"
            )
            if assignment.reason:
                self._state.status.role_reasons[assignment.name] = assignment.reason
            else:
                self._state.status.role_reasons.pop(assignment.name, None)
            if role == messages.Role.PRIMARY:
                self._start_account(assignment)
            else:
                if role == messages.Role.REJECTED:
                    log.error(
                        "account %s rejected by the server: %s",
                        assignment.name,
                        assignment.reason or "no reason given",
                        extra={"account": assignment.name},
                    )
                elif role is None:  # a newer server's role: run nothing, as for STANDBY
                    log.warning(
                        "account %s: the server gave it role %d, which this agent does not "
                        "know: running nothing for it (%s)",
                        assignment.name,
                        int(assignment.role),
                        assignment.reason or "no reason given",
                        extra={"account": assignment.name},
                    )
                self.stop_account(assignment.name)

    def _start_account(self, assignment: messages.AccountAssignment) -> None:
        name = assignment.name
        if name in self._accounts or self._draining:
            return
        max_age = self._state.max_resume_age_ms(name)
        resume = {
            (point.api_version, point.kind, point.scope): point.resource_version
            for point in assignment.resume
            if point.resource_version and point.age_ms <= max_age
        }
        scope = trio.CancelScope()
        self._accounts[name] = scope
        log.info(
            "account %s: PRIMARY, resuming %d kind(s), listing the rest",
            name,
            len(resume),
            extra={"account": name},
        )
        self._nursery.start_soon(self._run_account, name, resume, scope)

    async def _run_account(
        self, name: str, resume: dict[ResumeKey, str], scope: trio.CancelScope
    ) -> None:
        self._account_tasks += 1
        try:
            with scope:
                await self._state.runner(name, resume, self._events)
        finally:
            self._account_tasks -= 1
            self._state.poke()
        if self._accounts.get(name) is scope:
            del self._accounts[name]

    def stop_account(self, name: str) -> None:
        scope = self._accounts.pop(name, None)
        if scope is not None:
            scope.cancel()

    # -- the loops ---------------------------------------------------------------------------

    async def send_batches(self) -> None:
        settings = self._state.settings
        status = self._state.status
        max_events = self._max_events
        limits = wire.RecordLimits(
            max_events=max_events,
            max_bytes=self._max_message,
            max_object_bytes=self._max_message,
        )
        capacity = self._state.budget.statistics().capacity
        max_bytes = min(self._max_bytes, max(capacity // 4, 64 * 1024))
        while True:
            await self._receive.wait_pending(1, 1)
            await self._in_flight.acquire()
            await self._hold_bookmarks(settings.bookmark_linger_seconds)
            await self._linger(settings, max_events, max_bytes)
            try:
                batch = self._receive.receive_batch_nowait(max_events, max_bytes)
            except trio.WouldBlock:
                # wait_pending also returns when a sender is blocked on the budget; with the
                # whole budget in flight nothing is pending until an Ack makes room.
                batch = await self._receive.receive_batch(max_events, max_bytes)
            parts = self._parts_of(batch, limits)
            last = max((i for i, part in enumerate(parts) if part.records), default=-1)
            for index, part in enumerate(parts):
                if part.notices:
                    # After the records before them: the server applies a session's
                    # messages in order (agent/watch/_notices.py).
                    async with self._send_lock:
                        for message in notice_messages(part.notices):
                            await self._stream.send(message)
                    continue
                records = part.records
                self._seq += 1
                # The budget's batch is acknowledged with its last EventBatch.
                self._unacked[self._seq] = batch if index == last else None
                self._sent_at[self._seq] = trio.current_time()
                payload = wire.encode_events(records, limits)
                # The envelope is encoded without betterproto objects (~0.1 ms each per batch).
                async with self._send_lock:
                    await self._stream.send_event_batch(self._seq, payload, len(records))
                status.batches_sent += 1
                status.events_sent += len(records)
                status.bytes_sent += len(payload)
                self._count_by_kind(records)
            if last < 0:  # nothing to acknowledge: the batch was notices only (or nothing)
                self._receive.acknowledge(batch)
                self._in_flight.release()
                self._state.poke()

    def _count_by_kind(self, records: Sequence[wire.EventRecord]) -> None:
        """Add a batch to the per-kind counters: one dict update per run of one kind (a batch
        is mostly one kind), not one per record."""
        by_kind = self._state.status.events_by_kind
        start = 0
        while start < len(records):
            kind, api_version = records[start].kind, records[start].api_version
            end = start + 1
            size = len(records[start].object)
            while end < len(records):
                record = records[end]
                if record.kind != kind or record.api_version != api_version:
                    break
                size += len(record.object)
                end += 1
            count, total = by_kind.get((kind, api_version), (0, 0))
            by_kind[(kind, api_version)] = (count + end - start, total + size)
            start = end

    async def _hold_bookmarks(self, seconds: float) -> None:
        """While every pending entry is a bookmark, wait up to ``seconds`` for anything else
        (which then goes at once, the bookmarks with it); see ``bookmark_linger_seconds``.
        More bookmarks do not end the wait: with thousands of idle watches they come in
        hundreds a second, and each then cost a wake-up and a batch of its own."""
        with trio.move_on_after(seconds):
            await self._receive.wait_not_only_bookmarks()

    async def _linger(self, settings: LinkSettings, max_events: int, max_bytes: int) -> None:
        """Wait for a full batch: ``linger_seconds`` at a time while events keep coming, at
        most ``max_linger_seconds`` in all. A lone change goes after one linger; a stream of
        events that trickles in (the agent or the server busy) still travels in full batches
        rather than in many small ones, each paying the fixed cost of a batch."""
        receive = self._receive
        give_up = trio.current_time() + settings.max_linger_seconds
        before = receive.statistics().pending_entries
        while True:
            with trio.move_on_after(settings.linger_seconds):
                await receive.wait_pending(max_events, max_bytes)
            stats = receive.statistics()
            if (
                stats.pending_entries >= max_events
                or stats.pending_bytes >= max_bytes
                or stats.pending_entries == before  # nothing came: no point waiting
                or stats.senders_waiting  # a sender is blocked: only a take makes room
                or trio.current_time() >= give_up
            ):
                return
            before = stats.pending_entries

    def _parts_of(self, batch: Batch, limits: wire.RecordLimits) -> list[_Part]:
        """The batch's entries as runs of records and runs of notices, in order."""
        parts: list[_Part] = []
        for entry in batch.entries:
            value = entry.value
            if isinstance(value, wire.EventRecord):
                if not parts or parts[-1].notices:
                    parts.append(_Part())
                parts[-1].records.append(self._record_of(value, limits))
            else:
                assert isinstance(value, KindNotice | ScopeNotice)
                if not parts or parts[-1].records:
                    parts.append(_Part())
                parts[-1].notices.append(value)
        return parts

    def _record_of(self, record: wire.EventRecord, limits: wire.RecordLimits) -> wire.EventRecord:
        # An object bigger than a message can never travel whole. Dropping it would be worse
        # than wrong: a listing's SYNC_END would sweep it from the cache although it exists.
        # So it travels as its metadata, marked, and the operator is told.
        room = limits.max_object_bytes - 4096
        if len(record.object) <= room:
            return record
        self._state.status.oversize_dropped += 1
        log.error(
            "%s %s/%s in account %s is %d bytes, more than a message may carry (%d): "
            "sending its metadata only, marked %s",
            record.kind,
            record.namespace or "-",
            record.name,
            record.account,
            len(record.object),
            room,
            OVERSIZE_ANNOTATION,
            extra={"account": record.account},
        )
        return oversize_stand_in(record, room)

    async def send_account_changes(self) -> None:
        """Announce queued account changes; this task is the only writer of AccountsChanged."""
        state = self._state
        while True:
            await state.changes_wakeup.wait()
            state.changes_wakeup = trio.Event()
            changes, state.pending_changes = state.pending_changes, {}
            if not changes:
                continue
            message = messages.AccountsChanged(
                accounts=[info for info in changes.values() if info is not None],
                removed=[name for name, info in changes.items() if info is None],
            )
            try:
                await self.send(messages.AgentMessage(accounts_changed=message))
            except BaseException:
                # Not sent: the next session announces them (newer changes win).
                state.pending_changes = {**changes, **state.pending_changes}
                raise

    async def receive_messages(self) -> None:
        settings = self._state.settings
        quiet = self._silence
        with trio.CancelScope() as deadline:
            while True:
                if settings.heartbeat_seconds > 0:
                    deadline.deadline = trio.current_time() + quiet
                try:
                    message = await self._stream.receive_ack_or_message()
                except wire.EndOfStream:
                    if not self._stream_ended:
                        raise
                    self._server_closed.set()  # the drain's end, answered: all done
                    return
                if isinstance(message, int):  # an Ack, as its seq: one per batch
                    self._acknowledged(message)
                else:
                    await self._dispatch(message)
        raise ServerSilent(f"no message from the server for {quiet:.0f} s")

    async def _dispatch(self, message: messages.ServerMessage) -> None:
        name, body = betterproto.which_one_of(message, "message")
        skipped = skipped_unknown(self._state.status.unknown_fields, message)  # counted, logged
        if isinstance(body, messages.Ack):
            self._acknowledged(body.seq)
        elif isinstance(body, messages.Assignment):
            self.assign(body.accounts)
        elif isinstance(body, messages.Operation):
            self._state.start_operation(body)  # in the link's nursery: it outlives us
        elif isinstance(body, messages.Heartbeat):
            pass  # its arrival already moved the deadline
        elif name:
            raise SessionEnded(f"unexpected {name} message from the server")
        elif not skipped:  # a kind this version does not know is skipped, not an error
            raise SessionEnded("an empty message from the server")

    def _acknowledged(self, seq: int) -> None:
        if seq not in self._unacked:
            raise SessionEnded(f"the server acknowledged unknown batch {seq}")
        self._state.status.ack_latency.observe(trio.current_time() - self._sent_at.pop(seq))
        batch = self._unacked.pop(seq)
        if batch is None:
            return
        self._receive.acknowledge(batch)
        self._in_flight.release()
        self._state.poke()

    async def drain_when_asked(self) -> None:
        """The session's part of a drain: stop the runners, send what the channel holds and
        wait for its Acks and for the operations' results to be sent, then end the stream
        and wait for the server's OK; then end the session."""
        state = self._state
        await state.drain_requested.wait()
        drain = state.drain
        assert drain is not None
        self._draining = True
        for name in list(self._accounts):
            self.stop_account(name)
        receive = self._receive
        await state.wait_until(lambda: self._account_tasks == 0)
        await state.wait_until(
            lambda: not receive.statistics().pending_entries and not self._unacked
        )
        log.info(
            "shutdown: every event taken from the watches is acknowledged (%d batches sent)",
            self._seq,
        )
        await drain.operations_done.wait()
        results = state.results
        await state.wait_until(
            lambda: not results.statistics().current_buffer_used and not state.unsent
        )
        async with self._send_lock:  # nothing else is sent after the end
            self._stream_ended = True
            await self._stream.end()
            await self._server_closed.wait()
        log.info("shutdown: the stream to the server is closed")
        self._nursery.cancel_scope.cancel()

    async def send_results(self) -> None:
        """Send operation results, those a previous session was sending first.

        The results ready together leave in one write (MAX_RESULTS_PER_WRITE at most): under
        load several finish within one pass of the scheduler, and each write costs a crossing
        into asyncio that costs more than encoding a small result."""
        state = self._state
        results = state.results
        while True:
            if not state.unsent:
                state.unsent.append(await results.receive())
            while len(state.unsent) < MAX_RESULTS_PER_WRITE:
                try:
                    state.unsent.append(results.receive_nowait())
                except trio.WouldBlock:
                    break
            # A result too large for the server is reported as a failure: sent as it is, it
            # would be refused (or fail the write) with every session, and hold back the
            # results behind it.
            state.unsent = [reportable(r, self._max_message) for r in state.unsent]
            async with self._send_lock:
                await self._stream.send_operation_results(state.unsent)
            state.unsent = []
            state.poke()

    async def heartbeats(self) -> None:
        period = self._state.settings.heartbeat_seconds
        while True:
            await trio.sleep(period)
            now_ms = int(time.time() * 1000)
            await self.send(messages.AgentMessage(heartbeat=messages.Heartbeat(sent_at_ms=now_ms)))


def reportable(result: messages.OperationResult, max_message: int) -> messages.OperationResult:
    """``result``, or a failed result saying so when it cannot fit in a ``max_message``-byte
    message (the operation ran; what it returned is not reported)."""
    size = _RESULT_OVERHEAD + sum(
        len(text.encode())
        for text in (
            result.id,
            result.account,
            result.result_json,
            result.error_message,
            result.error_code,
        )
    )
    if size <= max_message:
        return result
    return messages.OperationResult(
        id=result.id,
        account=result.account,
        ok=False,
        error_code="ResultTooLarge",
        error_message=(
            f"the operation ran, but its result ({size} bytes) is larger than the largest "
            f"message the server takes ({max_message} bytes), so it is not reported"
        ),
    )


def oversize_stand_in(record: wire.EventRecord, room: int) -> wire.EventRecord:
    """``record`` with its object cut down to identity and metadata, marked as oversize.

    Labels and owner references stay (the server's queries and Clouddriver's views use
    them) unless even they do not fit; annotations and everything else go.
    """
    try:
        body = msgspec.json.decode(record.object)
    except msgspec.DecodeError:
        body = {}
    metadata = body.get("metadata") if isinstance(body, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    kept = {key: metadata[key] for key in _OVERSIZE_KEPT if key in metadata}
    kept["annotations"] = {
        OVERSIZE_ANNOTATION: f"{len(record.object)} bytes; only metadata was sent"
    }
    stand_in = {"apiVersion": record.api_version, "kind": record.kind, "metadata": kept}
    encoded = msgspec.json.encode(stand_in)
    if len(encoded) > room:
        for key in ("labels", "ownerReferences"):
            kept.pop(key, None)
        encoded = msgspec.json.encode(stand_in)
    return msgspec.structs.replace(record, object=encoded)


_OVERSIZE_KEPT = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "labels",
    "ownerReferences",
)
