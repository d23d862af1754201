"""The operations sub-package's exceptions (part of the server's one tree).

::

    ServerError
    └── OperationError            an operations request was refused before any task existed
        ├── UnknownOperation      the operation name is not one this server runs
        ├── UnknownCredentials    the account is unknown ("credentials not found (name: X, ...)")
        ├── InvalidDescription    a description field is malformed (carries the field path)
        ├── RulesViolated         a target is outside the account's namespaces/kinds (errors)
        └── OperationsUnavailable the server cannot take operations now (not running, full)

Failures AFTER a task exists (no agent, timeout, a Kubernetes refusal) are never raised to
the caller: they fail the task and show in its status and EXCEPTION result object.
"""

from __future__ import annotations

from .._errors import ServerError

__all__ = [
    "InvalidDescription",
    "OperationError",
    "OperationsUnavailable",
    "RulesViolated",
    "UnknownCredentials",
    "UnknownOperation",
]


class OperationError(ServerError):
    """Root of the refusals; ``message`` is what the caller reads."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownOperation(OperationError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown operation {name!r}; this server runs: {', '.join(known)}")
        self.name = name


class UnknownCredentials(OperationError):
    def __init__(self, name: str, known: list[str]) -> None:
        # Clouddriver's wording, so that Spinnaker users recognise it.
        super().__init__(f"credentials not found (name: {name}, names: [{', '.join(known)}])")
        self.name = name


class InvalidDescription(OperationError):
    """``field`` is the path inside the request, e.g. ``deployManifest.manifests[1]``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class RulesViolated(OperationError):
    """Clouddriver's "Validation Failed": ``errors`` holds its error strings, one per target."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("Validation Failed")
        self.errors = errors


class OperationsUnavailable(OperationError):
    pass
