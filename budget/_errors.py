"""The exceptions of the budget package.

The tree::

    BudgetError                 root of every error this package raises itself
    └── BudgetClosed            the ByteBudget was closed: no more reservations

Misuse of an argument (a negative size, releasing more than is in use, acknowledging a batch
twice) raises ``ValueError`` with a message that says what was wrong, as trio does. The event
channel's end-of-stream and closed/broken conditions are trio's own exceptions, raised exactly
as trio's memory channels raise them, so code that drives both behaves the same:

- ``trio.EndOfChannel``: every sender is closed and nothing is pending any more;
- ``trio.ClosedResourceError``: this end (the object you called) was closed;
- ``trio.BrokenResourceError``: the other end was closed (senders see this once the
  receiver is closed);
- ``trio.BusyResourceError``: two tasks tried to receive from one receiver at once.
"""

from __future__ import annotations


class BudgetError(Exception):
    """Root of the budget package's own exceptions."""


class BudgetClosed(BudgetError):
    """The ByteBudget was closed; reservations are refused (releases are still counted)."""
