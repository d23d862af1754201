"""The Connect handler that ``wire.serve`` runs for each agent call.

Theory of operation. A call is authenticated before anything is read (JWT bearer, client
certificate subject), then must open with a Hello (protocol version, agent id, accounts). The
accounts are registered (PRIMARY / STANDBY / REJECTED) and a Welcome answers with the session
token, limits, and per account the role and the resume points. Then one task receives and one
sends: an EventBatch is decoded, its records for accounts this session serves as PRIMARY are
applied in ONE store transaction, and only after the commit is the Ack queued; Heartbeats are
answered; AccountsChanged re-registers; OperationResults go to the operations hook. A message
kind (oneof member) or field this version does not know is skipped, counted and logged once per
field number, as protobuf promises the next version: the call goes on. Everything
the server sends goes through the session's bounded outbound channel, so Acks, Assignments
and Operations keep their order. Any malformed message or protocol violation ends the call
with a gRPC status saying what and where (wire.Refuse) and a log line; the store is only ever
touched in whole transactions, so a broken session leaves it consistent. However the call
ends, the session is closed: its roles pass to standbys, or its accounts turn ORPHANED.

Drain (``drain(message)``, on SIGTERM). Each call stops receiving between two messages (a
batch being received is applied and acknowledged first), sends what its outbound queue holds
(the Acks), and ends with UNAVAILABLE and ``message`` (which starts with ``wire.DRAINING``):
the agent connects again at once, to another replica behind the same address. A call that
has not opened its session yet, also one still waiting for its Hello, is refused so at once.
``wait_closed`` returns when no call is left.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import betterproto
import trio

import wire
from wire import messages

from ._auth import Authenticator, Principal
from ._errors import AuthError, InvalidRecord, ServerError, StoreError
from ._registry import Claim, Role, RoleChange
from ._sessions import Session, claim_from_info
from ._state import ServerState
from ._watch_status import WatchStatusRefused, kind_status, log_restored, watch_scope
from .store import scrub_secret_records

log = logging.getLogger("server.grpc")
_CLEANUP_SECONDS = 10.0
#: After a drain's bound, the sessions still open get this long to close (their roles pass
#: on, the closed sessions are recorded): the whole shutdown must end inside the pod's grace
#: period (docs/configuration.md "Shutdown"), not at drainSeconds + _CLEANUP_SECONDS.
CLOSE_AFTER_DRAIN_SECONDS = 2.0
_SEND_SECONDS = 2.0


@dataclass(slots=True, eq=False)
class _Call:
    """One open call, as a drain sees it."""

    stream: wire.ServerStream
    draining: bool = False
    # Set while the call waits for a message, the Hello or a later one (a drain cancels the
    # wait).
    waiting: trio.CancelScope | None = None

    def drain(self) -> None:
        self.draining = True
        # A message half received is read whole (and applied, and acknowledged) first:
        # cancelling its receive would reset the call instead of ending it with the status.
        if self.waiting is not None and not self.stream.mid_message:
            self.waiting.cancel()


def _refuse(status: wire.Status, message: str, peer: str) -> wire.Refuse:
    log.warning("refusing agent call from %s: %s %s", peer or "?", status.name, message)
    return wire.Refuse(status, message)


class ConnectHandler:
    """``await handler(stream, call)`` for each Connect call (see the module docstring)."""

    def __init__(self, state: ServerState, authenticator: Authenticator) -> None:
        self._state = state
        self._auth = authenticator
        cfg = state.config
        self._limits = wire.RecordLimits(
            max_events=cfg.sessions.max_batch_events,
            max_bytes=cfg.grpc.max_message_size,
            max_object_bytes=cfg.grpc.max_message_size,
        )
        self._calls: set[_Call] = set()
        self._drain_message = ""
        self._calls_changed = trio.Event()
        # When the sessions still open must be closed by (set by a drain's bound).
        self._close_deadline = math.inf

    def drain(self, message: str, *, deadline: float = math.inf) -> None:
        """End every open call (and refuse new ones) with UNAVAILABLE ``message``, each
        between two messages; see the module docstring. ``deadline`` (trio's clock) is the
        drain's bound: a session still closing then gets CLOSE_AFTER_DRAIN_SECONDS more."""
        self._drain_message = message
        self._close_deadline = deadline + CLOSE_AFTER_DRAIN_SECONDS
        for open_call in self._calls:
            open_call.drain()

    async def wait_closed(self) -> None:
        """Return once no call is open (after ``drain``)."""
        while self._calls:
            await self._calls_changed.wait()

    async def __call__(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        peer = f"{call.peer[0]}:{call.peer[1]}" if call.peer else ""
        open_call = _Call(stream, draining=bool(self._drain_message))
        self._calls.add(open_call)
        try:
            await self._serve(stream, call, peer, open_call)
        except ServerError as exc:
            # A store failure outside a batch (opening the session, registering, an operation
            # result's journal write) ends this call, never the server: the bridge would
            # re-raise it out of wire.serve. The agent reconnects and resumes.
            log.error("agent call from %s ended by a server failure: %s", peer or "?", exc)
            raise wire.Refuse(wire.Status.UNAVAILABLE, "the server's store failed; retry") from exc
        finally:
            self._calls.discard(open_call)
            self._calls_changed.set()
            self._calls_changed = trio.Event()

    async def _serve(
        self, stream: wire.ServerStream, call: wire.CallInfo, peer: str, open_call: _Call
    ) -> None:
        try:
            principal = self._auth.authenticate(call.metadata, call.peer_cert)
        except AuthError as exc:
            raise _refuse(wire.Status[exc.status], str(exc), peer) from exc
        # The wait for the Hello is a wait between two messages too: a drain cancels it, or
        # one silent connection opened just before SIGTERM would hold the drain for the
        # Hello's whole timeout.
        with trio.CancelScope() as waiting:
            open_call.waiting = waiting
            if open_call.draining:
                waiting.cancel()
            try:
                hello = await self._receive_hello(stream, peer)
            finally:
                open_call.waiting = None
        if open_call.draining or waiting.cancelled_caught:
            raise wire.Refuse(wire.Status.UNAVAILABLE, self._drain_message)
        claims = self._claims(hello, principal, peer)
        sessions = self._state.sessions
        # open() undoes its own registration when it fails, so nothing leaks before the try.
        session = await sessions.open(hello, peer, principal)
        log.info(
            "agent %s (%s) connected from %s as session %s with %d accounts%s",
            hello.agent_id,
            hello.agent_version,
            peer,
            session.session_id,
            len(claims),
            # The previous session's token is a hint only (logged), never a credential:
            # every call authenticates afresh and gets a new session.
            " (resuming)" if hello.session_token else "",
        )
        try:
            with session.cancel_scope:
                decisions = await sessions.register(session, claims)
                welcome = messages.Welcome(
                    session_token=session.token,
                    server_id=self._state.server_id,
                    limits=messages.Limits(
                        max_message_size=self._state.config.grpc.max_message_size,
                        max_batch_events=self._state.config.sessions.max_batch_events,
                    ),
                    accounts=[await sessions.assignment(d) for d in decisions],
                )
                _log_rejections(session, decisions)
                await stream.send(messages.ServerMessage(welcome=welcome))
                try:
                    async with trio.open_nursery() as nursery:
                        sent_all = trio.Event()
                        nursery.start_soon(self._send_loop, stream, session, sent_all)
                        nursery.start_soon(self._heartbeat_loop, session)
                        nursery.start_soon(self._token_expiry, session, principal)
                        await self._receive_loop(stream, session, principal, peer, open_call)
                        if open_call.draining:
                            # What is queued (the Acks of the batches applied) goes out
                            # before the status; then the sender ends.
                            session.outbound.close()
                            await sent_all.wait()
                        nursery.cancel_scope.cancel()
                except BaseExceptionGroup as group:
                    raise _collapse(group) from None
        finally:
            with trio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = min(trio.current_time() + _CLEANUP_SECONDS, self._close_deadline)
                try:
                    await sessions.close(session)
                except ServerError as exc:
                    # The registry in memory is already updated; its unsaved changes stay
                    # dirty and go out with the next successful persist.
                    log.error("session %s: closing it hit the store: %s", session.session_id, exc)
            log.info(
                "session %s of agent %s closed%s",
                session.session_id,
                session.agent_id,
                f": {session.ended_reason}" if session.ended_reason else "",
            )
        if open_call.draining:
            raise wire.Refuse(wire.Status.UNAVAILABLE, self._drain_message)
        if session.ended_reason:
            raise wire.Refuse(wire.Status.UNAVAILABLE, f"session ended: {session.ended_reason}")

    # -- the opening ----------------------------------------------------------------------

    async def _receive_hello(self, stream: wire.ServerStream, peer: str) -> messages.Hello:
        timeout = self._state.config.sessions.hello_timeout_seconds
        with trio.move_on_after(timeout):
            message = await stream.receive()
            name, value = betterproto.which_one_of(message, "message")
            while not name and self._skipped_unknown(message, peer):
                # A newer agent's message kind: skipped here too, the Hello may follow.
                message = await stream.receive()
                name, value = betterproto.which_one_of(message, "message")
            if name != "hello":
                raise _refuse(
                    wire.Status.FAILED_PRECONDITION,
                    f"expected Hello as the first message, got {name or 'an empty message'}",
                    peer,
                )
            hello: messages.Hello = value
            self._skipped_unknown(message, peer)
            if hello.protocol_version != wire.PROTOCOL_VERSION:
                raise _refuse(
                    wire.Status.FAILED_PRECONDITION,
                    f"protocol version {hello.protocol_version} is not supported; this server "
                    f"speaks {wire.PROTOCOL_VERSION}",
                    peer,
                )
            if not hello.agent_id:
                raise _refuse(wire.Status.INVALID_ARGUMENT, "Hello.agent_id is empty", peer)
            return hello
        raise _refuse(wire.Status.DEADLINE_EXCEEDED, f"no Hello within {timeout:g} s", peer)

    def _claims(
        self, hello: messages.Hello | messages.AccountsChanged, principal: Principal, peer: str
    ) -> list[Claim]:
        limit = self._state.config.sessions.max_accounts_per_agent
        if len(hello.accounts) > limit:
            raise _refuse(
                wire.Status.INVALID_ARGUMENT,
                f"{len(hello.accounts)} accounts exceed the limit of {limit}",
                peer,
            )
        claims = []
        for i, info in enumerate(hello.accounts):
            try:
                claims.append(claim_from_info(info))
            except ValueError as exc:
                raise _refuse(wire.Status.INVALID_ARGUMENT, f"accounts[{i}]: {exc}", peer) from exc
        # One agent serves an account whole or one of its shards (a name once in a Hello).
        names = [c.account for c in claims]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise _refuse(
                wire.Status.INVALID_ARGUMENT,
                f"accounts listed twice: {', '.join(duplicated)}",
                peer,
            )
        refused = [n for n in names if not principal.may_register(n)]
        if refused:
            raise _refuse(
                wire.Status.PERMISSION_DENIED,
                f"the bearer token does not allow account(s): {', '.join(refused)}",
                peer,
            )
        return claims

    # -- the session ----------------------------------------------------------------------

    async def _send_loop(
        self, stream: wire.ServerStream, session: Session, sent_all: trio.Event
    ) -> None:
        async for message in session.outbox:
            # Each message goes out whole: a send cut by the cancellation that ends a refused
            # call resets the stream, and the agent would get a reset instead of the status
            # saying what it did wrong. Bounded, for a peer that stopped reading.
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + _SEND_SECONDS
                await stream.send(message)
        sent_all.set()  # the queue was closed (a drain) and everything in it is sent

    async def _heartbeat_loop(self, session: Session) -> None:
        period = self._state.config.sessions.heartbeat_seconds
        if period <= 0:
            return
        while True:
            await trio.sleep(period)
            session.post(messages.ServerMessage(heartbeat=messages.Heartbeat(sent_at_ms=_now_ms())))

    async def _token_expiry(self, session: Session, principal: Principal) -> None:
        """End the session when its bearer token stops being valid (``exp`` plus the leeway
        the check at connect allowed): the agent reconnects with a fresh token."""
        if principal.expires_at is None:
            return
        await trio.sleep(max(0.0, principal.expires_at - time.time()))
        session.end("its bearer token expired; reconnect with a fresh one")

    async def _receive_loop(
        self,
        stream: wire.ServerStream,
        session: Session,
        principal: Principal,
        peer: str,
        open_call: _Call,
    ) -> None:
        last_seq = 0
        while not open_call.draining:
            try:
                with trio.CancelScope() as waiting:
                    open_call.waiting = waiting
                    try:
                        message = await stream.receive()
                    finally:
                        open_call.waiting = None
            except wire.EndOfStream:
                return
            if waiting.cancelled_caught:
                return  # a drain, between two messages
            session.last_seen_ms = _now_ms()
            name, value = betterproto.which_one_of(message, "message")
            skipped = self._skipped_unknown(message, peer)
            if name == "event_batch":
                last_seq = await self._batch(session, value, last_seq, peer)
            elif name == "heartbeat":
                reply = messages.Heartbeat(sent_at_ms=_now_ms())
                await session.outbound.send(messages.ServerMessage(heartbeat=reply))
            elif name == "accounts_changed":
                await self._accounts_changed(session, value, principal, peer)
            elif name == "operation_result":
                await self._state.operations.on_result(session, value)
            elif name in ("kind_status", "watch_scope"):
                await self._watch_status(session, name, value, peer)
            elif name == "hello":
                raise _refuse(wire.Status.FAILED_PRECONDITION, "Hello sent twice", peer)
            elif not skipped:  # a kind this version does not know was skipped above
                raise _refuse(wire.Status.INVALID_ARGUMENT, "an empty AgentMessage", peer)

    def _skipped_unknown(self, message: messages.AgentMessage, peer: str) -> bool:
        """Count the fields of ``message`` this version does not know (an unknown oneof
        member is one of AgentMessage's) and log each field number the first time it is
        seen; whether there were any. They are skipped: a newer agent may send them."""
        found = wire.unknown_fields(message)
        if not found:
            return False
        counter = self._state.unknown_fields
        for key in counter.note(found):
            log.warning(
                "agent at %s sent %s, which this server does not know: skipped (logged once; "
                "counted in kubesvc_protocol_unknown_fields_total)",
                peer or "?",
                counter.describe(key),
            )
        return True

    async def _batch(
        self, session: Session, batch: messages.EventBatch, last_seq: int, peer: str
    ) -> int:
        if batch.seq != last_seq + 1:
            # docs/protocol.md, "Sequence numbers and acks": a gap or a repeat means the two
            # sides disagree about what was sent. Nothing is applied; the agent reconnects and
            # its new session resends, from the stored resume points, all it did not get acked.
            raise _refuse(
                wire.Status.ABORTED,
                f"batch seq {batch.seq} does not follow seq {last_seq} (expected "
                f"{last_seq + 1}: seqs start at 1 in each session and grow by 1 per batch)",
                peer,
            )
        try:
            records = wire.decode_events(batch.records, self._limits)
        except wire.RecordError as exc:
            raise _refuse(
                wire.Status.INVALID_ARGUMENT, f"batch seq {batch.seq}: {exc}", peer
            ) from exc
        if batch.count != len(records):
            raise _refuse(
                wire.Status.INVALID_ARGUMENT,
                f"batch seq {batch.seq} says {batch.count} records, holds {len(records)}",
                peer,
            )
        # Secrets lose data/stringData/last-applied here, once, before both the store and
        # the live feed see them (the agent strips them too; the server does not rely on it).
        kept = scrub_secret_records(self._served(session, records, batch.seq, peer))
        if kept:
            try:
                outcome = await self._state.store.apply_events(kept)
            except InvalidRecord as exc:
                raise _refuse(
                    wire.Status.INVALID_ARGUMENT, f"batch seq {batch.seq}: {exc}", peer
                ) from exc
            except StoreError as exc:
                log.error(
                    "session %s: store failed on batch seq %d: %s",
                    session.session_id,
                    batch.seq,
                    exc,
                )
                raise wire.Refuse(
                    wire.Status.UNAVAILABLE, "the server's store failed; retry"
                ) from exc
            # Objects a relist found gone are deletions too, for the feed's subscribers.
            self._state.feed.publish(kept, swept=outcome.swept)
            log_restored(outcome.restored)
        await session.outbound.send(messages.ServerMessage(ack=messages.Ack(seq=batch.seq)))
        seq: int = batch.seq
        return seq

    async def _watch_status(
        self,
        session: Session,
        name: str,
        value: messages.KindStatus | messages.WatchScope,
        peer: str,
    ) -> None:
        """A KindStatus or WatchScope (server/_watch_status.py), applied in stream order."""
        try:
            if isinstance(value, messages.KindStatus):
                await kind_status(self._state, session, value)
            else:
                await watch_scope(self._state, session, value)
        except WatchStatusRefused as exc:
            raise _refuse(wire.Status[exc.status], str(exc), peer) from exc
        except StoreError as exc:
            log.error("session %s: store failed on %s: %s", session.session_id, name, exc)
            raise wire.Refuse(wire.Status.UNAVAILABLE, "the server's store failed; retry") from exc

    def _served(
        self, session: Session, records: Sequence[wire.EventRecord], seq: int, peer: str
    ) -> list[wire.EventRecord]:
        """The records for accounts this session serves as PRIMARY. Records of accounts it
        never declared are a protocol violation; those of accounts it declared but does not
        lead (STANDBY, REJECTED, deleted meanwhile) are dropped."""
        registry = self._state.accounts.registry
        primary: dict[str, bool] = {}
        kept = []
        for record in records:
            account = record.account
            if account not in primary:
                if account not in session.declared:
                    raise _refuse(
                        wire.Status.FAILED_PRECONDITION,
                        f"batch seq {seq} has records for account {account!r}, which "
                        "this session did not register",
                        peer,
                    )
                unit = session.unit(account)
                primary[account] = registry.role(session.session_id, unit) is Role.PRIMARY
            if primary[account]:
                kept.append(record)
        if len(kept) < len(records):
            log.debug(
                "session %s: dropped %d records of accounts it does not lead",
                session.session_id,
                len(records) - len(kept),
            )
        return kept

    async def _accounts_changed(
        self, session: Session, change: messages.AccountsChanged, principal: Principal, peer: str
    ) -> None:
        claims = self._claims(change, principal, peer)
        sessions = self._state.sessions
        if change.removed:
            await sessions.unregister(session, change.removed)
        decisions = await sessions.register(session, claims) if claims else []
        _log_rejections(session, decisions)
        if decisions:
            assignments = [await sessions.assignment(d) for d in decisions]
            await session.outbound.send(
                messages.ServerMessage(assignment=messages.Assignment(accounts=assignments))
            )


def _log_rejections(session: Session, decisions: Sequence[RoleChange]) -> None:
    """Log each REJECTED decision with its reason (at Hello and at AccountsChanged alike: an
    agent usually announces an account late, once it has read the cluster's identity)."""
    for d in decisions:
        if d.role is Role.REJECTED:
            log.warning(
                "session %s: account %s rejected: %s",
                session.session_id,
                d.account,
                d.reason,
                extra={"account": d.account},
            )


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return leaves


def _collapse(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error the bridge should see from the session's nursery: a Refuse (the status
    to end the call with) before a wire error (the call is already over); anything else is a
    bug and stays a group."""
    leaves = [e for e in _leaves(group) if not isinstance(e, trio.Cancelled)]
    for kind in (wire.Refuse, wire.WireError):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return group


def _now_ms() -> int:
    """Wall-clock milliseconds, for heartbeats and last-seen times."""
    return int(time.time() * 1000)
