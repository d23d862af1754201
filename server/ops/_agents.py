"""Operations out to this replica's agent sessions, and their answers back. The trio part.

Theory of operation. ``send`` finds the account's PRIMARY session on this replica, takes one
of ``max_in_flight`` slots (the session's outbound queue is bounded and a full one ends the
session, so unanswered operations are kept well under it), queues the Operation and waits for
``on_result`` (the session's receive loop) or the session's end (the session manager's close
listener), all under the caller's deadline. At most once: an operation is sent once and
never again, not after a timeout and not after a reconnect (the agent's memory of ids does
not survive its restart, so a resend could apply a deploy twice). What an answer means is the
service's business; here it is only matched to the operation it answers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from wire import construct, messages

from .._sessions import Session, SessionManager
from ..store import OperationRecord

__all__ = ["AgentLink", "Outstanding"]

log = logging.getLogger("server.operations")


@dataclass(slots=True)
class Outstanding:
    """One operation on its way to an agent: ``sent`` once queued on a session; then
    ``result`` (answered), ``failure`` (the session ended first) or neither (the deadline)."""

    session_id: str = ""
    agent_id: str = ""
    account: str = ""
    sent_at: float = 0.0
    done: trio.Event = field(default_factory=trio.Event)
    result: messages.OperationResult | None = None
    failure: str = ""
    sent_note: str = ""

    @property
    def sent(self) -> bool:
        return bool(self.session_id)


class AgentLink:
    """This replica's operations in flight to its agents (see the module docstring)."""

    def __init__(self, sessions: SessionManager, *, max_in_flight: int, wait_ms: int) -> None:
        self._sessions = sessions
        self._slots = trio.Semaphore(max(1, max_in_flight))
        self.wait_ms = wait_ms
        self.outstanding: dict[str, Outstanding] = {}
        #: The registry's name serving an operation (record, payload): its account, or the
        #: shard of it that owns what it writes (ops/_shard_route.py; the service sets it).
        self.route: Callable[[OperationRecord, str], str] = lambda record, _payload: record.account
        sessions.add_close_listener(self._session_closed)

    def primary(self, account: str) -> Session | None:
        """The account's PRIMARY session on this replica, if it is open."""
        session = self._sessions.primary_session(account)
        return None if session is None or session.ended_reason else session

    async def send(
        self, record: OperationRecord, payload_json: str, *, deadline: float, note: str = ""
    ) -> Outstanding | None:
        """Send ``record``'s operation (``payload_json`` whole) to the account's PRIMARY
        session here and wait for its end until ``deadline`` (trio's clock). None: no primary
        session here (nothing sent). Not ``sent``: no slot was free before the deadline.
        ``note`` starts the Outstanding's ``sent_note``."""
        serving = self.route(record, payload_json)
        if self.primary(serving) is None:
            return None
        waiting = Outstanding()
        with trio.move_on_at(deadline):
            async with self._slots:
                session = self.primary(serving)
                if session is None:
                    return None
                waiting.session_id, waiting.agent_id = session.session_id, session.agent_id
                waiting.account = record.account
                waiting.sent_at = trio.current_time()
                waiting.sent_note = (
                    f"{note}sent to agent {session.agent_id} (session {session.session_id})"
                )
                self.outstanding[record.id] = waiting
                try:
                    self._post(record, payload_json, session)
                    await waiting.done.wait()
                finally:
                    self.outstanding.pop(record.id, None)
        return waiting

    def _post(self, record: OperationRecord, payload_json: str, session: Session) -> None:
        # deadline_ms is RELATIVE: the milliseconds this wait has left now (the task's real
        # deadline, not a fresh waitMs), so the agent needs no clock in common with us.
        left_s = trio.current_effective_deadline() - trio.current_time()
        if not math.isfinite(left_s):
            left_s = self.wait_ms / 1000
        # wire.construct: betterproto's constructor costs ~80 us per message here, and the
        # values are ours, of the fields' types.
        operation = construct(
            messages.Operation,
            {
                "id": record.id,
                "account": record.account,
                "type": record.type,
                "payload_json": payload_json,
                "deadline_ms": max(1, int(min(max(0.0, left_s), self.wait_ms / 1000) * 1000)),
            },
        )
        if not session.post(construct(messages.ServerMessage, {"operation": operation})):
            waiting = self.outstanding.get(record.id)
            if waiting is not None:
                waiting.failure = (
                    f"could not queue the operation: its session ended "
                    f"({session.ended_reason or 'closed'}); nothing was sent"
                )
                waiting.done.set()

    def _session_closed(self, session: Session) -> None:
        """The session manager's close listener: fail what is outstanding on ``session``."""
        reason = session.ended_reason or "its session closed"
        for op_id, waiting in self.outstanding.items():
            if waiting.session_id != session.session_id or waiting.done.is_set():
                continue
            waiting.failure = (
                f"agent {waiting.agent_id} disconnected before answering ({reason}); "
                "the operation may or may not have been applied, and it is not resent"
            )
            log.warning(
                "operation %s on account %s: %s",
                op_id,
                waiting.account,
                waiting.failure,
                extra={"account": waiting.account},
            )
            waiting.done.set()

    def answered(self, session: Session, result: messages.OperationResult) -> str:
        """Match an agent's answer: "" when it ends an outstanding operation; else why not
        ("refused": another session answered it; "late": nothing waits for it)."""
        waiting = self.outstanding.get(result.id)
        if waiting is None or waiting.done.is_set():
            return "late"
        if waiting.session_id != session.session_id:
            return "refused"
        waiting.result = result
        waiting.done.set()
        return ""
