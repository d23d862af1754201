"""Why an operation failed, as the server is told (``error_code`` + ``error_message``).

Tree (every class subclasses ``agent.AgentError`` through :class:`OperationError`)::

    OperationError(message, code)
    ├── InvalidOperation      "Invalid"      the description is wrong (what and where)
    ├── UnsupportedOperation  "Unsupported"  this kind does not support this verb
    ├── KubernetesRefusal     "KubernetesError <code>"  the API server said no (its message)
    ├── OperationTimeout      "Timeout"      the deadline passed before or while running
    └── AgentUnavailable      "Unavailable"  no client for the account, or too many queued

The executor turns each into ``OperationResult(ok=False, error_code=..., error_message=...)``;
nothing else escapes as a stack trace.
"""

from __future__ import annotations

from .._errors import AgentError, KubeStatusError

__all__ = [
    "AgentUnavailable",
    "InvalidOperation",
    "KubernetesRefusal",
    "OperationError",
    "OperationTimeout",
    "UnsupportedOperation",
]


class OperationError(AgentError):
    """An operation could not be carried out; ``code`` is the short error_code."""

    code = "Error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidOperation(OperationError):
    """The operation's description is wrong; the message names the field."""

    code = "Invalid"


class UnsupportedOperation(OperationError):
    """The kind does not support the verb (the message names both), or the type is unknown."""

    code = "Unsupported"


class KubernetesRefusal(OperationError):
    """The API server refused a request; the message is its Status message."""

    def __init__(self, message: str, *, status_code: int, reason: str = "") -> None:
        super().__init__(message, code=f"KubernetesError {status_code}")
        self.status_code = status_code
        self.reason = reason

    @classmethod
    def from_status(cls, exc: KubeStatusError) -> KubernetesRefusal:
        return cls(exc.message or str(exc), status_code=exc.code, reason=exc.reason)


class OperationTimeout(OperationError):
    """The operation's deadline passed."""

    code = "Timeout"


class AgentUnavailable(OperationError):
    """The agent cannot run it now: no client for the account, or the queue is full."""

    code = "Unavailable"
