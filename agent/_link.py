"""The agent's link to the server: one outbound gRPC stream, reconnected with backoff.

Theory of operation. A *session* is one Connect call. It opens with Hello (the accounts with
their cluster identity, and the previous session's token when resuming) and the server's
Welcome, which gives every account a role and, for PRIMARY ones, the resourceVersions the
server stored per kind. Then four kinds of task share the session's nursery:

* one *account runner* per PRIMARY account (the app's reflectors), started with the resume
  points younger than the account's ``maxResumableResourceAgeMs`` (older ones are dropped, so
  those kinds list again); STANDBY and REJECTED accounts run nothing until an Assignment
  makes them PRIMARY;
* the *sender*: it takes batches from the budget channel (bounded by count and bytes, with a
  few ms of linger so a burst travels in full batches and a lone change still goes at once),
  frames them as one EventBatch each, and keeps them until the server's Ack, which releases
  their bytes in the budget; with ``max_batches_in_flight`` unacknowledged it waits for an Ack,
  so a server that falls behind receives fewer, larger batches;
* the *receiver*: Acks, Assignments, Operations and Heartbeats from the server; any message
  pushes the inactivity deadline forward;
* the *heartbeat*, every ``keepAliveHeartbeatSeconds``;
* the *result sender*, which carries operation results up the stream.

Operations themselves run in the link's own nursery, not the session's: one still running
when the stream drops finishes, and its result waits in a bounded outbox for the next session
(the executor de-duplicates by id, so an operation the server sends again never runs twice).

Any failure to open, use or keep the stream (wire's ConnectionLost, a refusal, no Welcome or
no message in time, a protocol violation) ends the session with one log line, and the link
reconnects after the backoff: only cancellation and bugs of our own end ``run``. A message kind
or field this version does not know is skipped, counted (``status.unknown_fields``) and logged
once per field number: the next version of the server may send it.

When the session ends for any reason, the whole nursery goes: runners stop, the channel is
closed and every byte it held returns to the budget. Nothing is lost by that: the server
stores a kind's resourceVersion in the same transaction as the objects it acknowledges, so
the next session resumes each kind from exactly what the server has.

A server that is shutting down ends the call with UNAVAILABLE and a message starting with
``wire.DRAINING``: the link connects again at once, with no backoff (behind a Kubernetes
Service or a load balancer, that reaches another replica).

Drain (``drain(deadline)``, on SIGTERM): see agent/_link_drain.py.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import betterproto
import msgspec
import trio

import wire
from budget import Batch, ByteBudget, EventReceiver, EventSender, open_event_channel
from wire import messages

from ._backoff import Backoff
from ._errors import AgentError
from ._link_drain import RESULTS_RESERVE_SECONDS, Drain, shutting_down
from ._link_edge import known_role, message_kind, open_stream, skipped_unknown

log = logging.getLogger("agent.link")

ResumeKey = tuple[str, str, str]  # (api_version, kind, scope)

#: Operation results waiting for a session to carry them; past this, operations wait.
MAX_PENDING_RESULTS = 256
#: Operation results sent in one write at most (those ready together).
MAX_RESULTS_PER_WRITE = 32
#: Operations running at once; past this the agent answers Unavailable at once.
MAX_OPERATIONS_IN_FLIGHT = 512
#: At most the bytes an operation result's tags and lengths and its AgentMessage envelope
#: add to its strings (the size is reckoned from the strings: no encoding twice).
_RESULT_OVERHEAD = 64

#: Marks an object that was too large to send: only its metadata reached the server.
OVERSIZE_ANNOTATION = "kubesvc.io/oversize"


class AccountRunner(Protocol):
    """Runs one account's watches into ``send`` until cancelled (the app's reflectors)."""

    async def __call__(
        self,
        name: str,
        resume: Mapping[ResumeKey, str],
        send: EventSender,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None: ...


OperationHandler = Callable[[messages.Operation], Awaitable[messages.OperationResult]]


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """How to reach the server and shape the stream (from ``clouddriver.*``)."""

    host: str
    port: int
    agent_id: str
    instance_id: str
    agent_version: str
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    heartbeat_seconds: float = 20.0  # 0: no heartbeats
    heartbeat_timeout_seconds: float = 10.0
    welcome_timeout_seconds: float = 30.0
    backoff: Backoff = field(default_factory=Backoff)
    # A batch costs ~0.5 ms of fixed work (framing, the bridge, the Ack) whatever its size:
    # large batches keep that under 3 us per 4 KB event. The bytes are also capped at a
    # quarter of the budget so that several batches can be in flight with a small budget.
    batch_max_events: int = 1000
    batch_max_bytes: int = 1024 * 1024
    linger_seconds: float = 0.005
    # Batches sent and not yet acknowledged. When the server is this far behind, the sender
    # waits for an Ack while changes gather (and coalesce) in the channel, so the next batch
    # carries all of them: a busy server gets fewer, larger transactions instead of a queue of
    # small ones that only grows its latency.
    max_batches_in_flight: int = 4
    max_linger_seconds: float = 0.05
    max_message_size: int = wire.DEFAULT_MAX_MESSAGE_SIZE


@dataclass(slots=True)
class LinkStatus:
    """What the link did, for /ready, the admin views and the metrics."""

    connected: bool = False
    sessions: int = 0
    disconnections: int = 0
    last_error: str = ""
    server_id: str = ""
    roles: dict[str, str] = field(default_factory=dict)
    # The server's reason with an account's role (why it was REJECTED, or promoted).
    role_reasons: dict[str, str] = field(default_factory=dict)
    batches_sent: int = 0
    events_sent: int = 0
    bytes_sent: int = 0
    oversize_dropped: int = 0
    events_by_kind: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # Fields and message kinds from the server this version does not know (skipped).
    unknown_fields: wire.UnknownFieldCounter = field(default_factory=wire.UnknownFieldCounter)


class Link:
    """The agent's side of the protocol. ``run`` keeps a session open for ever.

    ``hello_accounts`` is called at every (re)connect for the accounts to announce;
    ``runner`` runs a PRIMARY account; ``operations`` answers an Operation (the agent's
    executor); ``token`` gives the bearer token, or None.
    """

    def __init__(
        self,
        settings: LinkSettings,
        budget: ByteBudget,
        *,
        hello_accounts: Callable[[], Awaitable[Sequence[messages.AccountInfo]]],
        runner: AccountRunner,
        max_resume_age_ms: Callable[[str], int],
        operations: OperationHandler | None = None,
        token: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self._settings = settings
        self._budget = budget
        self._hello_accounts = hello_accounts
        self._runner = runner
        self._max_resume_age_ms = max_resume_age_ms
        self._operations = operations
        self._token = token
        self._session_token = ""
        self._session: _Session | None = None
        self.status = LinkStatus()
        # Operations outlive sessions: one that is running when the stream drops finishes, and
        # its result waits here (bounded; a full outbox holds the next operation back) for the
        # next session. ``_unsent`` holds the results a dying session was sending (at most
        # MAX_RESULTS_PER_WRITE).
        self._results_in, self._results_out = trio.open_memory_channel[messages.OperationResult](
            MAX_PENDING_RESULTS
        )
        self._unsent: list[messages.OperationResult] = []
        self._operations_nursery: trio.Nursery | None = None
        self._operations_in_flight = 0
        # Account changes waiting for a session to announce them: name -> the account's info,
        # or None when it was removed. Newest wins per name, so it holds at most one entry per
        # account; a session's own task sends it (nothing else writes to the stream).
        self._pending_changes: dict[str, messages.AccountInfo | None] = {}
        self._changes_wakeup = trio.Event()
        # Shutdown: set by drain(); the session's drain task and the operations read it.
        self._drain: Drain | None = None
        self._drain_requested = trio.Event()
        self._operation_scopes: set[trio.CancelScope] = set()
        self._changed = trio.Event()  # poked on progress while draining
        self._reconnect_now = False  # the last session ended with a draining server's status

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve a session, reconnect with backoff after it ends; never returns."""
        backoff = self._settings.backoff
        async with trio.open_nursery() as operations_nursery:
            self._operations_nursery = operations_nursery
            task_status.started()
            await self._reconnect_forever(backoff)

    async def _reconnect_forever(self, backoff: Backoff) -> None:
        while True:
            self._reconnect_now = False
            try:
                await self._noting_drain(backoff)
            except* (wire.WireError, trio.TooSlowError, _SessionEnded, AgentError) as group:
                # Whatever the network or the server did: one line, then the backoff.
                reason = "; ".join(dict.fromkeys(_describe(exc) for exc in _leaves(group)))
                if self.status.connected:
                    self.status.disconnections += 1
                self.status.last_error = reason
            finally:
                self.status.connected = False
                self.status.roles.clear()
                self.status.role_reasons.clear()
                self._session = None
            if self._drain is not None:  # shutting down: no new session
                self._drain.link_closed.set()
                await trio.sleep_forever()
            if self._reconnect_now:
                log.info("the server is draining: reconnecting at once")
                continue
            delay = backoff.next_delay()
            log.warning(
                "link to %s:%d lost: %s; reconnecting in %.2f s",
                self._settings.host,
                self._settings.port,
                self.status.last_error,
                delay,
            )
            await trio.sleep(delay)

    async def _noting_drain(self, backoff: Backoff) -> None:
        """One session; when it ends with a draining server's status, note that the next
        session must be opened at once (what ended it propagates unchanged)."""
        try:
            await self._one_session(backoff)
        except BaseException as exc:
            if any(wire.is_draining(leaf) for leaf in _leaves_of(exc)):
                self._reconnect_now = True
            raise

    # -- drain ----------------------------------------------------------------------------

    async def drain(self, deadline: float) -> None:
        """Drain the link for a shutdown by ``deadline`` (trio's clock); see the module
        docstring. Returns once the stream is closed, or at once when no session is open.
        The caller cancels it at ``deadline`` if it has not returned by then."""
        now = trio.current_time()
        reserve = min(RESULTS_RESERVE_SECONDS, max(deadline - now, 0.0) / 4)
        drain = Drain(deadline=deadline, operations_deadline=deadline - reserve)
        self._drain = drain
        self._drain_requested.set()
        with trio.move_on_at(drain.operations_deadline):
            await self._wait_until(lambda: self._operations_in_flight == 0)
        if self._operation_scopes:
            log.warning(
                "shutdown: ending %d operation(s) still running", len(self._operation_scopes)
            )
            for scope in list(self._operation_scopes):
                scope.cancel()
        await self._wait_until(lambda: self._operations_in_flight == 0)
        drain.operations_done.set()
        if self.status.connected:
            await drain.link_closed.wait()

    def draining_statistics(self) -> tuple[int, int]:
        """(batches sent and not acknowledged, operations running): what a cut drain left."""
        session = self._session
        return (len(session._unacked) if session is not None else 0, self._operations_in_flight)

    def _poke(self) -> None:
        """Wake the drain's waits (called on progress; a no-op unless draining)."""
        if self._drain is not None:
            self._changed.set()
            self._changed = trio.Event()

    async def _wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed.wait()

    async def accounts_changed(
        self, accounts: Sequence[messages.AccountInfo], removed: Sequence[str]
    ) -> None:
        """Announce added/changed/removed accounts (live reload, identity found, dynamic).

        Removed and changed accounts stop at once (a changed one starts again when the server
        assigns it); the announcement itself is queued for the session's own task, so it is
        sent whole by the session that owns the stream, or by the next one.
        """
        session = self._session
        for name in removed:
            self._pending_changes[name] = None
            self.status.roles.pop(name, None)
            self.status.role_reasons.pop(name, None)
            if session is not None:
                session.stop_account(name)
        for info in accounts:
            self._pending_changes[info.name] = info
            if session is not None:
                session.stop_account(info.name)
        self._changes_wakeup.set()

    async def _run_operation(self, operation: messages.Operation) -> None:
        handler = self._operations
        if self._drain is not None:
            await self._results_in.send(shutting_down(operation, "refused it"))
            return
        if self._operations_in_flight >= MAX_OPERATIONS_IN_FLIGHT:
            await self._results_in.send(
                messages.OperationResult(
                    id=operation.id,
                    account=operation.account,
                    ok=False,
                    error_code="Unavailable",
                    error_message=f"the agent is already running {MAX_OPERATIONS_IN_FLIGHT} "
                    "operations; try again later",
                )
            )
            return
        self._operations_in_flight += 1
        try:
            # A drain that runs out of time cancels this scope: the server is told at once
            # (Unavailable) rather than left to wait for its deadline.
            with trio.CancelScope() as scope:
                self._operation_scopes.add(scope)
                try:
                    result = await self._answer(operation, handler)
                finally:
                    self._operation_scopes.discard(scope)
            if scope.cancelled_caught:
                result = shutting_down(operation, "stopped it before it finished")
            await self._results_in.send(result)
        finally:
            self._operations_in_flight -= 1
            self._poke()

    @staticmethod
    async def _answer(
        operation: messages.Operation, handler: OperationHandler | None
    ) -> messages.OperationResult:
        if handler is None:
            return messages.OperationResult(
                id=operation.id,
                account=operation.account,
                ok=False,
                error_code="Unsupported",
                error_message=f"this agent does not run {operation.type!r} operations",
            )
        else:
            result = await handler(operation)
        return result

    # -- one session ---------------------------------------------------------------------

    async def _one_session(self, backoff: Backoff) -> None:
        settings = self._settings
        metadata: dict[str, str] = {}
        if self._token is not None and (token := await self._token()):
            metadata["authorization"] = f"Bearer {token}"
        # Changes queued so far are in this snapshot; later ones go out after the Welcome.
        self._pending_changes.clear()
        accounts = list(await self._hello_accounts())
        hello = messages.Hello(
            protocol_version=wire.PROTOCOL_VERSION,
            agent_id=settings.agent_id,
            instance_id=settings.instance_id,
            agent_version=settings.agent_version,
            accounts=accounts,
            session_token=self._session_token,
        )
        async with open_stream(
            settings.host,
            settings.port,
            ssl_context=settings.ssl_context,
            server_hostname=settings.server_hostname,
            metadata=metadata,
            max_message_size=settings.max_message_size,
            connect_seconds=settings.welcome_timeout_seconds,
        ) as stream:
            unknown = self.status.unknown_fields
            try:
                await stream.send(messages.AgentMessage(hello=hello))
                with trio.fail_after(settings.welcome_timeout_seconds):
                    first = await stream.receive()
                    while not message_kind(first) and skipped_unknown(unknown, first):
                        first = await stream.receive()  # a newer server's message kind
            except wire.ConnectionLost as exc:
                raise wire.ConnectionLost(_before_welcome(exc, settings)) from exc
            name, welcome = betterproto.which_one_of(first, "message")
            if name:
                skipped_unknown(unknown, first)  # fields inside a known message
            if name != "welcome" or not isinstance(welcome, messages.Welcome):
                raise _SessionEnded(f"the server answered Hello with {name or 'nothing'}")
            self._session_token = welcome.session_token
            self.status.connected = True
            self.status.sessions += 1
            self.status.server_id = welcome.server_id
            backoff.reset()
            log.info("connected to server %s with %d account(s)", welcome.server_id, len(accounts))
            send, receive = open_event_channel(self._budget)
            with send, receive:
                async with trio.open_nursery() as nursery:
                    session = _Session(self, stream, nursery, send, receive, welcome.limits)
                    self._session = session
                    session.assign(welcome.accounts)
                    nursery.start_soon(session.send_account_changes)
                    nursery.start_soon(session.send_batches)
                    nursery.start_soon(session.receive_messages)
                    nursery.start_soon(session.send_results)
                    nursery.start_soon(session.drain_when_asked)
                    if settings.heartbeat_seconds > 0:
                        nursery.start_soon(session.heartbeats)


class _SessionEnded(Exception):
    """The session ended for a reason of the protocol (not the network): reconnect."""


class _Session:
    """The tasks of one session; lives inside the session's nursery."""

    def __init__(
        self,
        link: Link,
        stream: wire.ClientStream,
        nursery: trio.Nursery,
        send: EventSender,
        receive: EventReceiver,
        limits: messages.Limits | None = None,
    ) -> None:
        self._link = link
        settings = link._settings
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
        self._events = send
        self._receive = receive
        self._send_lock = trio.Lock()
        self._unacked: dict[int, Batch] = {}
        self._in_flight = trio.Semaphore(max(link._settings.max_batches_in_flight, 1))
        self._seq = 0
        self._accounts: dict[str, trio.CancelScope] = {}
        self._account_tasks = 0  # account runners not yet finished (a drain waits for them)
        self._draining = False
        self._stream_ended = False  # the drain ended our side: the server's OK is next
        self._server_closed = trio.Event()

    async def send(self, message: messages.AgentMessage) -> None:
        # One message at a time on the stream: batches, results and heartbeats interleave
        # whole, never byte by byte.
        async with self._send_lock:
            await self._stream.send(message)

    # -- accounts ----------------------------------------------------------------------------

    def assign(self, assignments: Sequence[messages.AccountAssignment]) -> None:
        for assignment in assignments:
            role = known_role(assignment.role)
            self._link.status.roles[assignment.name] = (
                role.name if role is not None else f"UNKNOWN({int(assignment.role)})"
            )
            if assignment.reason:
                self._link.status.role_reasons[assignment.name] = assignment.reason
            else:
                self._link.status.role_reasons.pop(assignment.name, None)
            if role == messages.Role.PRIMARY:
                self._start_account(assignment)
            else:
                if role == messages.Role.REJECTED:
                    log.error(
                        "account %s rejected by the server: %s",
                        assignment.name,
                        assignment.reason or "no reason given",
                    )
                elif role is None:  # a newer server's role: run nothing, as for STANDBY
                    log.warning(
                        "account %s: the server gave it role %d, which this agent does not "
                        "know: running nothing for it (%s)",
                        assignment.name,
                        int(assignment.role),
                        assignment.reason or "no reason given",
                    )
                self.stop_account(assignment.name)

    def _start_account(self, assignment: messages.AccountAssignment) -> None:
        name = assignment.name
        if name in self._accounts or self._draining:
            return
        max_age = self._link._max_resume_age_ms(name)
        resume = {
            (point.api_version, point.kind, point.scope): point.resource_version
            for point in assignment.resume
            if point.resource_version and point.age_ms <= max_age
        }
        scope = trio.CancelScope()
        self._accounts[name] = scope
        log.info("account %s: PRIMARY, resuming %d kind(s), listing the rest", name, len(resume))
        self._nursery.start_soon(self._run_account, name, resume, scope)

    async def _run_account(
        self, name: str, resume: dict[ResumeKey, str], scope: trio.CancelScope
    ) -> None:
        self._account_tasks += 1
        try:
            with scope:
                await self._link._runner(name, resume, self._events)
        finally:
            self._account_tasks -= 1
            self._link._poke()
        if self._accounts.get(name) is scope:
            del self._accounts[name]

    def stop_account(self, name: str) -> None:
        scope = self._accounts.pop(name, None)
        if scope is not None:
            scope.cancel()

    # -- the three loops ---------------------------------------------------------------------

    async def send_batches(self) -> None:
        settings = self._link._settings
        status = self._link.status
        max_events = self._max_events
        limits = wire.RecordLimits(
            max_events=max_events,
            max_bytes=self._max_message,
            max_object_bytes=self._max_message,
        )
        capacity = self._link._budget.statistics().capacity
        max_bytes = min(self._max_bytes, max(capacity // 4, 64 * 1024))
        while True:
            await self._receive.wait_pending(1, 1)
            await self._in_flight.acquire()
            await self._linger(settings, max_events, max_bytes)
            try:
                batch = self._receive.receive_batch_nowait(max_events, max_bytes)
            except trio.WouldBlock:
                # wait_pending also returns when a sender is blocked on the budget; with the
                # whole budget in flight nothing is pending until an Ack makes room.
                batch = await self._receive.receive_batch(max_events, max_bytes)
            records = self._records_of(batch, limits)
            if not records:
                self._receive.acknowledge(batch)
                self._in_flight.release()
                self._link._poke()
                continue
            self._seq += 1
            self._unacked[self._seq] = batch
            payload = wire.encode_events(records, limits)
            # The envelope is encoded without betterproto objects (~0.1 ms each per batch).
            async with self._send_lock:
                await self._stream.send_event_batch(self._seq, payload, len(records))
            status.batches_sent += 1
            status.events_sent += len(records)
            status.bytes_sent += len(payload)
            self._count_by_kind(records)

    def _count_by_kind(self, records: Sequence[wire.EventRecord]) -> None:
        """Add a batch to the per-kind counters: one dict update per run of one kind (a batch
        is mostly one kind), not one per record."""
        by_kind = self._link.status.events_by_kind
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

    def _records_of(self, batch: Batch, limits: wire.RecordLimits) -> list[wire.EventRecord]:
        # An object bigger than a message can never travel whole. Dropping it would be worse
        # than wrong: a listing's SYNC_END would sweep it from the cache although it exists.
        # So it travels as its metadata, marked, and the operator is told.
        room = limits.max_object_bytes - 4096
        records: list[wire.EventRecord] = []
        for entry in batch.entries:
            record = entry.value
            assert isinstance(record, wire.EventRecord)
            if len(record.object) > room:
                self._link.status.oversize_dropped += 1
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
                )
                record = oversize_stand_in(record, room)
            records.append(record)
        return records

    async def send_account_changes(self) -> None:
        """Announce queued account changes; this task is the only writer of AccountsChanged."""
        link = self._link
        while True:
            await link._changes_wakeup.wait()
            link._changes_wakeup = trio.Event()
            changes, link._pending_changes = link._pending_changes, {}
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
                link._pending_changes = {**changes, **link._pending_changes}
                raise

    async def receive_messages(self) -> None:
        settings = self._link._settings
        quiet = settings.heartbeat_seconds + settings.heartbeat_timeout_seconds
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
        raise _SessionEnded(f"no message from the server for {quiet:.0f} s")

    async def _dispatch(self, message: messages.ServerMessage) -> None:
        name, body = betterproto.which_one_of(message, "message")
        skipped = skipped_unknown(self._link.status.unknown_fields, message)  # counted, logged
        if isinstance(body, messages.Ack):
            self._acknowledged(body.seq)
        elif isinstance(body, messages.Assignment):
            self.assign(body.accounts)
        elif isinstance(body, messages.Operation):
            assert self._link._operations_nursery is not None
            self._link._operations_nursery.start_soon(self._link._run_operation, body)
        elif isinstance(body, messages.Heartbeat):
            pass  # its arrival already moved the deadline
        elif name:
            raise _SessionEnded(f"unexpected {name} message from the server")
        elif not skipped:  # a kind this version does not know is skipped, not an error
            raise _SessionEnded("an empty message from the server")

    def _acknowledged(self, seq: int) -> None:
        batch = self._unacked.pop(seq, None)
        if batch is None:
            raise _SessionEnded(f"the server acknowledged unknown batch {seq}")
        self._receive.acknowledge(batch)
        self._in_flight.release()
        self._link._poke()

    async def drain_when_asked(self) -> None:
        """The session's part of a drain: stop the runners, send what the channel holds and
        wait for its Acks and for the operations' results to be sent, then end the stream
        and wait for the server's OK; then end the session."""
        link = self._link
        await link._drain_requested.wait()
        drain = link._drain
        assert drain is not None
        self._draining = True
        for name in list(self._accounts):
            self.stop_account(name)
        receive = self._receive
        await link._wait_until(lambda: self._account_tasks == 0)
        await link._wait_until(
            lambda: not receive.statistics().pending_entries and not self._unacked
        )
        log.info(
            "shutdown: every event taken from the watches is acknowledged (%d batches sent)",
            self._seq,
        )
        await drain.operations_done.wait()
        results = link._results_out
        await link._wait_until(
            lambda: not results.statistics().current_buffer_used and not link._unsent
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
        link = self._link
        results = link._results_out
        while True:
            if not link._unsent:
                link._unsent.append(await results.receive())
            while len(link._unsent) < MAX_RESULTS_PER_WRITE:
                try:
                    link._unsent.append(results.receive_nowait())
                except trio.WouldBlock:
                    break
            # A result too large for the server is reported as a failure: sent as it is, it
            # would be refused (or fail the write) with every session, and hold back the
            # results behind it.
            link._unsent = [reportable(r, self._max_message) for r in link._unsent]
            async with self._send_lock:
                await self._stream.send_operation_results(link._unsent)
            link._unsent = []
            link._poke()

    async def heartbeats(self) -> None:
        period = self._link._settings.heartbeat_seconds
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


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def _leaves_of(exc: BaseException) -> list[BaseException]:
    return _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return "the server did not answer Hello in time"
    return str(exc) or type(exc).__name__


def _before_welcome(exc: wire.ConnectionLost, settings: LinkSettings) -> str:
    """Why a connection that broke before the Welcome broke, as far as we can tell.

    A TLS server that does not trust our client certificate (TLS 1.3) completes the handshake
    from our side and then just closes the connection: no gRPC status can say why, so say
    what it most likely means."""
    reason = f"{exc} before the server answered Hello"
    if settings.ssl_context is not None:
        reason += (
            " (over TLS this is how a server refuses a client certificate it does not trust: "
            "check clouddriver.tls.clientCertFile against the server's client CA)"
        )
    return reason


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
