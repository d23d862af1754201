"""The byte budget and the coalescing backpressure channel (pure trio; imports none of ours).

``ByteBudget`` bounds the bytes of events between the Kubernetes watches and the server's
acknowledgement; ``open_event_channel`` gives producers an ``EventSender`` (clone one per
producer) and the link an ``EventReceiver`` that takes batches and acknowledges them.
Pending entries of one key coalesce (newest value, newest place: the merged entry moves to
where its newest value was sent, so each producer's values are taken in send order);
BARRIER entries are never coalesced and nothing coalesces across them. See ``budget._channel``
for the theory of operation and ``budget._errors`` for the exceptions.
"""

from ._budget import BudgetCore, BudgetStatistics, ByteBudget
from ._channel import open_event_channel
from ._entries import Entry, EntryKind, merge
from ._errors import BudgetClosed, BudgetError
from ._queue import CoalescingQueue
from ._receiver import EventReceiver
from ._sender import EventSender
from ._state import Batch, ChannelStatistics

__all__ = [
    "Batch",
    "BudgetClosed",
    "BudgetCore",
    "BudgetError",
    "BudgetStatistics",
    "ByteBudget",
    "ChannelStatistics",
    "CoalescingQueue",
    "Entry",
    "EntryKind",
    "EventReceiver",
    "EventSender",
    "merge",
    "open_event_channel",
]
