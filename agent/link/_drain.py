"""The link's drain on shutdown (``Link.drain``, on SIGTERM): its theory, its state and the
answer to an operation it ends. The code is in two places: ``Link.drain`` (agent/link/_link.py)
for the operations, which outlive sessions, and ``Session.drain_when_asked``
(agent/link/_session.py) for the stream.

Theory of operation. The session's *drain* task stops every account runner (no new watch
data), lets the sender empty the channel and waits for the Acks of everything sent.
Meanwhile running operations may finish until a little before the deadline (``deadline``
less a quarter of the drain, at most RESULTS_RESERVE_SECONDS); those still running then are
cancelled and answered ``Unavailable`` ("the agent is shutting down ... retry it"), and
operations that arrive during the drain are answered so at once. Once the results are sent,
the stream is ended (half-close) and the server's OK awaited; the session ends and no session
follows it. ``Link.drain`` returns then, or at once when no session is connected; the caller
bounds the whole drain with a cancel scope and then cancels the link.

(The server's own drain is another matter: it ends the agent's call with ``wire.DRAINING``,
and the link reconnects at once; see agent/link/_link.py.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from wire import messages

__all__ = ["RESULTS_RESERVE_SECONDS", "Drain", "shutting_down"]

#: A drain keeps this long (at most a quarter of the drain) to send the results of the
#: operations it had to end, and to close the stream.
RESULTS_RESERVE_SECONDS = 5.0


@dataclass(slots=True)
class Drain:
    """A drain in progress (see the module docstring)."""

    deadline: float
    operations_deadline: float
    operations_done: trio.Event = field(default_factory=trio.Event)
    link_closed: trio.Event = field(default_factory=trio.Event)


def shutting_down(operation: messages.Operation, what: str) -> messages.OperationResult:
    """The answer to an operation a drain refused or ended: retryable (Unavailable)."""
    return messages.OperationResult(
        id=operation.id,
        account=operation.account,
        ok=False,
        error_code="Unavailable",
        error_message=(
            f"the agent is shutting down (SIGTERM) and {what}; {operation.type} may be "
            "partly applied: retry it"
        ),
    )
