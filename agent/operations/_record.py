"""What the executor records of each operation for the agent's ``/operations`` view.

The agent's ``AgentStatus`` (agent/_status.py) keeps the bounded history and satisfies
:class:`OperationLog`; the executor only fills in the record it is handed, so operations
never import the composition above them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["OperationLog", "OperationRecord"]


@dataclass(slots=True)
class OperationRecord:
    """One operation the server sent, as ``/operations`` lists it."""

    id: str
    account: str
    type: str
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    ok: bool | None = None  # None while running
    error: str = ""


class OperationLog(Protocol):
    """Where the executor records the operations it starts (``AgentStatus``)."""

    def operation_started(self, id: str, account: str, type: str) -> OperationRecord: ...
