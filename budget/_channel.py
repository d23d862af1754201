"""The coalescing event channel: producers -> (budget, coalescing queue) -> one consumer.

Theory of operation. Every byte of an entry is reserved from a ByteBudget when the entry is
admitted and released when the batch holding it is acknowledged (or the receiver closes).
``send_many(group)`` admits the whole group at once whenever it can, for one checkpoint:

- Fast path: no sender of this channel is waiting, the group fits the pending-entry cap, and
  the budget grants the group's full size (as if nothing coalesced). The group is queued and
  the bytes of the entries it replaced come straight back.
- Exact path: otherwise the exact cost is planned. A group whose net cost is <= 0 (only
  replacements no larger than what they replace) never waits, even behind waiting senders:
  it only returns bytes. A group with a positive net cost takes it if nobody waits ahead.
- Slow path: the sender queues on the channel's FIFO admission lock (so senders are served
  in arrival order, and a sender's later groups wait behind its earlier ones), waits for
  entry room if the pending-entry cap is reached, then waits in the budget's FIFO for the
  group's *worst-case* size: what it would coalesce with may be taken while it waits, so the
  exact cost is not stable. Once granted, the group is admitted and the surplus released.

Coalescing and order. A pending entry with the key of a newly sent one is replaced by the
merge of the two (``budget._entries``), which takes the newest place: it moves to the back of
the queue (never across a BARRIER: coalescing does not cross one). So the order entries are
taken in is the order of their newest values, and each producer's values come out in the
order it sent them. Keeping the oldest place instead would let a newer value overtake older
ones of other keys, and a consumer that records "the last value committed" as its resume
point (the server's resourceVersion per kind) could skip the overtaken ones after a reconnect.

Coalescing and the budget. A replaced pending entry is charged the newest entry's size.
When the budget is full: a replacement no larger than what it replaces never waits (it gives
the difference back at once, which may wake a waiting sender); a larger replacement is like
any positive cost: it takes the difference at once if that fits and nobody waits ahead,
otherwise it queues and, once its worst case (its full size) is granted, returns the size of
what it replaced. Charges are exact at every checkpoint: budget in use == pending + in-flight
bytes of every channel on the budget (plus whatever other users reserved directly).

A group larger than the budget (or than max_pending_entries) is split into chunks admitted
in order; an entry larger than the whole budget is a chunk of its own and is admitted only
when nothing else is in flight (the budget's single-oversize rule). If a send is cancelled
while waiting, the chunks admitted before the wait stay sent and the rest are not sent.

Closing follows trio's memory channels: closing the receiver returns every pending and
in-flight byte and wakes waiting senders with BrokenResourceError; closing a sender wakes
its own waiting sends with ClosedResourceError; when every sender is closed the receiver
drains what is pending and then gets EndOfChannel.
"""

from __future__ import annotations

from ._budget import ByteBudget
from ._receiver import EventReceiver
from ._sender import EventSender
from ._state import ChannelState


def open_event_channel(
    budget: ByteBudget, *, max_pending_entries: int = 1_000_000
) -> tuple[EventSender, EventReceiver]:
    """A coalescing channel whose entries are charged against ``budget``.

    At most ``max_pending_entries`` entries wait to be taken (senders wait beyond that); the
    bytes of pending and in-flight entries are bounded by the budget. The budget may be
    shared; the channel reserves and releases only its own entries' bytes.
    """
    state = ChannelState(budget, max_pending_entries)
    return EventSender(state), EventReceiver(state)
