"""The orchestration task, as Clouddriver shows it to Orca. Pure (no I/O, no clock reads).

Theory of operation. A task is created RUNNING with the history line ORCHESTRATION
"Initializing Orchestration Task". For each operation, in order: "Processing op: <Class>",
then the operation's own phases (from the agent's result), and its result object (if any).
The first failure ends the task: an ORCHESTRATION line "Orchestration failed: <Class> |
<error>: [<message>]" and an EXCEPTION result object; otherwise, after the last operation,
"Orchestration completed.". Once ended a task never changes again (``ended`` is final), and
``completed`` is true whichever way it ended; Kubernetes operations are never retryable.

``to_json`` is the exact body of ``GET /task/{id}``; ``from_json`` reads it back (the store
keeps it, so tasks and clientRequestId de-duplication survive a restart).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

__all__ = ["Task", "TaskState"]

ORCHESTRATION = "ORCHESTRATION"
_MAX_HISTORY = 1000  # a bound: an agent's phases list cannot grow a task without limit
_MAX_MESSAGE = 4000


class TaskState:
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclass(slots=True)
class Task:
    """One task; mutate it only through its methods."""

    id: str
    request_id: str
    owner_id: str
    start_time_ms: int
    history: list[dict[str, str]] = field(default_factory=list)
    result_objects: list[dict[str, Any]] = field(default_factory=list)
    state: str = TaskState.RUNNING
    operations: list[str] = field(default_factory=list)  # operation ids, in order
    accounts: list[str] = field(default_factory=list)
    end_time_ms: int | None = None
    # ``to_json`` encoded, kept until the task next changes: Orca polls a running task every
    # 100 ms or so and it changes a few times in its life (see ``encoded``).
    _encoded: bytes | None = field(default=None, repr=False, compare=False)

    @classmethod
    def create(
        cls,
        id: str,
        *,
        request_id: str,
        owner_id: str,
        now_ms: int,
        accounts: list[str] | None = None,
    ) -> Task:
        task = cls(id, request_id, owner_id, now_ms, accounts=list(accounts or []))
        task.log(ORCHESTRATION, "Initializing Orchestration Task")
        return task

    def copy(self) -> Task:
        """An independent copy (to render an end before showing it)."""
        return replace(
            self,
            history=list(self.history),
            result_objects=list(self.result_objects),
            operations=list(self.operations),
            accounts=list(self.accounts),
        )

    @property
    def ended(self) -> bool:
        return self.state != TaskState.RUNNING

    @property
    def failed(self) -> bool:
        return self.state == TaskState.FAILED

    def encoded(self) -> bytes:
        """``to_json`` as JSON bytes, encoded once per change of the task (every mutation goes
        through the methods below, which drop it)."""
        if self._encoded is None:
            self._encoded = msgspec.json.encode(self.to_json())
        return self._encoded

    def log(self, phase: str, status: str) -> None:
        """Append a history line (dropped once the bound is reached, but never the last one)."""
        if self.ended:
            return
        self._encoded = None
        if len(self.history) >= _MAX_HISTORY:
            self.history[-1] = {"phase": phase, "status": status[:_MAX_MESSAGE]}
            return
        self.history.append({"phase": phase, "status": status[:_MAX_MESSAGE]})

    def begin_operation(self, operation_id: str, class_name: str) -> None:
        self._encoded = None
        self.operations.append(operation_id)
        self.log(ORCHESTRATION, f"Processing op: {class_name}")

    def add_phases(self, phases: list[dict[str, Any]] | None, default_phase: str) -> None:
        """The operation's own history lines, as the agent reported them."""
        for line in phases or []:
            if not isinstance(line, dict):
                continue
            phase = str(line.get("phase") or default_phase)
            self.log(phase, str(line.get("status") or ""))

    def add_result(self, result: Any) -> None:
        if self.ended or result is None:
            return
        if isinstance(result, dict):
            self._encoded = None
            self.result_objects.append(result)

    def complete(self, now_ms: int) -> None:
        if self.ended:
            return
        self.log(ORCHESTRATION, "Orchestration completed.")
        self.state = TaskState.SUCCEEDED
        self.end_time_ms = now_ms
        self._encoded = None

    def fail(self, operation: str, error: str, message: str, now_ms: int) -> None:
        """End the task failed: the history line and the EXCEPTION object Orca/Deck read."""
        if self.ended:
            return
        message = message[:_MAX_MESSAGE]
        self.log(ORCHESTRATION, f"Orchestration failed: {operation} | {error}: [{message}]")
        self.result_objects.append(
            {
                "type": "EXCEPTION",
                "message": message,
                "cause": error,
                "details": [{"message": message}],
                "operation": operation,
            }
        )
        self.state = TaskState.FAILED
        self.end_time_ms = now_ms
        self._encoded = None

    def status(self) -> dict[str, Any]:
        last = self.history[-1] if self.history else {"phase": ORCHESTRATION, "status": ""}
        return {
            "phase": last["phase"],
            "status": last["status"],
            "complete": self.ended,
            "completed": self.ended,
            "failed": self.failed,
            "retryable": False,
        }

    def to_json(self) -> dict[str, Any]:
        """The body of ``GET /task/{id}`` (Clouddriver's shape; extra keys after its own)."""
        return {
            "id": self.id,
            "requestId": self.request_id,
            "ownerId": self.owner_id,
            "startTimeMs": self.start_time_ms,
            "status": self.status(),
            "history": [dict(line) for line in self.history],
            "resultObjects": list(self.result_objects),
            "sagaIds": [],
            "outputs": [],
            "retryable": False,
            # kubesvc's own additions (Orca ignores unknown keys).
            "endTimeMs": self.end_time_ms,
            "operationIds": list(self.operations),
            "accounts": list(self.accounts),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        """Read back ``to_json``'s output; ValueError when it is not a task."""
        try:
            status = data["status"]
            task = cls(
                id=str(data["id"]),
                request_id=str(data.get("requestId") or ""),
                owner_id=str(data.get("ownerId") or ""),
                start_time_ms=int(data["startTimeMs"]),
                history=[
                    {"phase": str(h["phase"]), "status": str(h["status"])}
                    for h in data.get("history", [])
                ],
                result_objects=list(data.get("resultObjects", [])),
                operations=[str(o) for o in data.get("operationIds", [])],
                accounts=[str(a) for a in data.get("accounts", [])],
                end_time_ms=data.get("endTimeMs"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a stored task: {exc!r}") from exc
        if status.get("completed"):
            task.state = TaskState.FAILED if status.get("failed") else TaskState.SUCCEEDED
            task._encoded = None
        return task
