"""The agent's link to the server: one outbound gRPC stream, reconnected for ever.

Theory of operation. ``Link.run`` opens one *session* (one Connect call) after another. A
session opens the stream (with a deadline on the TCP connect and the TLS handshake), sends
Hello (the accounts with their cluster identity, and the previous session's token when
resuming) and waits for the server's Welcome, which gives every account a role and, for
PRIMARY ones, the resourceVersions the server stored per kind; messages of a kind this version
does not know that come before it are skipped. The session's tasks (account runners, batch
and result senders, receiver, heartbeat, drain) are in agent/link/_session.py.

Operations run in the link's own nursery, not the session's: one still running when the
stream drops finishes, and its result waits in a bounded outbox for the next session (the
executor de-duplicates by id, so an operation the server sends again never runs twice). Past
MAX_OPERATIONS_IN_FLIGHT, or during a drain, an operation is answered Unavailable at once.

When a session ends, the whole session nursery goes: runners stop, the channel is closed and
every byte it held returns to the budget. Nothing is lost by that: the server stores a kind's
resourceVersion in the same transaction as the objects it acknowledges, so the next session
resumes each kind from exactly what the server has.

How a session ended decides when the next one opens, in one place (``_until_next_session``):

* any failure to open, use or keep the stream (wire's errors: a lost connection, a refusal, a
  protocol violation; no connect, Welcome or message in time; an AgentError such as a token
  that cannot be read) is a broken link: one log line with the reason and the delay, then the
  backoff, which a Welcome resets. Only cancellation and bugs of our own end ``run``;
* a server that is shutting down ends the call with UNAVAILABLE and a message starting with
  ``wire.DRAINING``: when that ends a session that had its Welcome, the next one opens at
  once, with no backoff but a random spread of up to half a second (behind a Kubernetes
  Service or a load balancer, that reaches another replica); the same status refusing a
  Hello is a broken link like any other, so a proxy that keeps sending us to the draining
  pod costs backoff, not a tight loop;
* with several server addresses (``clouddriver.grpcAddresses``) each failure moves to the
  next one at once, and the backoff is waited once per round of failures over all of them;
  a draining server's end moves to the next address (agent/link/_rotation.py);
* a server too busy to answer Hello within ``welcome_timeout_seconds`` (a replica restarted
  on a crowded node while 1,000 agents reconnect) is given longer each time it is late: the
  wait (and the connect deadline) doubles per late Welcome in a row, up to 8 times the
  setting, and a Welcome sets it back. Giving up at the same bound every time had each agent
  hang up just before its turn and start over, so a starved server never caught up
  (bench_agents at load 9-14); likewise a server that says nothing (no Ack, no answer to a
  heartbeat) for the session's allowance ends it, and the allowance doubles per session in a
  row ended so, up to 8 times ``heartbeat_seconds + heartbeat_timeout_seconds``;
* during our own drain (``drain(deadline)``, on SIGTERM; agent/link/_drain.py) no session
  follows: ``drain`` returns once the session has ended, or at once when none is connected,
  and the caller then cancels ``run``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence

import betterproto
import trio

import wire
from budget import ByteBudget, open_event_channel
from wire import messages

from .._backoff import Backoff
from .._errors import AgentError
from ._drain import RESULTS_RESERVE_SECONDS, Drain, shutting_down
from ._edge import message_kind, open_stream, skipped_unknown
from ._rotation import AddressRotation, ServerAddress
from ._session import (
    OVERSIZE_ANNOTATION,
    LinkState,
    ServerSilent,
    Session,
    SessionEnded,
    reportable,
)
from ._settings import AccountRunner, LinkSettings, LinkStatus, OperationHandler, ResumeKey

# Re-exported: callers in agent/ and tests/ import these from here.
__all__ = [
    "MAX_OPERATIONS_IN_FLIGHT",
    "MAX_PENDING_RESULTS",
    "OVERSIZE_ANNOTATION",
    "AccountRunner",
    "Link",
    "LinkSettings",
    "LinkStatus",
    "OperationHandler",
    "ResumeKey",
    "reportable",
]

log = logging.getLogger("agent.link")

#: The reconnect after a draining server ended our session waits a random moment up to this.
DRAIN_RECONNECT_SPREAD_SECONDS = 0.5

#: Operation results waiting for a session to carry them; past this, operations wait.
MAX_PENDING_RESULTS = 256
#: Operations running at once; past this the agent answers Unavailable at once.
MAX_OPERATIONS_IN_FLIGHT = 512

#: The waits below double per session in a row that ran out of one, this many times at most.
DOUBLINGS = 3

#: A session that had its Welcome this long before the server fell silent starts a new row.
SILENCE_ROW_SECONDS = 600.0


def _doubled(seconds: float, times: int) -> float:
    return float(seconds * 2 ** min(times, DOUBLINGS))


def welcome_wait(settings: LinkSettings, late_welcomes: int) -> float:
    """How long the next session waits to connect and for its Welcome, after
    ``late_welcomes`` sessions in a row ended waiting for one (see the module docstring)."""
    return _doubled(settings.welcome_timeout_seconds, late_welcomes)


def silence_wait(settings: LinkSettings, silent_sessions: int) -> float:
    """How long the next session lets the server say nothing (no Ack, no answer to a
    heartbeat) before giving it up, after ``silent_sessions`` sessions in a row ended so."""
    return _doubled(
        settings.heartbeat_seconds + settings.heartbeat_timeout_seconds, silent_sessions
    )


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
        self._hello_accounts = hello_accounts
        self._operations = operations
        self._token = token
        self._session_token = ""
        self._session: Session | None = None
        self._connected_at = 0.0  # when the current session had its Welcome
        self.status = LinkStatus()
        # Operations outlive sessions: one that is running when the stream drops finishes, and
        # its result waits in the outbox (bounded; a full outbox holds the next operation
        # back) for the next session.
        self._results_in, results_out = trio.open_memory_channel[messages.OperationResult](
            MAX_PENDING_RESULTS
        )
        self._operations_nursery: trio.Nursery | None = None
        self._operations_in_flight = 0
        self._operation_scopes: set[trio.CancelScope] = set()  # a drain cut short ends them
        # Account changes wait in state.pending_changes for a session to announce them. Newest
        # wins per name, so it holds at most one entry per account; a session's own task
        # sends it (nothing else writes to the stream).
        self._state = LinkState(
            settings=settings,
            budget=budget,
            status=self.status,
            runner=runner,
            max_resume_age_ms=max_resume_age_ms,
            start_operation=self._start_operation,
            results=results_out,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve a session, reconnect after it ends (see the module docstring);
        never returns. Owns the nursery the operations run in."""
        backoff = self._settings.backoff
        rotation = AddressRotation(self._settings.server_addresses())
        late_welcomes = 0
        silent_sessions = 0
        async with trio.open_nursery() as operations_nursery:
            self._operations_nursery = operations_nursery
            task_status.started()
            while True:
                server_draining = False
                silent = False
                address = rotation.current
                try:
                    wait = welcome_wait(self._settings, late_welcomes)
                    silence = silence_wait(self._settings, silent_sessions)
                    await self._one_session(address, backoff, rotation, wait, silence)
                except* (wire.WireError, trio.TooSlowError, SessionEnded, AgentError) as group:
                    # Whatever the network or the server did: one line, then the next session.
                    leaves = _leaves(group)
                    silent = any(isinstance(leaf, ServerSilent) for leaf in leaves)
                    if not self.status.connected and any(
                        isinstance(leaf, trio.TooSlowError) for leaf in leaves
                    ):
                        late_welcomes += 1  # only a Welcome sets it back (below)
                    # At once only when a session we had (a Welcome) was ended by the drain:
                    # a draining server also refuses new Hellos with that status, and behind a
                    # proxy that keeps its connection to the draining pod, "at once" after such
                    # a refusal would loop Hello, refusal, Hello for the whole drain.
                    server_draining = self.status.connected and any(
                        wire.is_draining(leaf) for leaf in leaves
                    )
                    if self.status.connected:
                        self.status.disconnections += 1
                    self.status.last_error = "; ".join(dict.fromkeys(map(_describe, leaves)))
                finally:
                    if self.status.connected:
                        late_welcomes = 0
                        silent_sessions = self._silent_sessions(silent, silent_sessions, silence)
                    self.status.connected = False
                    self.status.roles.clear()
                    self.status.role_reasons.clear()
                    self._session = None
                await self._until_next_session(
                    address, backoff, rotation, server_draining=server_draining
                )

    def _silent_sessions(self, silent: bool, before: int, silence: float) -> int:
        """The count of sessions in a row the server's silence ended, after one that had its
        Welcome: a server too busy to answer (1,000 agents reconnecting to a starved replica)
        is given twice as long each time, as a late Welcome is, rather than every agent
        hanging up at the same bound and reconnecting, which adds to its load. Any other end,
        or a silence after a long healthy session, starts over."""
        if not silent:
            return 0
        lasted = trio.current_time() - self._connected_at
        count = (0 if lasted >= SILENCE_ROW_SECONDS else before) + 1
        log.info(
            "the server said nothing for %.0f s; the next session allows it %.0f s",
            silence,
            silence_wait(self._settings, count),
        )
        return count

    async def _until_next_session(
        self,
        address: ServerAddress,
        backoff: Backoff,
        rotation: AddressRotation,
        *,
        server_draining: bool,
    ) -> None:
        """The one place that decides when (and where) the next session opens, after the one
        on ``address`` ended: never during our own drain; at once, on the next address, when
        a draining server ended it; else on the next address, at once while a round of the
        addresses lasts and after the backoff once every one has failed."""
        if self._state.drain is not None:  # shutting down: no new session
            self._state.drain.link_closed.set()
            await trio.sleep_forever()
        if server_draining:
            rotation.drained()
            # Spread the agents the drain sets loose (all of them at the same instant) over
            # a moment, so the replica that takes them over is not hit by all at once.
            delay = random.uniform(0.0, DRAIN_RECONNECT_SPREAD_SECONDS)
            log.info(
                "the server is draining: reconnecting in %.2f s (to %s)", delay, rotation.current
            )
            await trio.sleep(delay)
            return
        if not rotation.failed():
            log.warning(
                "link to %s lost: %s; trying %s at once",
                address,
                self.status.last_error,
                rotation.current,
            )
            await trio.lowlevel.checkpoint()
            return
        delay = backoff.next_delay()
        log.warning(
            "link to %s lost: %s; reconnecting in %.2f s%s",
            address,
            self.status.last_error,
            delay,
            f" (to {rotation.current})" if len(rotation.addresses) > 1 else "",
        )
        await trio.sleep(delay)

    # -- drain ----------------------------------------------------------------------------

    async def drain(self, deadline: float) -> None:
        """Drain the link for a shutdown by ``deadline`` (trio's clock); see
        agent/link/_drain.py. Returns once the stream is closed, or at once when no session
        is open. The caller cancels it at ``deadline`` if it has not returned by then."""
        state = self._state
        now = trio.current_time()
        reserve = min(RESULTS_RESERVE_SECONDS, max(deadline - now, 0.0) / 4)
        drain = Drain(deadline=deadline, operations_deadline=deadline - reserve)
        state.drain = drain
        state.drain_requested.set()
        with trio.move_on_at(drain.operations_deadline):
            await state.wait_until(lambda: self._operations_in_flight == 0)
        if self._operation_scopes:
            log.warning(
                "shutdown: ending %d operation(s) still running", len(self._operation_scopes)
            )
            for scope in list(self._operation_scopes):
                scope.cancel()
        await state.wait_until(lambda: self._operations_in_flight == 0)
        drain.operations_done.set()
        if self.status.connected:
            await drain.link_closed.wait()

    def draining_statistics(self) -> tuple[int, int]:
        """(batches sent and not acknowledged, operations running): what a cut drain left."""
        session = self._session
        unacked = session.unacked_batches if session is not None else 0
        return (unacked, self._operations_in_flight)

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
            self._state.pending_changes[name] = None
            self.status.roles.pop(name, None)
            self.status.role_reasons.pop(name, None)
            if session is not None:
                session.stop_account(name)
        for info in accounts:
            self._state.pending_changes[info.name] = info
            if session is not None:
                session.stop_account(info.name)
        self._state.changes_wakeup.set()

    def _start_operation(self, operation: messages.Operation) -> None:
        """Run ``operation`` in the link's nursery (a session's receiver calls this)."""
        assert self._operations_nursery is not None
        self._operations_nursery.start_soon(self._run_operation, operation)

    async def _run_operation(self, operation: messages.Operation) -> None:
        handler = self._operations
        if self._state.drain is not None:
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
            self._state.poke()

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

    async def _one_session(
        self,
        address: ServerAddress,
        backoff: Backoff,
        rotation: AddressRotation,
        wait: float,
        silence: float,
    ) -> None:
        settings = self._settings
        self.status.server_address = str(address)
        metadata: dict[str, str] = {}
        if self._token is not None and (token := await self._token()):
            metadata["authorization"] = f"Bearer {token}"
        # Changes queued so far are in this snapshot; later ones go out after the Welcome.
        self._state.pending_changes.clear()
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
            address.host,
            address.port,
            ssl_context=settings.ssl_context,
            server_hostname=settings.server_hostname,
            metadata=metadata,
            max_message_size=settings.max_message_size,
            connect_seconds=wait,
        ) as stream:
            unknown = self.status.unknown_fields
            try:
                await stream.send(messages.AgentMessage(hello=hello))
                with trio.fail_after(wait):
                    first = await stream.receive()
                    while not message_kind(first) and skipped_unknown(unknown, first):
                        first = await stream.receive()  # a newer server's message kind
            except wire.ConnectionLost as exc:
                raise wire.ConnectionLost(_before_welcome(exc, settings)) from exc
            name, welcome = betterproto.which_one_of(first, "message")
            if name:
                skipped_unknown(unknown, first)  # fields inside a known message
            if name != "welcome" or not isinstance(welcome, messages.Welcome):
                raise SessionEnded(f"the server answered Hello with {name or 'nothing'}")
            self._session_token = welcome.session_token
            self._connected_at = trio.current_time()
            self.status.connected = True
            self.status.sessions += 1
            self.status.server_id = welcome.server_id
            backoff.reset()
            rotation.connected()
            log.info(
                "connected to server %s at %s with %d account(s)",
                welcome.server_id,
                address,
                len(accounts),
            )
            send, receive = open_event_channel(self._state.budget)
            with send, receive:
                async with trio.open_nursery() as nursery:
                    session = Session(
                        self._state, stream, nursery, send, receive, welcome.limits, silence
                    )
                    self._session = session
                    session.assign(welcome.accounts)
                    nursery.start_soon(session.send_account_changes)
                    nursery.start_soon(session.send_batches)
                    nursery.start_soon(session.receive_messages)
                    nursery.start_soon(session.send_results)
                    nursery.start_soon(session.drain_when_asked)
                    if settings.heartbeat_seconds > 0:
                        nursery.start_soon(session.heartbeats)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``, however deeply grouped; ``[exc]`` when not a group."""
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]


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
